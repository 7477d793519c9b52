// Attributes, shape rules and sibling groups of the ops with sub-programs (op.h): the control-flow ops of
// opset 7 (while, scan, cond) and the custom-rule calls of opset 8 (custom_vjp_call, custom_jvp_call).
//
// An op with regions and n results is n sibling instructions (same kind, operands and attributes except
// `result`), each yielding one result; the get_* helpers decode and check the attributes once, so that the
// shape rules, the backends, the reference evaluator and the printers read them the same way. Every error
// is InvalidArgument starting with "[op_name] " and says what was expected and what was found, naming the
// carry, operand, branch or result by its position.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/core/shape.h"
#include "mcx/ir/attrs.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/op.h"
#include "mcx/ir/program.h"

namespace mcx::ir {

// while: operands are the initial carries, then cond's constants, then body's constants.
struct WhileConfig {
  std::shared_ptr<const Program> cond;  // (carries..., cond consts...) -> bool[]
  std::shared_ptr<const Program> body;  // (carries..., body consts...) -> carries
  int num_carry = 0;
  int num_cond_consts = 0;
  int result = 0;  // which carry this sibling yields
};

// scan: operands are the initial carries, the scanned arrays xs (leading dim `length`), then constants.
struct ScanConfig {
  std::shared_ptr<const Program> body;  // (carries..., x slices..., consts...) -> (carries..., y slices...)
  int num_carry = 0;
  int num_xs = 0;
  int64_t length = 0;
  bool reverse = false;
  int result = 0;  // < num_carry: a final carry; else the stacked y number result - num_carry
};

// cond: operands are the branch index (i32[]), the operands every branch takes, then each branch's
// constants in branch order (branch_consts[i] of them for branch i).
struct CondConfig {
  Regions branches;  // each (operands..., its consts...) -> results (the same types for every branch)
  std::vector<int64_t> branch_consts;
  int result = 0;
  int num_operands(size_t total_operands) const;  // the shared operands, without index and constants
};

// custom_vjp_call: operands are the args, then fun's, fwd's and bwd's constants.
struct CustomVjpConfig {
  std::shared_ptr<const Program> fun;  // (args..., fun consts...) -> outs
  std::shared_ptr<const Program> fwd;  // (args..., fwd consts...) -> (outs..., residuals...)
  std::shared_ptr<const Program> bwd;  // (residuals..., out cotangents..., bwd consts...) -> arg cotangents
  int num_args = 0;
  std::vector<int64_t> region_consts;  // {fun, fwd, bwd}
  int result = 0;
  int num_outs() const { return static_cast<int>(fun->results.size()); }
  int num_residuals() const { return static_cast<int>(fwd->results.size()) - num_outs(); }
};

// custom_jvp_call: operands are the args, then fun's and jvp's constants.
struct CustomJvpConfig {
  std::shared_ptr<const Program> fun;  // (args..., fun consts...) -> outs
  std::shared_ptr<const Program> jvp;  // (args..., arg tangents..., jvp consts...) -> (outs..., out tangents...)
  int num_args = 0;
  std::vector<int64_t> region_consts;  // {fun, jvp}
  int result = 0;
  int num_outs() const { return static_cast<int>(fun->results.size()); }
};

// What both custom-rule calls hold: their regions (fun first), the number of args and each region's count
// of constants (the operands after the args, in region order).
struct CustomCallParts {
  Regions regions;
  int num_args = 0;
  std::vector<int64_t> region_consts;
  int result = 0;
};

Attrs while_attrs(const WhileConfig& config);
Attrs scan_attrs(const ScanConfig& config);
Attrs cond_attrs(const CondConfig& config);
Attrs custom_vjp_attrs(const CustomVjpConfig& config);
Attrs custom_jvp_attrs(const CustomJvpConfig& config);

// Decode and check the attributes against the number of operands: every attribute present with its kind,
// the counts non-negative and within the operands, `result` within the results. The regions themselves
// are checked by the shape rule.
absl::StatusOr<WhileConfig> get_while_config(const Attrs& attrs, size_t num_operands);
absl::StatusOr<ScanConfig> get_scan_config(const Attrs& attrs, size_t num_operands);
absl::StatusOr<CondConfig> get_cond_config(const Attrs& attrs, size_t num_operands);
absl::StatusOr<CustomVjpConfig> get_custom_vjp_config(const Attrs& attrs, size_t num_operands);
absl::StatusOr<CustomJvpConfig> get_custom_jvp_config(const Attrs& attrs, size_t num_operands);
absl::StatusOr<CustomCallParts> get_custom_call_parts(OpKind kind, const Attrs& attrs, size_t num_operands);

// The types of all results of an op with regions (every sibling's), after checking that its regions'
// parameter and result types fit the operands: the error names e.g. "carry 1: body returns f32[3], the loop
// carries f32[2]". The regions' bodies are not verified here but by verify() (shape_rules.h), once per
// distinct region object.
absl::StatusOr<std::vector<AbstractValue>> control_flow_result_types(OpKind kind,
                                                                     std::span<const AbstractValue> operands,
                                                                     const Attrs& attrs, const SymbolicScope& scope);
// The type of the sibling selected by attrs' `result` (the shape rule of infer_type).
absl::StatusOr<AbstractValue> control_flow_infer_type(OpKind kind, std::span<const AbstractValue> operands,
                                                      const Attrs& attrs, const SymbolicScope& scope);

// Emits the `num_results` siblings of an op with regions (attrs with `result` set to 0..num_results-1) on
// the operands; returns their values in result order. Throws mcx::Error when the op is rejected.
std::vector<ValueId> emit_siblings(ProgramBuilder& b, OpKind kind, const Attrs& attrs,
                                   std::span<const ValueId> operands, int num_results);

// attrs with `result` replaced: the attributes of another sibling.
Attrs with_result_index(Attrs attrs, int result);
// The number of results of the sibling group of `instr` (an instruction with regions; 0 for another).
int num_group_results(const Instr& instr);
// The `result` attribute of an instruction with regions (0 when absent, which verify refuses).
int result_index(const Instr& instr);
// Whether a and b are siblings: instructions with regions of the same kind with the same operands and the
// same attributes apart from `result`.
bool are_siblings(const Instr& a, const Instr& b);

// The refusal of differentiating an op with regions in `mode` ("reverse" or "forward") where JAX refuses
// too: while loops in reverse mode (their trip count is unknown) and custom_vjp_call in forward mode (a
// custom VJP gives no JVP). For any other op it describes an internal error: the transformations handle
// each sibling group as a whole and never ask a per-op rule.
std::string control_flow_autodiff_error(OpKind kind, std::string_view mode);

// Per instruction of program: the index of the first instruction of its sibling group (its own index for
// the first), or -1 for an instruction without regions. Identical instructions (one op repeated on the same
// operands) join one group, so a group may hold a result more than once (autodiff adds their cotangents).
std::vector<int> sibling_group_firsts(const Program& program);

// Whether an instruction of program (not of its regions) is a custom-rule call.
bool has_custom_calls(const Program& program);

}  // namespace mcx::ir
