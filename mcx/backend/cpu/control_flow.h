// CPU execution of the control-flow ops of opset 7 (ir/control_flow.h: while, scan, cond).
//
// A group of sibling instructions runs once, as one step of the enclosing executable's plan: its
// sub-programs are compiled once (into CpuExecutables) when the enclosing program is compiled, and each
// iteration runs the compiled body on the carries; nothing is traced or compiled per iteration. The body
// runs with the enclosing execution's context, so collectives inside loop bodies reach the same replica
// groups (every partition must then run the same number of iterations, as in XLA).
// Thread-safety: immutable after compile(); run() may be called concurrently.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/backend/cpu/executable.h"
#include "mcx/core/buffer.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/program.h"

namespace mcx::cpu {

class ControlFlowRunner {
 public:
  // Makes the executable of region `index` (while: cond 0, body 1; scan: body 0; cond: branch k).
  using RegionCompiler =
      std::function<absl::StatusOr<std::shared_ptr<const CpuExecutable>>(int index, const ir::Program& region)>;

  // Compiles the regions of a control-flow instruction whose operands have the given types, with
  // CpuExecutable::compile, or with compile_region when given (a serialised executable's loader passes one
  // that reads the regions' executables back). Errors: those of compiling a region (named), or an invalid
  // instruction.
  static absl::StatusOr<std::shared_ptr<const ControlFlowRunner>> compile(const ir::Instr& instr,
                                                                          std::span<const AbstractValue> operands,
                                                                          const RegionCompiler& compile_region = {});

  // Every result of the op (all siblings', in `result` order) for the operands. Errors of a region's
  // execution name the op and the iteration or branch.
  absl::StatusOr<std::vector<Buffer>> run(std::span<const Buffer> operands, const ExecutionContext* ctx) const;

  int num_results() const { return num_results_; }
  // The regions' executables, in RegionCompiler index order.
  const std::vector<std::shared_ptr<const CpuExecutable>>& regions() const { return regions_; }
  bool has_collectives() const;

 private:
  absl::StatusOr<std::vector<Buffer>> run_while(std::span<const Buffer> ops, const ExecutionContext* ctx) const;
  absl::StatusOr<std::vector<Buffer>> run_scan(std::span<const Buffer> ops, const ExecutionContext* ctx) const;
  absl::StatusOr<std::vector<Buffer>> run_cond(std::span<const Buffer> ops, const ExecutionContext* ctx) const;

  ir::OpKind kind_ = ir::OpKind::kWhile;
  ir::WhileConfig while_;
  ir::ScanConfig scan_;
  ir::CondConfig cond_;
  std::vector<std::shared_ptr<const CpuExecutable>> regions_;  // while: cond, body; scan: body; cond: branches
  int num_results_ = 0;
};

}  // namespace mcx::cpu
