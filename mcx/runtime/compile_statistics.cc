// compile_statistics() (declared in cpu_backend.h, the public header): the platforms' code generators, the
// compiled-code store and the partitioner, whatever the platform.
#include "mcx/platform/stored_compile.h"
#include "mcx/runtime/cpu_backend.h"
#include "mcx/runtime/device_platform.h"
#include "mcx/runtime/spmd_executable.h"

namespace mcx {

CompileStatistics compile_statistics() {
  const KernelCompileStats kernels = selected_kernel_stats();
  const ExecutableStoreStats executables = executable_store_stats();
  const SpmdCompileStats programs = spmd_compile_stats();
  CompileStatistics s;
  s.kernels_compiled = kernels.compiled;
  s.kernel_compile_ms = kernels.compile_ms;
  s.kernels_loaded = kernels.loaded;
  s.kernel_load_ms = kernels.load_ms;
  s.kernels_from_peers = kernels.from_peers;
  s.executables_loaded = executables.loaded;
  s.executables_compiled = executables.compiled;
  s.executable_load_ms = executables.load_ms_total;
  s.programs_partitioned = programs.partitioned;
  s.programs_loaded = programs.loaded;
  return s;
}

}  // namespace mcx
