// mcx-run's job supervisor: starts the coordinator (or uses an external one) and N worker processes on this
// host, prefixes their output with "[p<i>] ", restarts failed workers in recoverable mode (and a coordinator
// that dies, on the same address, so the workers rejoin it), ends the job on
// a fatal failure and forwards SIGINT/SIGTERM. Every wait has a deadline (see LaunchOptions).
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "tools/common/mtls_flags.h"

namespace mcx::tools {

// How worker processes are placed on this host's CPUs (--cpu-bind).
enum class CpuBind {
  kNone,   // as the kernel schedules them (they inherit mcx-run's affinity)
  kCores,  // each bound to its own block of whole cores (cpus_of_process)
};

struct LaunchOptions {
  int num_processes = 1;
  int cpu_devices = 0;                 // 0: leave MCX_CPU_DEVICE_COUNT unset
  // GPUs per process (MCX_LOCAL_DEVICE_IDS): process i gets GPUs (i*G + k) mod host_gpus, k < G, so processes
  // share GPUs when there are fewer than N*G (each its own context). 0: leave MCX_LOCAL_DEVICE_IDS unset.
  int gpus_per_process = 0;
  int host_gpus = 0;                   // 0: N*G (no sharing)
  int max_restarts = 0;                // per process; > 0 runs the coordinator in recoverable mode
  // Recoverable without restarts: a process that fails does not end the others (they are told and carry on);
  // the job succeeds when every process that did not fail succeeds. Implied by max_restarts > 0.
  bool recoverable = false;
  std::string coordinator;             // external coordinator address; empty: spawn mcx-coordinator
  std::string coordinator_binary;      // empty: find "mcx-coordinator" beside mcx-run, then on PATH
  std::string bind_host = "127.0.0.1"; // where the spawned coordinator listens
  int coordinator_port = 0;            // 0: any free port (the coordinator prints the one it bound)
  // Seconds; < 0 means "not given": the coordinator's/library's defaults apply.
  double heartbeat_interval = -1, heartbeat_timeout = -1, init_timeout = -1, shutdown_timeout = -1;
  double grace_period = 5;             // SIGTERM -> SIGKILL delay when ending processes
  double job_timeout = 0;              // 0: none; else the whole job is ended after this many seconds
  double coordinator_start_timeout = 20;
  // Recoverable jobs: a spawned coordinator that dies while processes run is started again on the same address
  // (the processes rejoin it and carry on) up to this many times; fate-sharing jobs end with it.
  int max_coordinator_restarts = 3;
  // mTLS. "{id}" in the worker paths is replaced by the process id, so each task can get its own cert.
  MtlsFlags mtls;  // worker certificates: "{id}" in cert/key paths becomes the process id
  std::string coordinator_mtls_cert, coordinator_mtls_key;  // default: worker paths with {id} = "coordinator"
  bool prefix_output = true;
  bool verbose = false;
  std::string profile_dir;             // non-empty: every process traces itself here (MCX_PROFILE_DIR)
  CpuBind cpu_bind = CpuBind::kNone;
  std::vector<std::string> program;    // PROGRAM ARGS...
};

// The GPUs process `id` gets (CUDA ordinals): empty without gpus_per_process. main() refuses more GPUs per process
// than the host has.
std::vector<int> gpus_of_process(const LaunchOptions& options, int id);

// The CPUs process `id` is bound to under CpuBind::kCores, given the CPUs to share out in core order
// (cpus_in_core_order of mcx-run's own, core/cpu_affinity.h): consecutive blocks of C / N CPUs, the first C mod N
// processes one more, so each process has whole cores (where the counts allow) and none shares one; with more
// processes than CPUs, CPU id mod C alone. Empty under CpuBind::kNone. A process keeps its CPUs across restarts.
std::vector<int> cpus_of_process(const LaunchOptions& options, const std::vector<int>& cpus, int id);

// Runs the job to completion. Returns the exit code mcx-run should exit with: 0 when every process
// succeeded (recoverable: every process that did not fail, and at least one), also after a forwarded
// SIGINT/SIGTERM when every process then exited 0 (a clean shutdown, e.g. at a preemption sync point);
// otherwise the first failure's exit code (128+signal for a process that died of a signal, e.g. of the
// forwarded one), or 2 for a launcher error (reported on stderr).
int run_job(const LaunchOptions& options);

// The environment a worker gets (exposed for tests and --dry-run).
std::map<std::string, std::string> worker_env(const LaunchOptions& options, const std::string& address, int id,
                                              int restart_count);

}  // namespace mcx::tools
