#include "examples/train_digits/start_devices.h"

#include <cstdio>
#include <cstdlib>

#include "mcx/core/profiler.h"
#include "mcx/runtime/cpu_backend.h"
#include "mcx/distributed/cluster.h"
#include "mcx/distributed/distributed.h"
#include "mcx/mcx.h"

namespace digits {

bool start_devices(int devices, int threads, bool recoverable) {
  const bool distributed = mcx::distributed::launched_as_job(mcx::distributed::process_env());
  if (distributed) {
    mcx::distributed::InitializeOptions init;
    if (std::getenv("MCX_CPU_DEVICE_COUNT") == nullptr) init.cpu_device_count = devices;
    if (recoverable) init.recoverable = true;
    mcx::distributed::initialize(init);
  } else {
    mcx::set_cpu_device_count(devices);
  }
  if (threads > 0) mcx::set_num_cpu_threads(threads);
  return distributed;
}

void leave_job(int status) {
  std::fflush(stdout);
  // _Exit below skips the exit handlers, among them the one that writes an MCX_PROFILE_DIR trace: write it now.
  if (mcx::profiler::active()) {
    try {
      mcx::profiler::stop();
    } catch (const mcx::Error& e) {
      std::fprintf(stderr, "writing the profile: %s\n", e.what());
    }
  }
  if (!mcx::distributed::job_is_recoverable()) {
    const absl::Status left = mcx::distributed::shutdown_or_status();
    if (!left.ok()) std::fprintf(stderr, "leaving the job: %s\n", left.ToString().c_str());
  }
  std::fflush(stderr);
  std::_Exit(status);
}

}  // namespace digits
