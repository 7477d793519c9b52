// The shard_map op (opset 9, op.h): a per-device body over a mesh inside a global program, so that
// jax.shard_map composes with jit, grad, jvp and vmap. Decoding and shape rule (used by infer_type and
// the CPU backend's refusal), the replica groups of mesh axes, and the op's transformation rules.
//
// Operands are global arrays; operand i is split as in_specs[i] says (per dimension, the mesh axes it is
// split over, major first) and the body runs on every device with the local pieces, its collectives
// naming partition ids (row-major positions on the mesh, op.h "SPMD ops"). Result r is the body's result r
// on every device, assembled as out_specs[r] says; a mesh axis that out_specs[r] does not name asserts that
// the body returns the same value on every device along it (JAX's check_rep=False: not checked).
// The op is run by partitioning the program on a mesh of shape mesh_shape (spmd/partitioner.h inlines the
// body after resharding its operands); a backend given it unpartitioned refuses it.
//
// Transformations (sibling groups as a whole, like the control-flow ops):
//  - reverse mode: a shard_map whose body recomputes the forward body and runs its VJP (vjp_program) on
//    the local cotangents. Collectives in the body transpose per device (op.h: psum -> psum), and the
//    boundaries make the result the gradient of the global function: a result's cotangent is divided by
//    the number of devices that hold a copy of it (the axes its out_spec does not name), and an operand's
//    cotangent is summed (all_reduce) over the axes its in_spec does not name (the transpose of handing
//    every device the same operand). Memory: the forward body's values are not kept but recomputed.
//  - forward mode: a shard_map of the body's JVP; tangents take their primals' specs.
//  - vmap: a shard_map of the vmapped body; the batch axis is a new leading dimension that no mesh axis
//    splits.
// Errors: InvalidArgument "[shard_map] ..." naming the operand, result or dimension; rule emitters throw
// mcx::Error (the autodiff convention). Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/ir/attrs.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/program.h"

namespace mcx::ir {

// Per dimension of a value, the mesh axes (indices into mesh_shape) it is split over, major first.
using SpecAxes = std::vector<std::vector<int>>;

struct ShardMapConfig {
  std::shared_ptr<const Program> body;  // (local operands...) -> local results
  std::vector<int64_t> mesh_shape;      // axis sizes, major first
  std::vector<SpecAxes> in_specs;       // one per operand, rank entries each
  std::vector<SpecAxes> out_specs;      // one per body result
  int result = 0;                       // which result this sibling yields
};

// Attributes: regions [body], mesh_shape: ints, in_specs / out_specs: ints (each spec per dimension a count n
// then n axis indices, the specs concatenated in operand / result order), result: int.
Attrs shard_map_attrs(const ShardMapConfig& config);
// Decodes and checks the attributes against the operand types: each spec has one entry per dimension of its
// value, names axes of the mesh at most once, and the body has one parameter per operand.
absl::StatusOr<ShardMapConfig> get_shard_map_config(const Attrs& attrs, std::span<const AbstractValue> operands);
// The global types of every result after checking that the body's parameters are the operands' local
// pieces (split dimensions must be static and divisible: "[shard_map] operand 1 dimension 0 (6) is not
// divisible by the 4 devices of mesh axes {1}").
absl::StatusOr<std::vector<AbstractValue>> shard_map_result_types(std::span<const AbstractValue> operands,
                                                                  const Attrs& attrs);

// Number of pieces dimension d of a value is split into.
int64_t spec_shards(const SpecAxes& spec, std::span<const int64_t> mesh_shape, int d);
// The mesh axes of size > 1 that the spec does not name: a value so split is the same on every device
// along them.
std::vector<int> unnamed_axes(const SpecAxes& spec, std::span<const int64_t> mesh_shape);
// The replica groups of a collective over mesh axes `axes` of a mesh of shape mesh_shape: one group per
// combination of the other axes' coordinates (ordered by smallest member), members (row-major positions)
// in the order of their coordinates along `axes`, the first axis major.
std::vector<std::vector<int64_t>> mesh_axis_groups(std::span<const int64_t> mesh_shape, std::span<const int> axes);

namespace internal {

// The transformation rules above, called at a group's first sibling (autodiff.cc, forward.cc,
// control_flow_batching.cc); the signatures are those of the control-flow rules (control_flow_autodiff.h).
std::vector<ValueId> emit_shard_map_vjp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                        std::span<const std::optional<ValueId>> result_cts,
                                        const std::vector<bool>& needed);
std::vector<ValueId> emit_shard_map_jvp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                        std::span<const ValueId> tangents);
std::vector<ValueId> emit_shard_map_batching(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                             const std::vector<bool>& batched, const DimExpr& size);

}  // namespace internal
}  // namespace mcx::ir
