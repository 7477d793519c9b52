// CPU execution of a Program with static shapes.
//
// compile() verifies the program, plans buffers and groups chains of elementwise ops into fused regions
// that are evaluated tile by tile (no full temporary per op); runs of "reduce over trailing axes ->
// broadcast back -> element-wise" (softmax, log-softmax) execute row block by row block, in cache, with
// results bitwise equal to op-by-op execution (docs/performance.md); dot_general goes to OpenBLAS cblas;
// reductions, transposes and the other ops run vectorised kernels on the shared thread pool
// (thread_pool.h). execute() is thread-safe: one executable may run concurrently from many threads.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/core/buffer.h"
#include "mcx/collectives/communicator.h"
#include "mcx/ir/program.h"

namespace mcx::cpu {

// What the SPMD ops (op.h: all_reduce, ..., axis_index) need at run time: which partition this execution
// is and how to reach the other members of a replica group. The runtime builds one per device per
// execution; programs without SPMD ops ignore it.
struct ExecutionContext {
  int partition_id = 0;
  int num_partitions = 1;
  // This member's communicator for `group` (partition ids in group order, containing partition_id). The
  // returned pointer must stay valid until execute() returns. Called from the executing thread.
  std::function<absl::StatusOr<Communicator*>(std::span<const int64_t> group)> communicator;
  // Deadline for each collective of this execution (DeadlineExceeded names the op and the missing ranks).
  absl::Time deadline = absl::InfiniteFuture();
};

class CpuExecutable {
 public:
  // InvalidArgument when the program has symbolic dimensions (specialise it first) or fails verify().
  static absl::StatusOr<std::shared_ptr<const CpuExecutable>> compile(const ir::Program& program);

  // Runs the program. Arguments must match the parameter types exactly (dtype and dims); the error names
  // the argument index, expected and found types. Returns one Buffer per program result.
  // SPMD ops use ctx; with ctx == nullptr the program runs as partition 0 of 1 (every replica group must
  // then have size 1, FailedPrecondition otherwise). A failing collective's error names the op.
  absl::StatusOr<std::vector<Buffer>> execute(std::span<const Buffer> args,
                                              const ExecutionContext* ctx = nullptr) const;
  // Whether the program contains collectives (callers then must run every partition concurrently).
  bool has_collectives() const;

  const ir::Program& program() const;

  // What compile() (or deserialize()) made of the program: for tests, benchmarks and diagnostics.
  struct Summary {
    int fused_groups = 0;   // element-wise groups
    int group_kernels = 0;  // groups with generated code (codegen/fused_kernel.h)
    int row_regions = 0;    // row-block regions (softmax and the like)
    int row_kernels = 0;    // regions generated whole, as one function (codegen/row_kernel.h)
  };
  Summary summary() const;

  // Serialised executables (executable_codec.cc; docs/compilation_cache.md "Executable entries"): the plan
  // (steps with their typed fields, fusion groups, row regions, liveness and in-place decisions), the
  // object code of its generated kernels, the executables of its control-flow regions, and its program in
  // the canonical encoding (ir/fingerprint.h), in a versioned binary form. deserialize() runs no planning
  // and no code generation: kernels are linked from the stored objects (or reused when this process has
  // them). The bytes end in a SHA-256 of the rest, checked first. Errors of deserialize: InvalidArgument for
  // damaged bytes (the checksum), malformed ones (naming the offset) or a plan whose indices do not fit its
  // program; FailedPrecondition for another format version, or kernels generated for another target
  // (codegen::target_description()) than this process's: the caller compiles instead.
  absl::StatusOr<std::string> serialize() const;
  // "cpu executable format <n>; planner <digest of the planner's sources>": what, besides the program and
  // the code generator's target, decides the bytes serialize() writes (a key component of stored entries).
  static std::string format_description();
  static absl::StatusOr<std::shared_ptr<const CpuExecutable>> deserialize(std::string_view bytes);
  ~CpuExecutable();

  struct Plan;

 private:
  explicit CpuExecutable(std::unique_ptr<Plan> plan);
  std::unique_ptr<Plan> plan_;
};

}  // namespace mcx::cpu
