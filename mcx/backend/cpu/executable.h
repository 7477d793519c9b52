// CPU execution of a Program with static shapes.
//
// compile() verifies the program, plans buffers and groups chains of elementwise ops into fused regions
// that are evaluated tile by tile (no full temporary per op); runs of "reduce over trailing axes ->
// broadcast back -> element-wise" (softmax, log-softmax) execute row block by row block, in cache, with
// results bitwise equal to op-by-op execution (docs/performance.md); dot_general goes to OpenBLAS cblas;
// reductions, transposes and the other ops run vectorised kernels on the shared thread pool
// (thread_pool.h). execute() is thread-safe: one executable may run concurrently from many threads.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/core/buffer.h"
#include "mcx/ir/program.h"

namespace mcx::cpu {

class CpuExecutable {
 public:
  // InvalidArgument when the program has symbolic dimensions (specialise it first) or fails verify().
  static absl::StatusOr<std::shared_ptr<const CpuExecutable>> compile(const ir::Program& program);

  // Runs the program. Arguments must match the parameter types exactly (dtype and dims); the error names
  // the argument index, expected and found types. Returns one Buffer per program result.
  absl::StatusOr<std::vector<Buffer>> execute(std::span<const Buffer> args) const;

  const ir::Program& program() const;
  ~CpuExecutable();

  struct Plan;

 private:
  explicit CpuExecutable(std::unique_ptr<Plan> plan);
  std::unique_ptr<Plan> plan_;
};

}  // namespace mcx::cpu
