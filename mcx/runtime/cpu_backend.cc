#include "mcx/runtime/cpu_backend.h"

#include "absl/strings/str_cat.h"
#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/backend/cpu/executable_store.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/core/error.h"
#include "mcx/runtime/spmd_executable.h"

namespace mcx {

void set_num_cpu_threads(int n) {
  if (n < 1) {
    throw_if_error(absl::InvalidArgumentError(absl::StrCat("[set_num_cpu_threads] expected n >= 1, found ", n)));
  }
  cpu::set_num_threads(n);
}

int num_cpu_threads() { return cpu::num_threads(); }

CompileStatistics compile_statistics() {
  const cpu::codegen::CodegenStats kernels = cpu::codegen::stats();
  const cpu::ExecutableStoreStats executables = cpu::executable_store_stats();
  const SpmdCompileStats programs = spmd_compile_stats();
  CompileStatistics s;
  s.kernels_compiled = kernels.kernels_compiled;
  s.kernel_compile_ms = kernels.compile_ms_total;
  s.kernels_loaded = kernels.kernels_loaded;
  s.kernel_load_ms = kernels.load_ms_total;
  s.kernels_from_peers = kernels.kernels_from_peers;
  s.executables_loaded = executables.loaded;
  s.executables_compiled = executables.compiled;
  s.executable_load_ms = executables.load_ms_total;
  s.programs_partitioned = programs.partitioned;
  s.programs_loaded = programs.loaded;
  return s;
}

}  // namespace mcx
