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
//   (round: half away from zero; not: logical for bool, bitwise for integers; floor/ceil/round and the
//    transcendental ops need a floating dtype; abs/neg/sign any numeric)
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
// take                 x[N, ...], indices (int)[k...]  -                                       [k..., ...]
//   (rows of x along axis 0; out-of-range indices are clamped as in XLA gather)
// scatter_add          x[N, ...], indices[k...], updates[k..., ...]   -                        like x
//   (adds each update row into x at its index; clamped; the VJP of take)
// threefry2x32         key u32[2], counts u32[..., 2]  -                                       u32[..., 2]
//   (Threefry-2x32 with 20 rounds as in JAX/Random123: each row of counts is encrypted under key)
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

inline constexpr int kOpsetVersion = 1;

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
};
inline constexpr int kNumOpKinds = static_cast<int>(OpKind::kThreefry2x32) + 1;

enum class OpClass : uint8_t { kNullary, kUnary, kBinary, kCompare, kTernary, kOther };

struct OpInfo {
  OpKind kind;
  std::string_view name;  // text name, e.g. "dot_general"
  OpClass op_class;
  int arity;              // number of operands, -1 for variadic
  bool differentiable;    // has a VJP rule (non-differentiable ops get zero cotangents)
};

const OpInfo& op_info(OpKind kind);
std::string_view op_name(OpKind kind);
std::optional<OpKind> op_from_name(std::string_view name);
inline bool is_elementwise(OpKind k) {
  OpClass c = op_info(k).op_class;
  return c == OpClass::kUnary || c == OpClass::kBinary || c == OpClass::kCompare || c == OpClass::kTernary;
}

}  // namespace mcx::ir
