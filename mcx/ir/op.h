// The closed, enumerated, versioned op set of the staged IR.
//
// Conventions shared by every layer (shape rules in shape_rules.cc, kernels in backend/cpu, VJP rules in
// autodiff, the printer/parser, the fingerprint, export):
//  - Every op has exactly one result.
//  - Binary and ternary elementwise ops take operands of identical shape and dtype (the ops library
//    broadcasts and promotes before emitting); comparisons return bool.
//  - Attribute names are fixed per op (table below); attribute values are Attr (attrs.h).
//  - Changing the meaning of an op, its operands or attributes, or adding an op, bumps kOpsetVersion.
//
// op                   operands                        attributes (name: kind)                result
// constant             -                               value: Buffer                           value's type
// iota                 -                               dtype, shape: dims, dimension: int      dtype[shape]
// <unary>              x                               -                                       like x
//   neg abs sign exp log log1p expm1 tanh logistic sqrt rsqrt floor ceil round sin cos not stop_gradient
//   erf (opset 4: the error function, 2/sqrt(pi) * integral of exp(-t^2) from 0 to x)
//   erfc erf_inv (opset 5: 1 - erf(x) without its cancellation for large x; the inverse of erf, +-inf at
//   +-1, NaN outside [-1, 1])
//   (round: half away from zero; not: logical for bool, bitwise for integers; floor/ceil/round and the
//    transcendental ops need a floating dtype; abs/neg/sign any numeric)
// remat_barrier        x                               region: int (>= 0), role: int (0, 1, 2) like x
//   (opset 6) The identity, marking a rematerialised region (checkpoint): role 0 marks an input of region
//   `region`, role 1 an output, role 2 an input of its recomputation in a backward pass. Reverse mode
//   recomputes the values computed from a region's inputs instead of keeping them (autodiff.h). Its own
//   attributes keep the recomputed copy apart from the forward one under common-subexpression elimination.
//   Any dtype; element-wise (class unary), so it partitions and batches like one; the CPU backend aliases it.
// is_finite            x (floating)                    -                                       bool like x
// convert              x                               dtype                                   dtype like x
// <binary>             x, y                            -                                       like x
//   add sub mul div rem pow max min and or xor
//   (div on integers truncates toward zero as in C; rem has the sign of x; and/or/xor bool or integer)
// <compare>            x, y                            -                                       bool like x
//   eq ne lt le gt ge
// select               pred(bool), on_true, on_false   -                                       like on_true
// clamp                lo, x, hi (all same shape)      -                                       like x
// broadcast_in_dim     x                               shape: dims, broadcast_dimensions: ints x.dtype[shape]
//   (operand dim i maps to result dim broadcast_dimensions[i], strictly increasing; the operand dim
//    must equal the result dim or be 1)
// reshape              x                               shape: dims                             x.dtype[shape]
// transpose            x                               permutation: ints                       permuted
// slice                x                               start: dims, limit: dims, strides: ints
// dynamic_slice        x, i_0..i_{r-1} (int scalars)   sizes: dims  (starts clamped into range as XLA)
// dynamic_update_slice x, update, i_0..i_{r-1}         -  (starts clamped)                     like x
// concatenate          x_0..x_{n-1} (n >= 1)           dimension: int
// pad                  x, padding_value (scalar)       low: dims, high: dims, interior: ints (low/high may
//                                                      be negative)
// reverse              x                               dimensions: ints
// reduce_sum/max/min/prod x                            dimensions: ints (sorted, unique)       dims removed
// argmax/argmin        x                               dimension: int, index_dtype: dtype      dim removed
//   (first index of the extreme value; NaN counts as the extreme)
// dot_general          lhs, rhs                        lhs_batch, rhs_batch, lhs_contracting,
//                                                      rhs_contracting: ints
//   result dims: batch dims (in lhs_batch order), then lhs free dims, then rhs free dims; same dtypes.
// cumsum               x                               dimension: int, reverse: int (0/1)      like x
// argsort              x (any non-bool dtype)          dimension: int, descending: int (0/1)   i32 like x
//   (opset 4: the positions that sort x along `dimension`, stable: equal elements keep their order; NaN
//    sorts above +inf, so last ascending and first descending; -0 and +0 are equal)
// take                 x[N, ...], indices (int)[k...]  -                                       [k..., ...]
//   (rows of x along axis 0; out-of-range indices are clamped as in XLA gather)
// scatter_add          x[N, ...], indices[k...], updates[k..., ...]   -                        like x
//   (adds each update row into x at its index; clamped; the VJP of take)
// threefry2x32         key u32[2], counts u32[..., 2]  -                                       u32[..., 2]
//   (Threefry-2x32 with 20 rounds as in JAX/Random123: each row of counts is encrypted under key)
//
// SPMD ops (opset 2). They appear in per-device programs made by the partitioner (mcx/spmd) and by
// shard_map. A "partition id" is a device's position in the executable's device assignment (row-major
// over the mesh). `replica_groups` lists partition ids flattened, group after group, each group of
// `group_size` members in group order (all_gather concatenates in that order); every partition id
// 0..N-1 appears in exactly one group. Run without an execution context (cpu::ExecutionContext) a
// program is partition 0 of 1 and its groups must have size 1 (a group of size 1 is a no-op).
// all_reduce           x (numeric, or bool for max/min) reduce: int (ReduceOp: 0 sum, 1 max, 2 min,
//                                                      3 prod), replica_groups: ints, group_size: int  like x
// all_gather           x (rank >= 1)                   dimension: int, replica_groups, group_size
//                                                      x with dims[dimension] *= group_size
// reduce_scatter       x (numeric)                     dimension, reduce, replica_groups, group_size
//                                                      x with dims[dimension] /= group_size (must divide)
// all_to_all           x                               split_dimension: int, concat_dimension: int,
//                                                      replica_groups, group_size
//   (x is cut into group_size blocks along split_dimension; block j goes to member j; the received
//    blocks are concatenated along concat_dimension in member order)
// collective_permute   x                               source_target_pairs: ints (flattened
//                                                      src0, dst0, src1, dst1, ...)          like x
//   (each source sends x to its target; a partition that is no pair's target receives zeros; a source
//    or target appears at most once)
// axis_index           -                               mesh_shape: ints, axis: int           i32[]
//   ((partition_id / prod(mesh_shape[axis+1:])) % mesh_shape[axis]: the device's coordinate on a mesh
//    axis)
// sharding_constraint  x                               sharding: ints, mesh_shape: ints      like x
//   (identity on values; tells the partitioner the sharding x must have. `sharding` is the encoded
//    PartitionSpec of spmd/partition_spec.h: per dimension a count n followed by n mesh-axis indices,
//    n = -1 for an unconstrained dimension)
//
// VJP rules: all_reduce sum -> all_reduce sum of the cotangent (pmap convention: each device's gradient
// of its own output; use pmean on gradients for data parallelism); max/min -> summed cotangent masked
// where x equals the result; prod -> summed cotangent times the product of the other members' values
// (exact with zeros: gathered, own row replaced by ones). all_gather <-> reduce_scatter sum;
// reduce_scatter prod: the all_gathered cotangent times the others' product; reduce_scatter max/min: the
// all_gathered cotangent masked where x equals the all_gathered result;
// all_to_all -> all_to_all with split/concat swapped; collective_permute -> the inverse permutation;
// sharding_constraint -> identity. axis_index is not differentiable.
//
// Convolution and windowed reductions (opset 3; window_rules.h decodes and checks their attributes).
// conv_general_dilated lhs, rhs (same floating      lhs_spec, rhs_spec, out_spec: ints;    lhs dtype
//                      dtype, equal rank N + 2)        window_strides, lhs_dilation,
//                                                      rhs_dilation: ints (N each, >= 1);
//                                                      padding_low, padding_high: dims (N each, may
//                                                      be negative); feature_group_count: int (>= 1)
//   JAX's lax.conv_general_dilated with batch_group_count 1. The specs are JAX's ConvDimensionNumbers:
//   lhs_spec = (batch dim, feature dim, spatial dims...), rhs_spec = (output-feature dim, input-feature
//   dim, spatial dims...), out_spec = (batch dim, feature dim, spatial dims...); each a permutation of
//   0..N+1. Spatial dim i of the result: lhs dim lhs_spec[2+i] dilated by lhs_dilation[i]
//   ((n - 1) * d + 1, 0 when n == 0), padded by padding_low[i] / padding_high[i], then windows of the
//   rhs dim rhs_spec[2+i] dilated by rhs_dilation[i] at stride window_strides[i]:
//   (padded - dilated_window) // stride + 1; the padded size must be at least the dilated window.
//   With G = feature_group_count, the lhs features C and rhs output features O split into G groups;
//   rhs input features must be C / G and output-feature group g sees lhs feature group g.
// reduce_window        x                               reduce: int (0 sum, 1 max, 2 min),      x.dtype
//                                                      window_dimensions, window_strides: ints
//                                                      (rank entries, >= 1), padding_low,
//                                                      padding_high: dims (rank entries, >= 0)
//   Each result element reduces one window of x padded with the reduction's identity (0, lowest,
//   highest); result dim i = (x dim + low + high - window) // stride + 1 (the padded size must be at
//   least the window). max/min propagate NaN; sum needs a numeric dtype; max/min any but bool.
// VJP rules: conv_general_dilated -> the transposed convolutions (JAX's rules: lhs gets the convolution of
// the cotangent with the spatially reversed, feature-swapped rhs; rhs gets the convolution of lhs with
// the cotangent; feature groups move between the feature and batch dims by reshapes). reduce_window
// sum -> the cotangent padded (interior stride - 1) and summed over windows; max/min -> select and
// scatter: each window's cotangent goes to the first element (in row-major window order) equal to its
// result.
//
// Control flow (opset 7; control_flow.h decodes and checks the attributes). Each op has sub-programs
// (attribute regions) and several results; as every op has one result, a control-flow op with n results
// is n sibling instructions with the same operands and attributes except `result` (0..n-1), each
// yielding that result. Backends run a group of siblings once (siblings share their sub-programs).
// while                carries..., cond consts...,     regions: [cond, body], num_carry: int,    carry `result`
//                      body consts...                  num_cond_consts: int, result: int
//   cond(carries..., cond consts...) -> bool[]; body(carries..., body consts...) -> carries; runs body
//   while cond is true (zero times when it is false at first). The carry types are fixed.
// scan                 carries..., xs..., consts...    regions: [body], num_carry, num_xs,      see below
//                                                      length: int (>= 0), reverse: int (0/1), result
//   body(carries..., x slices..., consts...) -> (carries..., y slices...). Every x has leading dim
//   `length`; iteration t (t = length-1 down to 0 when reverse) sees x[t]. Results: the final carries,
//   then each y stacked along a new leading dim of size `length` (y[t] written at row t).
// cond                 index (i32[]), operands...,     regions: [branch_0, ...] (>= 1),        branch result
//                      each branch's consts...         branch_consts: ints (one count per branch),
//                                                      result: int
//   Runs branch clamp(index, 0, n-1) on (operands..., its consts...); every branch has the same result
//   types. Only the chosen branch runs.
// Transformations handle a sibling group as a whole: reverse mode through scan and cond, forward mode
// through all three, vmap of all three (control_flow_autodiff.h, control_flow_batching.h); reverse mode
// refuses while (unknown trip count). The partitioner partitions their regions (spmd/region_partition.h).
//
// Custom differentiation rules (opset 8; control_flow.h decodes and checks the attributes), as
// jax.custom_vjp / jax.custom_jvp: sibling groups like the control-flow ops, computing fun(args...) while
// carrying the user's rule for the transformations. Backends and the partitioner inline `fun`
// (custom_rules.h: inline_custom_calls) before compiling, so the rule costs nothing at run time.
// custom_vjp_call      args..., fun consts...,         regions: [fun, fwd, bwd],               fun result
//                      fwd consts..., bwd consts...    num_args: int, region_consts: ints (3), result
//   fun(args..., fun consts...) -> outs; fwd(args..., fwd consts...) -> (outs..., residuals...);
//   bwd(residuals..., cotangents of outs..., bwd consts...) -> cotangents of args (the args' types).
//   Reverse mode runs fwd then bwd; forward mode refuses it (as JAX).
// custom_jvp_call      args..., fun consts...,         regions: [fun, jvp],                    fun result
//                      jvp consts...                   num_args: int, region_consts: ints (2), result
//   jvp(args..., tangents of args..., jvp consts...) -> (outs..., tangents of outs...), linear in the
//   tangents. Forward mode runs jvp; reverse mode transposes it (the VJP of jvp with respect to its tangents).
// The constants are arrays the functions close over; differentiating with respect to one is an error
// (pass it as an argument), as JAX refuses custom rules that close over traced values.
//
// shard_map (opset 9; shard_map.h decodes and checks the attributes and states the transformation rules): a
// sibling group like the control-flow ops whose region is a per-device program over a mesh, as a
// jax.shard_map called inside jit or grad.
// shard_map            operands... (global arrays)     regions: [body], mesh_shape: ints,      global result
//                                                      in_specs: ints, out_specs: ints, result
//   Operand i is split over the mesh as in_specs[i] says (per dimension a count n then n mesh-axis
//   indices, the specs of all operands concatenated); body(local pieces...) -> local results, its
//   collectives over partition ids of the mesh; result r is assembled from every device's local result
//   as out_specs[r] says (a mesh axis it does not name: every device along it holds the same value). Runs
//   only partitioned on a mesh of shape mesh_shape (the partitioner inlines the body); a split dimension
//   must be static and divisible.
// debug_print          values... (any)                 format: Buffer (u8 text), partition: int i32[] (zero)
//   (debug_print.h) Prints format with each "{}" replaced by the next value when the program runs: on
//   every device that runs it (partition -1) or on partition `partition` only. Kept for its effect
//   (has_side_effects); not differentiable; batches by printing the batched values.
//
// Dtype rules enforced by infer_type (shape_rules.cc): add sub mul div rem pow clamp neg abs sign,
// reduce_sum/prod, cumsum, dot_general, scatter_add and iota need a numeric (non-bool) dtype; max/min,
// comparisons, select's branches, reduce_max/min, argmax/argmin, reverse and the shape ops take any dtype;
// take/scatter_add indices and dynamic_slice starts are any integer dtype (starts must be scalars);
// argmax/argmin index_dtype is an integer dtype. An attribute that the op does not take is an error.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace mcx::ir {

// 1: the initial op set. 2: SPMD collectives, axis_index, sharding_constraint. 3: conv_general_dilated,
// reduce_window. 4: erf, argsort. 5: erfc, erf_inv. 6: remat_barrier. 7: while, scan, cond.
// 8: custom_vjp_call, custom_jvp_call. 9: shard_map, debug_print.
inline constexpr int kOpsetVersion = 9;

enum class OpKind : uint16_t {
  // nullary
  kConstant,
  kIota,
  // unary elementwise
  kNeg,
  kAbs,
  kSign,
  kExp,
  kLog,
  kLog1p,
  kExpm1,
  kTanh,
  kLogistic,
  kSqrt,
  kRsqrt,
  kFloor,
  kCeil,
  kRound,
  kSin,
  kCos,
  kNot,
  kStopGradient,
  kIsFinite,
  kConvert,
  // binary elementwise
  kAdd,
  kSub,
  kMul,
  kDiv,
  kRem,
  kPow,
  kMax,
  kMin,
  kAnd,
  kOr,
  kXor,
  // comparisons
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  // ternary elementwise
  kSelect,
  kClamp,
  // shape manipulation
  kBroadcastInDim,
  kReshape,
  kTranspose,
  kSlice,
  kDynamicSlice,
  kDynamicUpdateSlice,
  kConcatenate,
  kPad,
  kReverse,
  // reductions
  kReduceSum,
  kReduceMax,
  kReduceMin,
  kReduceProd,
  kArgMax,
  kArgMin,
  // linear algebra and scans
  kDotGeneral,
  kCumsum,
  // indexing
  kTake,
  kScatterAdd,
  // random
  kThreefry2x32,
  // SPMD (opset 2)
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kCollectivePermute,
  kAxisIndex,
  kShardingConstraint,
  // convolution and windowed reductions (opset 3)
  kConvGeneralDilated,
  kReduceWindow,
  // special functions and sorting (opset 4)
  kErf,
  kArgsort,
  // special functions (opset 5)
  kErfc,
  kErfInv,
  // rematerialisation (opset 6)
  kRematBarrier,
  // control flow (opset 7)
  kWhile,
  kScan,
  kCond,
  // custom differentiation rules (opset 8)
  kCustomVjpCall,
  kCustomJvpCall,
  // a per-device body over a mesh, printing from programs (opset 9)
  kShardMap,
  kDebugPrint,
};
inline constexpr int kNumOpKinds = static_cast<int>(OpKind::kDebugPrint) + 1;
// Ops kept for their effect, not their value: passes never drop, merge or fold them (debug_print).
inline bool has_side_effects(OpKind k) { return k == OpKind::kDebugPrint; }
inline bool is_custom_call(OpKind k) { return k == OpKind::kCustomVjpCall || k == OpKind::kCustomJvpCall; }
// Ops with sub-programs (attribute `regions`) and several results as sibling instructions: the
// control-flow ops, the custom-rule calls and shard_map.
inline bool has_regions(OpKind k) {
  return k == OpKind::kWhile || k == OpKind::kScan || k == OpKind::kCond || is_custom_call(k) || k == OpKind::kShardMap;
}
inline bool is_collective(OpKind k) {
  return k == OpKind::kAllReduce || k == OpKind::kAllGather || k == OpKind::kReduceScatter ||
         k == OpKind::kAllToAll || k == OpKind::kCollectivePermute;
}

enum class OpClass : uint8_t { kNullary, kUnary, kBinary, kCompare, kTernary, kOther };

struct OpInfo {
  OpKind kind;
  std::string_view name;  // text name, e.g. "dot_general"
  OpClass op_class;
  int arity;              // number of operands, -1 for variadic
  bool differentiable;    // has a VJP rule (non-differentiable ops get zero cotangents)
  int opset = 1;          // the opset (kOpsetVersion history above) that introduced the op
};

const OpInfo& op_info(OpKind kind);
std::string_view op_name(OpKind kind);
std::optional<OpKind> op_from_name(std::string_view name);
inline bool is_elementwise(OpKind k) {
  OpClass c = op_info(k).op_class;
  return c == OpClass::kUnary || c == OpClass::kBinary || c == OpClass::kCompare || c == OpClass::kTernary;
}

}  // namespace mcx::ir
