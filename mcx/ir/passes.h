// Rewrite passes over Programs. Every pass returns a new Program (the input is not modified) whose
// values are renumbered densely; parameters keep their numbers. Thread-safety: pure functions (the
// evaluator passed to fold_constants is called on the calling thread).
#pragma once

#include <unordered_map>

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "mcx/core/buffer.h"
#include "mcx/ir/program.h"

namespace mcx::ir {

// Which instructions are kept for their effect: a debug_print (op.h has_side_effects), or an op with regions
// one of whose regions holds such an instruction (a loop that prints). Each distinct region is scanned once
// per EffectScan, so nested loops whose regions are shared by siblings cost linear time.
class EffectScan {
 public:
  bool has_effects(const Instr& instr);
  bool has_effects(const Program& program);

 private:
  std::unordered_map<const Program*, bool> memo_;
};

// Removes instructions whose values do not reach a result, except those kept for their effect
// (EffectScan) and what they read. Parameters are always kept.
Program eliminate_dead_code(const Program& program);
// Removes the instructions kept only for their effect, inside regions too, then dead code: a program that
// recomputes what another one already ran (a pullback replaying its forward pass, the backward body of a
// loop, the tangent body of a loop next to its primal loop) prints nothing again.
Program drop_side_effects(const Program& program);

// Replaces an instruction by an earlier one with the same kind, operands (after earlier replacements),
// attributes (constants compared bitwise, so constants with different data stay apart) and type.
// Every op but those kept for their effect (never merged: two prints print twice) takes part. The replaced instructions become dead and are removed.
// This includes the SPMD ops: every partition runs the same program, so two identical collectives (same
// operand, attributes and groups) or axis_index ops give the same value on each partition, and merging
// them removes the same collective on every member. Different groups or attributes never merge.
Program eliminate_common_subexpressions(const Program& program);

// Evaluates one instruction on concrete operand values (the IR layer must not depend on a backend, so
// the caller passes e.g. the CPU interpreter). Receives the instruction as it appears in the input
// program (operand ids refer to that program) and one Buffer per operand; returns the result, which
// must have the instruction's type.
using ConstantEvaluator = std::function<absl::StatusOr<Buffer>(const Instr&, std::span<const Buffer>)>;

struct FoldOptions {
  // Results with more elements than this are not folded (folding would bloat the program).
  int64_t max_elements = int64_t{1} << 20;
};

// Replaces every instruction that has at least one operand, all of them constants (after earlier
// folding), and a static result type of at most options.max_elements elements by a constant computed
// by evaluate; then removes dead code. Nullary ops (constant, iota, axis_index) are left as they are;
// collectives (their value depends on other partitions) and sharding_constraint (the partitioner must
// see it) are never folded.
// Errors: the evaluator's error, prefixed with the instruction; Internal when the evaluator returns a
// Buffer of a different type than the instruction's.
absl::StatusOr<Program> fold_constants(const Program& program, const ConstantEvaluator& evaluate,
                                       const FoldOptions& options = {});

// Substitutes concrete values for dimension variables and re-infers every type. Constraints whose
// variables are all bound are checked and dropped; the others are kept with the values substituted.
// Variables not in dim_values stay symbolic.
// Errors (InvalidArgument, "[specialize] ..."): a value < 1 (dimension variables are >= 1; >= 0 for those the
// scope declares "zero_sized(v)", SymbolicScope::zero_allowed), a variable
// that the program does not mention, a violated constraint (naming it and the values), a parameter
// whose dimension becomes negative, or a shape rule that fails for the concrete sizes.
absl::StatusOr<Program> specialize(const Program& program, const std::map<std::string, int64_t>& dim_values);

// The dimension variable values under which the parameter shapes equal arg_dims (one list of concrete
// dims per parameter), as JAX solves shape-polymorphic arguments: a dimension that is, after
// substituting values already found, of the form k*v + c determines v; the others are then checked.
// Constraints whose variables are all solved are checked too. Feed the result to specialize().
// Errors (InvalidArgument, "[solve_dimension_values] ..."): wrong parameter count or rank, a value that
// does not divide or is < 1, a dimension that disagrees with the solution (naming the parameter, the
// dimension, its expression and both values), a variable that no dimension determines, a violated
// constraint.
absl::StatusOr<std::map<std::string, int64_t>> solve_dimension_values(
    const Program& program, std::span<const std::vector<int64_t>> arg_dims);

}  // namespace mcx::ir
