// Attributes, shape rules and sibling groups of the control-flow ops of opset 7 (op.h): while, scan, cond.
//
// A control-flow op with n results is n sibling instructions (same kind, operands and attributes except
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

Attrs while_attrs(const WhileConfig& config);
Attrs scan_attrs(const ScanConfig& config);
Attrs cond_attrs(const CondConfig& config);

// Decode and check the attributes against the number of operands: every attribute present with its kind,
// the counts non-negative and within the operands, `result` within the results. The regions themselves
// are checked by the shape rule.
absl::StatusOr<WhileConfig> get_while_config(const Attrs& attrs, size_t num_operands);
absl::StatusOr<ScanConfig> get_scan_config(const Attrs& attrs, size_t num_operands);
absl::StatusOr<CondConfig> get_cond_config(const Attrs& attrs, size_t num_operands);

// The types of all results of a control-flow op (every sibling's), after checking that its regions'
// parameter and result types fit the operands: the error names e.g. "carry 1: body returns f32[3], the loop
// carries f32[2]". The regions' bodies are not verified here but by verify() (shape_rules.h), once per
// distinct region object.
absl::StatusOr<std::vector<AbstractValue>> control_flow_result_types(OpKind kind,
                                                                     std::span<const AbstractValue> operands,
                                                                     const Attrs& attrs, const SymbolicScope& scope);
// The type of the sibling selected by attrs' `result` (the shape rule of infer_type).
absl::StatusOr<AbstractValue> control_flow_infer_type(OpKind kind, std::span<const AbstractValue> operands,
                                                      const Attrs& attrs, const SymbolicScope& scope);

// Emits the `num_results` siblings of a control-flow op (attrs with `result` set to 0..num_results-1) on
// the operands; returns their values in result order. Throws mcx::Error when the op is rejected.
std::vector<ValueId> emit_siblings(ProgramBuilder& b, OpKind kind, const Attrs& attrs,
                                   std::span<const ValueId> operands, int num_results);

// attrs with `result` replaced: the attributes of another sibling.
Attrs with_result_index(Attrs attrs, int result);
// The `result` attribute of a control-flow instruction (0 when absent, which verify refuses).
int result_index(const Instr& instr);
// Whether a and b are siblings: control-flow instructions of the same kind with the same operands and the
// same attributes apart from `result`.
bool are_siblings(const Instr& a, const Instr& b);

// The error of differentiating a control-flow op in `mode` ("reverse" or "forward"): not implemented yet
// for any of them; while loops in reverse mode never will be (as in JAX, their trip count is unknown).
std::string control_flow_autodiff_error(OpKind kind, std::string_view mode);

// Per instruction of program: the index of the first instruction of its sibling group (its own index for
// the first), or -1 for an instruction that is not a control-flow op.
std::vector<int> sibling_group_firsts(const Program& program);

// Whether an instruction of program is a control-flow op.
bool has_control_flow(const Program& program);

}  // namespace mcx::ir
