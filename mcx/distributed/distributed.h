// mcx::distributed::initialize(): join a multi-process job (modelled on jax.distributed.initialize).
//
//   mcx::distributed::InitializeOptions opts;      // everything unset is detected (cluster.h)
//   mcx::distributed::initialize(opts);            // throws mcx::Error subclasses on failure
//   ... mcx::devices() now lists every process's devices with global ids ...
//   mcx::distributed::shutdown();
//
// Steps: (1) refuse if already initialized or if devices were already used (FailedPrecondition);
// (2) fill unset fields from cluster detection and MCX_* variables, validate 0 <= process_id < N;
// (3) process 0 hosts the coordination service on bind_address (default "[::]:<port of coordinator
// address>") unless standalone_coordinator is set (mcx-coordinator runs it); (4) every process connects
// its agent (register; waits for all N up to init_timeout and names the missing processes on timeout);
// (5) each process publishes its local devices (the default platform's, runtime/device.h describe_local_devices:
// CPU devices, or the GPUs local_device_ids names) under topology_key(process_id) ("mcx/task/<id>/topology",
// which only that task may write; re-published when the agent rejoins a restarted coordinator) and reads all
// others',
// then installs the global topology (core/topology.h): global ids are dense, ordered by (process, local id).
// Failure handling after initialize: see AgentOptions (default: log which task failed and exit with
// kFailureExitCode; set on_failure to decide yourself).
//
// Environment variables (explicit options win): MCX_COORDINATOR_ADDRESS, MCX_NUM_PROCESSES,
// MCX_PROCESS_ID, MCX_COORDINATOR_BIND_ADDRESS, MCX_STANDALONE_COORDINATOR=1, MCX_LOCAL_DEVICE_IDS ("0,1"),
// MCX_GPUS_PER_PROCESS,
// MCX_CPU_DEVICE_COUNT, MCX_INIT_TIMEOUT (seconds), MCX_HEARTBEAT_INTERVAL / MCX_HEARTBEAT_TIMEOUT /
// MCX_SHUTDOWN_TIMEOUT (seconds), MCX_RECOVERABLE=1, MCX_COORDINATOR_RECONNECT_TIMEOUT (seconds),
// MCX_CLUSTER_DETECTION, and the mTLS ones (mtls.h).
// In a recoverable job the agent survives a coordinator restart (coordination/agent.h, "Losing the coordinator").
//
// Thread-safety: initialize/shutdown must not race each other; the accessors are thread-safe.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "mcx/distributed/cluster.h"
#include "mcx/distributed/coordination/agent.h"
#include "mcx/distributed/security/mtls.h"

namespace mcx::distributed {

struct InitializeOptions {
  std::optional<std::string> coordinator_address;  // "host:port"
  std::optional<int> num_processes;
  std::optional<int> process_id;
  // The devices this process contributes, by the default platform's ids (GPUs: CUDA ordinals as
  // CUDA_VISIBLE_DEVICES leaves them; CPU: their count is what counts). Default: MCX_LOCAL_DEVICE_IDS, else every
  // GPU the process sees, or cpu_device_count CPU devices.
  std::optional<std::vector<int>> local_device_ids;
  // Without local_device_ids: G GPUs per process taken by the process's index on its host, as a cluster launcher
  // reports it (mpirun: OMPI_COMM_WORLD_LOCAL_RANK, srun: SLURM_LOCALID): local index i gets GPUs i*G .. i*G+G-1.
  // Default MCX_GPUS_PER_PROCESS. (srun --gpus-per-task sets each task's CUDA_VISIBLE_DEVICES itself: then every
  // GPU a process sees is its own, the default.)
  std::optional<int> gpus_per_process;
  std::optional<int> cpu_device_count;  // default MCX_CPU_DEVICE_COUNT (set_cpu_device_count), else 1
  std::optional<std::string> bind_address;  // where process 0 serves; default "[::]:<port>"
  std::optional<bool> standalone_coordinator;  // true: nobody hosts the service here
  std::optional<bool> recoverable;              // service mode when process 0 hosts it (default false)
  std::string cluster_detection = "auto";       // see cluster.h; MCX_CLUSTER_DETECTION overrides "auto"
  std::optional<absl::Duration> init_timeout;        // default 300 s, as JAX's initialization_timeout
  // Defaults by the job's size (coordination/heartbeat_defaults.h): 1 s and 10 s up to 4,096 processes, then
  // N/4096 s and 10 intervals; an unset interval is at most a third of the timeout.
  std::optional<absl::Duration> heartbeat_interval;
  std::optional<absl::Duration> heartbeat_timeout;
  std::optional<absl::Duration> shutdown_timeout;    // default 300 s, as JAX's
  // Recoverable jobs: how long to try rejoining a lost coordinator before the loss is fatal (default 60 s).
  std::optional<absl::Duration> reconnect_timeout;
  MtlsOptions mtls;  // unset fields come from MCX_MTLS_* (mtls.h)
  // See AgentOptions::on_failure / on_job_state. nullptr = log "task N failed: ..." and exit.
  std::function<void(const TaskFailure&)> on_failure;
  std::function<void(const JobState&)> on_job_state;
};

// The fully resolved configuration initialize() would use (tests, mcx-run diagnostics). Pure over `env` and the
// probes.
struct ResolvedConfig {
  std::string coordinator_address;
  int num_processes = 1;
  int process_id = 0;
  std::optional<std::vector<int>> local_device_ids;  // options, else MCX_LOCAL_DEVICE_IDS
  std::optional<int> cpu_device_count;                // options, else MCX_CPU_DEVICE_COUNT
  std::string bind_address;
  bool host_service = false;  // process 0 and not standalone
  bool recoverable = false;
  absl::Duration init_timeout, heartbeat_interval, heartbeat_timeout, shutdown_timeout, reconnect_timeout;
  MtlsOptions mtls;
  std::string detected_by;  // cluster method, or "options"
  std::optional<int> local_process_id;  // this process's index on its host, when the cluster says (SLURM_LOCALID, ...)
};
// probes: what cluster detection may look at besides env (initialize() gives process_cluster_probes()).
absl::StatusOr<ResolvedConfig> resolve_config(const InitializeOptions& options, const EnvMap& env,
                                              const ClusterProbes& probes = {});

// Joins the job. Throws mcx::FailedPrecondition (called twice / devices already used),
// mcx::InvalidArgument (missing or inconsistent settings, bad mTLS files), mcx::DeadlineExceeded
// (not every process registered in time; the message names the missing ones), mcx::Unavailable
// (coordinator unreachable).
void initialize(const InitializeOptions& options = {});
// Status-returning variant of initialize().
absl::Status initialize_or_status(const InitializeOptions& options);

// The key under which process `process` publishes its local devices: "mcx/task/<process>/topology".
std::string topology_key(int process);

// Leaves the job: shutdown barrier (all processes), stops the agent, stops the service if hosted here,
// clears the topology. No-op if not initialized. Throws on a failed shutdown barrier. The process hosting
// the service keeps serving until the other processes have left (in recoverable mode, where there is no
// shutdown barrier, up to shutdown_timeout).
void shutdown();
absl::Status shutdown_or_status();

bool is_initialized();

// Whether this process's job is recoverable: its coordination service runs in recoverable mode (mcx-run
// --recoverable, mcx-coordinator --recoverable, or InitializeOptions::recoverable where process 0 hosts it),
// so a failed process is a membership change instead of the end of every process. false before initialize().
// initialize() warns when the options ask for a recoverable job and the service is not one.
bool job_is_recoverable();

// The agent of this process (nullptr if not initialized): KV store, barriers, live tasks.
CoordinationAgent* agent();

}  // namespace mcx::distributed
