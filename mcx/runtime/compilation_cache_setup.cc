#include "mcx/runtime/compilation_cache_setup.h"

#include "absl/time/time.h"
#include "mcx/cache/install.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"
#include "mcx/core/process_exit.h"
#include "mcx/runtime/compilation_cache_control.h"
#include "mcx/platform/stored_compile.h"
#include "mcx/runtime/device_platform.h"

namespace mcx {
namespace {

void report_at_exit() {
  std::shared_ptr<cache::CompilationCache> cache = cache::installed_compilation_cache();
  const KernelCompileStats cg = selected_kernel_stats();
  if (!cache && cg.compiled == 0) return;
  std::string line = fmt::format("[codegen] kernels compiled {} ({:.1f} ms), loaded from the cache {} and from "
                                 "other processes {} ({:.1f} ms), shared in process {}",
                                 cg.compiled, cg.compile_ms, cg.loaded, cg.from_peers, cg.load_ms, cg.reuses);
  if (cache) {
    const cache::CacheStats s = cache->stats();
    const ExecutableStoreStats ex = executable_store_stats();
    line += fmt::format("; executables loaded {} ({:.1f} ms), offered to the cache {}; compilation cache {}: hits {}, misses {}, "
                        "writes {}, corrupt entries {}, compile time saved {:.1f} ms",
                        ex.loaded, ex.load_ms_total, ex.offered, cache->directory(), s.hits, s.misses, s.writes,
                        s.corrupt_entries, absl::ToDoubleMilliseconds(s.compile_time_saved));
  }
  log_info("{}", line);
}

}  // namespace

absl::Status setup_compilation_cache(int process_index) {
  run_at_exit(ExitStage::kDeviceStreams, report_at_exit);
  MCX_RETURN_IF_ERROR(compilation_cache::detail::apply_for_process(process_index));
  if (auto cache = cache::installed_compilation_cache()) log_debug("[cache] compilation cache at {}", cache->directory());
  return absl::OkStatus();
}

}  // namespace mcx
