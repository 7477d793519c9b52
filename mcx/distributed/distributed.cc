#include "mcx/distributed/distributed.h"

#include <mutex>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "mcx/collectives/live_set.h"
#include "mcx/collectives/peer_group.h"
#include "mcx/core/config.h"
#include "mcx/core/mutex.h"
#include "mcx/core/error.h"
#include "mcx/core/job_key_value.h"
#include "mcx/core/profiler.h"
#include "mcx/core/topology.h"
#include "mcx/runtime/device.h"
#include "mcx/distributed/coordination/agent_key_value.h"
#include "mcx/distributed/coordination/heartbeat_defaults.h"
#include "mcx/distributed/data_plane/data_plane.h"
#include "mcx/distributed/rpc/fast_path_client.h"
#include "mcx/distributed/rpc/grpc_client.h"
#include "mcx/distributed/rpc/grpc_server.h"
#include "mcx/distributed/security/job_secret.h"
#include "mcx/distributed/coordination/preemption_sync.h"
#include "mcx/core/logging.h"

namespace mcx::distributed {
namespace {

std::optional<std::string> env_get(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::optional<bool>> env_bool(const EnvMap& env, const char* name) {
  auto v = env_get(env, name);
  if (!v) return std::optional<bool>();
  if (*v == "1" || *v == "true" || *v == "yes") return std::optional<bool>(true);
  if (*v == "0" || *v == "false" || *v == "no") return std::optional<bool>(false);
  return absl::InvalidArgumentError(absl::StrCat("[initialize] ", name, "='", *v, "' is not a boolean (0 or 1)"));
}

absl::StatusOr<absl::Duration> duration_setting(const std::optional<absl::Duration>& opt, const EnvMap& env,
                                                const char* name, absl::Duration def) {
  if (opt) {
    if (*opt <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat("[initialize] ", name, " must be positive"));
    }
    return *opt;
  }
  auto v = env_get(env, name);
  if (!v) return def;
  double secs;
  if (!absl::SimpleAtod(*v, &secs) || secs <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("[initialize] ", name, "='", *v, "' is not a positive number of seconds"));
  }
  return absl::Seconds(secs);
}

std::string port_of(const std::string& address) {
  size_t colon = address.rfind(':');
  return colon == std::string::npos ? "" : address.substr(colon + 1);
}

struct Runtime {
  Mutex mu;
  std::unique_ptr<CoordinationService> service ABSL_GUARDED_BY(mu);
  std::unique_ptr<GrpcCoordinationServer> server ABSL_GUARDED_BY(mu);
  std::unique_ptr<CoordinationAgent> agent ABSL_GUARDED_BY(mu);
  std::shared_ptr<AgentKeyValue> job_kv ABSL_GUARDED_BY(mu);  // the agent for lower layers (job_key_value.h)
  bool recoverable_service ABSL_GUARDED_BY(mu) = false;  // the service said so (kServiceModeKey)
};

Runtime& runtime() {
  static Runtime* r = new Runtime();
  return *r;
}

// What each process publishes about itself: "host <host identity>", then "local_id platform kind" per device.
std::string encode_process(const std::string& host, const std::vector<TopologyDevice>& devices) {
  std::string out = absl::StrCat("host ", host, "\n");
  for (const TopologyDevice& d : devices) absl::StrAppend(&out, d.local_id, " ", d.platform, " ", d.kind, "\n");
  return out;
}

// Adds what `process` published (encode_process) to topo (its process_hosts sized to the process count).
absl::Status decode_process(int process, const std::string& text, Topology& topo) {
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&line, "host ")) {
      topo.process_hosts[static_cast<size_t>(process)] = std::string(line);
      continue;
    }
    // "<local id> <platform> <kind>", the kind to the end of the line (it may hold spaces: "NVIDIA H200").
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(' ', 2));
    int local;
    if (f.size() != 3 || f[2].empty() || !absl::SimpleAtoi(f[0], &local)) {
      return absl::DataLossError(absl::StrCat("[initialize] malformed device list published by process ", process,
                                              ": '", std::string(line), "'"));
    }
    TopologyDevice d;
    d.global_id = static_cast<int>(topo.devices.size());
    d.process_index = process;
    d.local_id = local;
    d.platform = f[1];
    d.kind = f[2];
    topo.devices.push_back(std::move(d));
  }
  return absl::OkStatus();
}

// Collectives abort on failure: aborts every data-plane group (collectives/peer_group.h) that includes a task in
// state ERROR in `state` (once per failed task and incarnation; later states repeat the list), with Unavailable
// marked as that process's failure (mcx::ProcessFailure when thrown), naming the process and the service's
// reason. It also records the failure (collectives/live_set.h), so groups built later with that process fail at
// once instead of waiting for it in the rendezvous, until the process is seen live again with a new incarnation.
// initialize() calls it for every job state the watch stream delivers, so a collective waiting for a dead or hung
// process fails as soon as the service declares it failed (heartbeat timeout, or at once when its connection
// drops), in both failure modes.
void abort_groups_of_failed_tasks(const JobState& state) {
  // Every job state lists the failed tasks again: act once per failed (task, incarnation).
  static std::mutex mu;
  static auto* handled = new std::set<std::pair<TaskId, Incarnation>>();  // never destroyed (used until exit)
  std::lock_guard<std::mutex> lock(mu);
  for (const TaskInfo& t : state.tasks) {
    if (t.state == TaskState::kConnected) record_process_alive(t.id, t.incarnation);
    if (t.state != TaskState::kError || !handled->insert({t.id, t.incarnation}).second) continue;
    const absl::Status why = mark_process_failure(
        absl::UnavailableError(absl::StrCat("[data plane] process ", t.id,
                                            " failed (the coordination service reports: ", t.error.message(),
                                            "); the collectives that needed it were aborted")),
        t.id);
    record_process_failure(t.id, t.incarnation, why);  // before the abort: a rebuild must not wait for it
    const int aborted = abort_peer_groups_of_process(t.id, why);
    if (aborted > 0) log_warn("[mcx.distributed] process {} failed: aborted {} data-plane group(s) that include it", t.id, aborted);
  }
}

// Uninstalls the job's key-value store and closes it: waits for calls in progress (the data plane's too), so
// none uses the agent after this. Idempotent.
void close_job_key_value_locked(Runtime& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r.mu) {
  if (!r.job_kv) return;
  set_job_key_value(nullptr);
  r.job_kv->close();
  r.job_kv.reset();
}

void teardown_locked(Runtime& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r.mu) {
  close_job_key_value_locked(r);
  r.agent.reset();
  if (r.server) r.server->shutdown();
  r.server.reset();
  r.service.reset();
}

}  // namespace

absl::StatusOr<ResolvedConfig> resolve_config(const InitializeOptions& o, const EnvMap& env,
                                              const ClusterProbes& probes) {
  ResolvedConfig c;
  std::string method = o.cluster_detection;
  if (method == "auto") {
    if (auto m = env_get(env, "MCX_CLUSTER_DETECTION")) method = *m;
  }
  std::optional<ClusterInfo> detected;
  if (!o.coordinator_address || !o.num_processes || !o.process_id) {
    absl::StatusOr<std::optional<ClusterInfo>> d = detect_cluster(env, method, probes);
    if (!d.ok()) return d.status();
    detected = *d;
  }
  // Why the detected cluster left a field unset, appended to the error that needs it.
  const std::string why_unknown =
      detected && !detected->unresolved.empty() ? absl::StrCat(" (", detected->method, ": ", detected->unresolved, ")") : "";
  c.detected_by = detected ? detected->method : "options";
  std::optional<std::string> addr = o.coordinator_address;
  if (!addr && detected) addr = detected->coordinator_address;
  std::optional<int> n = o.num_processes;
  if (!n && detected) n = detected->num_processes;
  std::optional<int> id = o.process_id;
  if (!id && detected) id = detected->process_id;
  if (!addr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[initialize] no coordinator address: pass coordinator_address or set MCX_COORDINATOR_ADDRESS (no cluster "
        "environment was detected that names one)", why_unknown));
  }
  if (!n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[initialize] number of processes unknown: pass num_processes or set MCX_NUM_PROCESSES", why_unknown));
  }
  if (!id) return absl::InvalidArgumentError("[initialize] process id unknown: pass process_id or set MCX_PROCESS_ID");
  if (*n < 1) return absl::InvalidArgumentError(absl::StrCat("[initialize] num_processes must be >= 1, got ", *n));
  if (*id < 0 || *id >= *n) {
    return absl::InvalidArgumentError(
        absl::StrCat("[initialize] process_id ", *id, " is outside [0, ", *n, ") (num_processes = ", *n, ")"));
  }
  c.coordinator_address = *addr;
  c.num_processes = *n;
  c.process_id = *id;
  if (detected) c.local_process_id = detected->local_process_id;

  if (o.local_device_ids) {
    c.local_device_ids = *o.local_device_ids;
  } else if (auto ids = env_get(env, "MCX_LOCAL_DEVICE_IDS")) {
    std::vector<int> parsed;
    for (absl::string_view s : absl::StrSplit(*ids, ',', absl::SkipEmpty())) {
      int v;
      if (!absl::SimpleAtoi(s, &v) || v < 0) {
        return absl::InvalidArgumentError(absl::StrCat("[initialize] MCX_LOCAL_DEVICE_IDS='", *ids,
                                                       "' is not a comma-separated list of device ids"));
      }
      parsed.push_back(v);
    }
    c.local_device_ids = std::move(parsed);
  }
  if (!c.local_device_ids) {
    std::optional<int> per = o.gpus_per_process;
    if (!per) {
      if (auto g = env_get(env, "MCX_GPUS_PER_PROCESS")) {
        int v;
        if (!absl::SimpleAtoi(*g, &v)) {
          return absl::InvalidArgumentError(absl::StrCat("[initialize] MCX_GPUS_PER_PROCESS='", *g, "' is not an integer"));
        }
        per = v;
      }
    }
    if (per) {
      if (*per < 1) return absl::InvalidArgumentError(absl::StrCat("[initialize] gpus_per_process must be >= 1, got ", *per));
      if (!detected) {
        absl::StatusOr<std::optional<ClusterInfo>> d = detect_cluster(env, method);
        if (!d.ok()) return d.status();
        detected = *d;
      }
      if (!detected || !detected->local_process_id) {
        return absl::InvalidArgumentError(
            "[initialize] gpus_per_process (MCX_GPUS_PER_PROCESS) needs the process's index on its host, which no "
            "cluster launcher reported (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID); name the GPUs with "
            "local_device_ids (MCX_LOCAL_DEVICE_IDS) instead");
      }
      std::vector<int> ids;
      for (int k = 0; k < *per; ++k) ids.push_back(*detected->local_process_id * *per + k);
      c.local_device_ids = std::move(ids);
    }
  }
  if (c.local_device_ids && c.local_device_ids->empty()) {
    return absl::InvalidArgumentError("[initialize] local_device_ids is empty; expected at least one device id");
  }
  if (o.cpu_device_count) {
    c.cpu_device_count = *o.cpu_device_count;
  } else if (auto v = env_get(env, "MCX_CPU_DEVICE_COUNT")) {
    int count;
    if (!absl::SimpleAtoi(*v, &count)) {
      return absl::InvalidArgumentError(absl::StrCat("[initialize] MCX_CPU_DEVICE_COUNT='", *v, "' is not an integer"));
    }
    c.cpu_device_count = count;
  }
  if (c.cpu_device_count && *c.cpu_device_count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("[initialize] cpu_device_count must be >= 1, got ", *c.cpu_device_count));
  }

  if (o.bind_address) {
    c.bind_address = *o.bind_address;
  } else if (auto b = env_get(env, "MCX_COORDINATOR_BIND_ADDRESS")) {
    c.bind_address = *b;
  } else {
    c.bind_address = absl::StrCat("[::]:", port_of(c.coordinator_address));
  }
  bool standalone = false;
  if (o.standalone_coordinator) {
    standalone = *o.standalone_coordinator;
  } else {
    auto v = env_bool(env, "MCX_STANDALONE_COORDINATOR");
    if (!v.ok()) return v.status();
    standalone = v->value_or(false);
  }
  c.host_service = c.process_id == 0 && !standalone;
  if (o.recoverable) {
    c.recoverable = *o.recoverable;
  } else {
    auto v = env_bool(env, "MCX_RECOVERABLE");
    if (!v.ok()) return v.status();
    c.recoverable = v->value_or(false);
  }
  MCX_ASSIGN_OR_RETURN(c.init_timeout, duration_setting(o.init_timeout, env, "MCX_INIT_TIMEOUT", absl::Seconds(300)));
  // Defaults by the job's size (heartbeat_defaults.h): the timeout first, so that an interval left unset fits it.
  MCX_ASSIGN_OR_RETURN(c.heartbeat_timeout, duration_setting(o.heartbeat_timeout, env, "MCX_HEARTBEAT_TIMEOUT",
                                                             default_heartbeat_timeout(c.num_processes)));
  MCX_ASSIGN_OR_RETURN(c.heartbeat_interval,
                       duration_setting(o.heartbeat_interval, env, "MCX_HEARTBEAT_INTERVAL",
                                        default_heartbeat_interval(c.num_processes, c.heartbeat_timeout)));
  MCX_ASSIGN_OR_RETURN(c.shutdown_timeout,
                       duration_setting(o.shutdown_timeout, env, "MCX_SHUTDOWN_TIMEOUT", absl::Seconds(300)));
  MCX_ASSIGN_OR_RETURN(c.reconnect_timeout, duration_setting(o.reconnect_timeout, env,
                                                             "MCX_COORDINATOR_RECONNECT_TIMEOUT", absl::Seconds(60)));
  if (c.heartbeat_interval >= c.heartbeat_timeout) {
    return absl::InvalidArgumentError(absl::StrCat("[initialize] heartbeat_interval (",
                                                   absl::FormatDuration(c.heartbeat_interval),
                                                   ") must be shorter than heartbeat_timeout (",
                                                   absl::FormatDuration(c.heartbeat_timeout), ")"));
  }
  c.mtls = mtls_options_from_env(o.mtls, env);
  MCX_RETURN_IF_ERROR(validate_mtls_options(c.mtls));
  return c;
}

std::string topology_key(int process) { return task_key(process, "topology"); }

absl::Status initialize_or_status(const InitializeOptions& options) {
  Runtime& r = runtime();
  MutexLock lock(&r.mu);
  if (r.agent) {
    return absl::FailedPreconditionError("[initialize] mcx::distributed::initialize should only be called once");
  }
  if (devices_used()) {
    return absl::FailedPreconditionError(
        "[initialize] devices were already used in this process; call mcx::distributed::initialize before any "
        "computation, device query or transfer");
  }
  const EnvMap env = process_env();
  MCX_ASSIGN_OR_RETURN(ResolvedConfig c, resolve_config(options, env, process_cluster_probes(env)));
  const absl::Time deadline = absl::Now() + c.init_timeout;
  // This process's devices, described before anything starts, so that a request it cannot meet fails here.
  absl::StatusOr<std::vector<TopologyDevice>> local = describe_local_devices(c.local_device_ids, c.cpu_device_count);
  if (!local.ok()) {
    return absl::Status(local.status().code(), absl::StrCat("[initialize] process ", c.process_id, " of ",
                                                            c.num_processes, ": ", local.status().message()));
  }

  std::unique_ptr<CoordinationClient> client;
  if (c.host_service) {
    ServiceOptions so;
    so.num_tasks = c.num_processes;
    so.heartbeat_timeout = c.heartbeat_timeout;
    so.shutdown_timeout = c.shutdown_timeout;
    so.recoverable = c.recoverable;
    MCX_ASSIGN_OR_RETURN(r.service, CoordinationService::create(so));
    GrpcServerOptions go;
    go.bind_address = c.bind_address;
    go.mtls = c.mtls;
    absl::StatusOr<std::unique_ptr<GrpcCoordinationServer>> server = GrpcCoordinationServer::start(r.service.get(), go);
    if (!server.ok()) {
      teardown_locked(r);
      return server.status();
    }
    r.server = std::move(*server);
    client = std::make_unique<InProcessClient>(r.service.get());
  } else {
    // The fast path unless mTLS is on (it has no TLS) or MCX_COORDINATION_FAST_PATH=0 (fast_path_client.h).
    absl::StatusOr<bool> fast_path = kCoordinationFastPathFlag.get();
    if (!fast_path.ok()) return fast_path.status();
    absl::StatusOr<std::unique_ptr<CoordinationClient>> gc =
        *fast_path && !c.mtls.enabled() ? make_fast_path_client(c.coordinator_address)
                                        : make_grpc_client({c.coordinator_address, c.mtls});
    if (!gc.ok()) return gc.status();
    client = std::move(*gc);
  }
  AgentOptions ao;
  ao.task_id = c.process_id;
  ao.num_tasks = c.num_processes;
  ao.init_timeout = c.init_timeout;
  ao.heartbeat_interval = c.heartbeat_interval;
  ao.heartbeat_timeout = c.heartbeat_timeout;
  ao.shutdown_timeout = c.shutdown_timeout;
  ao.recoverable = c.recoverable;
  ao.reconnect_timeout = c.reconnect_timeout;
  ao.on_failure = options.on_failure;
  // Collectives abort on failure: a process the service reports failed fails, within this callback, every
  // data-plane group that waits for it (a stopped or hung process closes no socket; without this its peers
  // would wait until their deadline), then the program's own callback runs.
  ao.on_job_state = [user = options.on_job_state](const JobState& s) {
    abort_groups_of_failed_tasks(s);
    if (user) user(s);
  };
  ao.publish_on_connect = {{topology_key(c.process_id), encode_process(host_identity(env), *local)}};
  r.agent = std::make_unique<CoordinationAgent>(std::move(client), ao);
  if (absl::Status s = r.agent->connect(); !s.ok()) {
    teardown_locked(r);
    return absl::Status(s.code(), absl::StrCat("[initialize] process ", c.process_id, " of ", c.num_processes,
                                               " (coordinator ", c.coordinator_address, "): ", s.message()));
  }
  r.job_kv = std::make_shared<AgentKeyValue>(r.agent.get(), c.process_id, c.num_processes);
  // Every process knows the global device list: each published its devices before registering.
  absl::Status s;
  Topology topo;
  topo.process_index = c.process_id;
  topo.process_count = c.num_processes;
  topo.process_hosts.resize(static_cast<size_t>(c.num_processes));
  for (int p = 0; s.ok() && p < c.num_processes; ++p) {
    absl::StatusOr<std::string> v = r.agent->kv_get(topology_key(p),
                                                    std::max(absl::Milliseconds(1), deadline - absl::Now()));
    if (!v.ok()) {
      s = absl::Status(v.status().code(), absl::StrCat("[initialize] process ", p, " did not publish its devices: ",
                                                       v.status().message()));
    } else {
      s = decode_process(p, *v, topo);
    }
  }
  if (s.ok()) s = set_distributed_topology(std::move(topo));
  if (s.ok()) {
    s = start_data_plane(r.job_kv, DataPlaneConfig{c.coordinator_address, c.process_id, c.num_processes, c.mtls,
                                                   host_identity(env)});
  }
  if (!s.ok()) {
    clear_distributed_topology();
    teardown_locked(r);
    return s;
  }
  // The service's failure mode, as it published it: a program that asked for a recoverable job under a
  // fate-sharing coordinator hears it now, not when the first failure ends every process.
  absl::StatusOr<std::string> mode = r.agent->kv_get(kServiceModeKey, std::max(absl::Milliseconds(1), deadline - absl::Now()));
  r.recoverable_service = mode.ok() && *mode == "recoverable";
  if (c.recoverable && !r.recoverable_service) {
    log_warn("[initialize] this process asks for a recoverable job (InitializeOptions::recoverable or "
             "MCX_RECOVERABLE=1) but its coordination service at {} is {}: the first process that fails ends every "
             "process. Start the job with `mcx-run --recoverable` (or `mcx-coordinator --recoverable`).",
             c.coordinator_address, mode.ok() ? *mode : "of unknown mode (" + std::string(mode.status().message()) + ")");
  }
  if (kEnablePreemptionServiceFlag.value()) attach_process_preemption_sync(r.agent.get());
  set_job_key_value(r.job_kv);
  profiler::set_process(c.process_id, absl::StrCat("process ", c.process_id, " on ", host_name(), " (pid ", getpid(), ")"));
  log_info("[mcx.distributed] process {} of {} joined the job on host {}{} (coordinator {}, detected by {})",
           c.process_id, c.num_processes, host_name(),
           c.local_process_id ? absl::StrCat(", local process ", *c.local_process_id) : std::string(),
           c.coordinator_address, c.detected_by);
  return absl::OkStatus();
}

void initialize(const InitializeOptions& options) { throw_if_error(initialize_or_status(options)); }

absl::Status shutdown_or_status() {
  Runtime& r = runtime();
  MutexLock lock(&r.mu);
  if (!r.agent) return absl::OkStatus();
  detach_process_preemption_sync();  // its watcher uses the agent: joined before the agent goes
  close_job_key_value_locked(r);
  stop_data_plane();
  absl::Status s = r.agent->shutdown();
  if (r.service) {
    // Keep serving until every other task has left and closed its stream, so none of them sees the
    // coordinator vanish while it is still working or leaving. After a shutdown barrier that is at once;
    // in recoverable mode (no barrier) the others may still be running: wait up to shutdown_timeout.
    const ServiceOptions& so = r.service->options();
    absl::Time until = absl::Now() + (so.recoverable ? so.shutdown_timeout : absl::ZeroDuration()) + absl::Seconds(2);
    while (absl::Now() < until) {
      bool busy = false;
      for (const TaskStatus& t : r.service->status().tasks) {
        busy = busy || t.watching || t.info.state == TaskState::kConnected;
      }
      if (!busy) break;
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  teardown_locked(r);
  clear_distributed_topology();
  return s;
}

void shutdown() { throw_if_error(shutdown_or_status()); }

bool is_initialized() {
  Runtime& r = runtime();
  MutexLock lock(&r.mu);
  return r.agent != nullptr;
}

bool job_is_recoverable() {
  Runtime& r = runtime();
  MutexLock lock(&r.mu);
  return r.agent != nullptr && r.recoverable_service;
}

CoordinationAgent* agent() {
  Runtime& r = runtime();
  MutexLock lock(&r.mu);
  return r.agent.get();
}

}  // namespace mcx::distributed
