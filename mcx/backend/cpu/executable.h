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
#include "mcx/platform/execution_context.h"
#include "mcx/ir/program.h"

namespace mcx::cpu {

// The platform-neutral context of one execution (platform/execution_context.h).
using ExecutionContext = mcx::ExecutionContext;

class CpuExecutable {
 public:
  // Plans the program (executable_plan.h: its phases, in order) and generates kernels for it. Errors:
  //  - InvalidArgument: the program fails ir::verify(); it has symbolic dimensions (specialise it first); it
  //    holds a shard_map (it runs only partitioned over its mesh); an op's attributes are missing or mistyped;
  //  - Unimplemented: an element-wise op with no CPU kernel for its dtypes (naming the instruction);
  //  - the errors of compiling a control-flow op's regions (named by the op).
  // A failed code generation is no error: that part runs on the interpreter.
  static absl::StatusOr<std::shared_ptr<const CpuExecutable>> compile(const ir::Program& program);

  // Runs the program. Returns one Buffer per program result. SPMD ops use ctx; with ctx == nullptr the program
  // runs as partition 0 of 1. Errors:
  //  - InvalidArgument: a wrong number of arguments, or an argument whose dtype or dims differ from its
  //    parameter's, or without storage (naming the index, expected and found types); an SPMD op whose replica
  //    groups do not cover ctx->num_partitions, or whose communicator's size or rank do not match its group;
  //    a malformed debug_print format;
  //  - FailedPrecondition: a replica group larger than 1 without a context or communicator factory;
  //  - a collective's own errors (DeadlineExceeded naming the missing ranks, Aborted, Unavailable, ...) with
  //    its op name prepended ("[all_reduce] ...");
  //  - any of these from inside a control-flow region, naming the op and the iteration or branch;
  //  - Internal: a kernel that failed (an exception such as an allocation failure), naming the program.
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
