// mcx-coordinator: the coordination service as a standalone process, so the control plane can live apart
// from the job and outlive process 0.
//
//   mcx-coordinator --bind 127.0.0.1:0 --num-processes 4 [--heartbeat-timeout 10] [--shutdown-timeout 300]
//                   [--recoverable] [--metrics-address 127.0.0.1:9400] [mTLS flags]
//
// Prints "mcx-coordinator listening on HOST:PORT" (the bound port when 0 was asked) on stdout once it
// serves (and, with --metrics-address, "mcx-coordinator metrics on http://HOST:PORT/metrics": the service's
// metrics in the Prometheus text format, docs/profiling.md), logs every task state change on stderr, and exits 0 on SIGTERM/SIGINT (or, with
// --exit-when-done, once every task has shut down: 0, or 1 when the job failed).
//
// A recoverable job survives the coordinator's death: start it again with the same --bind address, -n and
// --recoverable, and the job's tasks rejoin it (docs/fault_tolerance.md, "The coordinator can restart").
#include <CLI/CLI.hpp>
#include <signal.h>
#include <time.h>

#include <cstdio>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "mcx/distributed/cluster.h"
#include "mcx/distributed/coordination/heartbeat_defaults.h"
#include "mcx/distributed/coordination/service.h"
#include "mcx/distributed/rpc/fast_path_server.h"
#include "mcx/distributed/rpc/grpc_server.h"
#include "tools/common/http_metrics_server.h"
#include "tools/common/mtls_flags.h"

namespace {

using mcx::distributed::JobState;
using mcx::distributed::TaskState;

std::string host_of(const std::string& bind) {
  size_t colon = bind.rfind(':');
  return colon == std::string::npos ? bind : bind.substr(0, colon);
}

// Logs the differences between consecutive job states (one line per task change) to stderr (unless quiet)
// and to the audit log (if any, event "task_state"). `rejoined(id)` says whether a task came back after a
// coordinator restart (rejoin_task), for the log line.
class ChangeLogger {
 public:
  ChangeLogger(std::function<bool(int)> rejoined, bool print, std::shared_ptr<mcx::distributed::AuditLog> audit)
      : rejoined_(std::move(rejoined)), print_(print), audit_(std::move(audit)) {}
  void on_state(const JobState& s) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& t : s.tasks) {
      const mcx::distributed::TaskInfo* old = t.id < static_cast<int>(last_.tasks.size()) ? &last_.tasks[t.id] : nullptr;
      if (old != nullptr && old->state == t.state && old->incarnation == t.incarnation) continue;
      if (old == nullptr && t.state == TaskState::kDisconnected) continue;
      std::string line = absl::StrCat("[mcx-coordinator] task ", t.id, " ", std::string(task_state_name(t.state)),
                                      " (incarnation ", absl::Hex(t.incarnation), ")");
      if (t.state == TaskState::kConnected && rejoined_(t.id)) absl::StrAppend(&line, " rejoined");
      if (!t.error.ok()) absl::StrAppend(&line, ": ", t.error.ToString());
      if (print_) std::cerr << line << std::endl;
      if (audit_) audit_->record("task_state", absl::StrCat("task/", t.id), "", line.substr(line.find("task ")));
    }
    if (!s.job_error.ok() && last_.job_error.ok()) {
      if (print_) std::cerr << "[mcx-coordinator] job failed: " << s.job_error.ToString() << std::endl;
      if (audit_) audit_->record("job_failed", "", "", s.job_error.ToString());
    }
    last_ = s;
  }

 private:
  std::function<bool(int)> rejoined_;
  const bool print_;
  const std::shared_ptr<mcx::distributed::AuditLog> audit_;
  std::mutex mu_;
  JobState last_;
};

bool job_done(const JobState& s, bool* failed) {
  *failed = !s.job_error.ok();
  for (const auto& t : s.tasks) {
    if (t.state == TaskState::kShutdown) continue;
    if (t.state == TaskState::kError && *failed) continue;
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mcx-coordinator: standalone coordination service for an mcx job"};
  std::string bind = absl::StrCat("[::]:", mcx::distributed::kDefaultCoordinatorPort);
  int num_processes = 0;
  std::optional<double> heartbeat_timeout;  // unset: the default for the job's size (heartbeat_defaults.h)
  double shutdown_timeout = 300;
  bool recoverable = false, expect_restarts = false, exit_when_done = false, quiet = false;
  size_t max_key_bytes = 1024, max_value_bytes = 4 << 20;
  app.add_option("--bind", bind, "HOST:PORT to serve on; port 0 picks a free one")->capture_default_str();
  app.add_option("-n,--num-processes", num_processes, "number of tasks in the job")->required()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--heartbeat-timeout", heartbeat_timeout,
                 "seconds without a heartbeat before a task fails (default 10, or 10 heartbeat intervals of a job "
                 "over 4,096 processes: N/409.6)")
      ->check(CLI::PositiveNumber);
  app.add_option("--shutdown-timeout", shutdown_timeout, "seconds of the shutdown barrier (0 = none)")
      ->capture_default_str();
  app.add_flag("--recoverable", recoverable, "keep the job running after a task fails; restarted tasks rejoin");
  app.add_flag("--expect-restarts", expect_restarts,
               "(with --recoverable) failed tasks are restarted by a launcher: barriers wait for their next incarnation "
               "until their deadline instead of failing at once");
  app.add_option("--max-key-bytes", max_key_bytes, "largest key accepted")->capture_default_str();
  app.add_option("--max-value-bytes", max_value_bytes, "largest value accepted")->capture_default_str();
  int64_t rate_limit = -1, max_keys_per_task = -1, max_bytes_per_task = -1;  // -1: the MCX_* variable or default
  app.add_option("--rate-limit", rate_limit,
                 "requests per second each peer may make (0: no limit; default: MCX_COORDINATOR_RATE_LIMIT, 10000)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_option("--kv-max-keys-per-task", max_keys_per_task,
                 "keys one task may own under identity binding (default: MCX_KV_MAX_KEYS_PER_TASK, 100000)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--kv-max-bytes-per-task", max_bytes_per_task,
                 "bytes one task may own under identity binding (default: MCX_KV_MAX_BYTES_PER_TASK, 256 MiB)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 50));
  int fast_path_threads = 0;
  app.add_option("--fast-path-threads", fast_path_threads,
                 "threads serving the fast path's connections (default: one per 2,048 processes, at most one per core "
                 "and 8)")
      ->check(CLI::Range(1, mcx::distributed::FastPathServer::kMaxReactorThreads));
  app.add_flag("--exit-when-done", exit_when_done,
               "exit once every task has shut down (0), or the job failed and no task is left (1)");
  app.add_flag("-q,--quiet", quiet, "do not log task state changes");
  std::string metrics_address;
  app.add_option("--metrics-address", metrics_address,
                 "HOST:PORT to serve the service's metrics on (GET /metrics, the Prometheus text format; plaintext: "
                 "bind where only the monitoring reaches; port 0 picks a free one)");
  std::string audit_log;
  app.add_option("--audit-log", audit_log,
                 "append JSON lines to FILE: denied calls, admin calls, registrations, error reports, task state "
                 "changes (docs/security.md)");
  mcx::tools::MtlsFlags mtls;
  mcx::tools::add_mtls_flags(app, mtls, /*per_task=*/false);
  double mtls_refresh = 1;
  app.add_option("--mtls-refresh-interval", mtls_refresh, "seconds between re-reads of the certificate files")
      ->group("mTLS")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  // Block the termination signals in every thread (gRPC's threads inherit the mask); main waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  mcx::distributed::ServiceOptions so;
  so.num_tasks = num_processes;
  so.heartbeat_timeout = heartbeat_timeout ? absl::Seconds(*heartbeat_timeout)
                                           : mcx::distributed::default_heartbeat_timeout(num_processes);
  so.shutdown_timeout = absl::Seconds(shutdown_timeout);
  so.recoverable = recoverable;
  so.failed_tasks_restart = expect_restarts;
  so.max_key_bytes = max_key_bytes;
  so.max_value_bytes = max_value_bytes;
  if (max_keys_per_task >= 0) so.max_keys_per_task = max_keys_per_task;
  if (max_bytes_per_task >= 0) so.max_bytes_per_task = max_bytes_per_task;
  auto service = mcx::distributed::CoordinationService::create(so);
  if (!service.ok()) {
    std::cerr << "[mcx-coordinator] " << service.status().message() << std::endl;
    return 2;
  }
  mcx::distributed::GrpcServerOptions gso;
  if (!audit_log.empty()) {
    auto log = mcx::distributed::AuditLog::open(audit_log);
    if (!log.ok()) {
      std::cerr << "[mcx-coordinator] " << log.status().message() << std::endl;
      return 2;
    }
    gso.audit_log = *log;
  }
  gso.bind_address = bind;
  gso.fast_path_threads = fast_path_threads;
  if (rate_limit >= 0) gso.rate_limit = rate_limit;
  gso.mtls = mcx::tools::to_mtls_options(mtls);
  gso.mtls.refresh_interval = absl::Seconds(mtls_refresh);
  auto server = mcx::distributed::GrpcCoordinationServer::start(service->get(), gso);
  if (!server.ok()) {
    std::cerr << "[mcx-coordinator] " << server.status().message() << std::endl;
    return 2;
  }
  std::cout << "mcx-coordinator listening on " << host_of(bind) << ":" << (*server)->port() << std::endl;
  std::unique_ptr<mcx::tools::HttpMetricsServer> metrics;
  if (!metrics_address.empty()) {
    auto m = mcx::tools::HttpMetricsServer::start(
        metrics_address, [s = service->get()] { return s->metrics_registry().text(); });
    if (!m.ok()) {
      std::cerr << "[mcx-coordinator] --metrics-address: " << m.status().message() << std::endl;
      return 2;
    }
    metrics = *std::move(m);
    std::cout << "mcx-coordinator metrics on http://" << host_of(metrics_address) << ":" << metrics->port()
              << "/metrics" << std::endl;
  }
  std::cerr << "[mcx-coordinator] serving " << num_processes << " tasks"
            << (recoverable ? " (recoverable: the tasks of a job whose coordinator restarted may rejoin)"
                            : " (fate-sharing)")
            << ", heartbeat timeout " << absl::ToDoubleSeconds(so.heartbeat_timeout) << " s"
            << (gso.mtls.enabled() ? ", mTLS" : ", plaintext (no mTLS)") << std::endl;

  ChangeLogger logger(
      [s = service->get()](int id) {
        mcx::distributed::ServiceStatus st = s->status();
        return id >= 0 && id < static_cast<int>(st.tasks.size()) && st.tasks[id].rejoined;
      },
      !quiet, gso.audit_log);
  std::optional<uint64_t> watch_id;
  if (!quiet || gso.audit_log) {
    auto w = (*service)->watch(-1, 0, [&logger](const std::shared_ptr<const mcx::distributed::JobStateSnapshot>& s) {
      logger.on_state(s->state());
    });
    if (w.ok()) watch_id = *w;
  }

  int exit_code = 0;
  while (true) {
    timespec tick{0, 200'000'000};
    int sig = sigtimedwait(&stop_signals, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      std::cerr << "[mcx-coordinator] " << strsignal(sig) << ": stopping" << std::endl;
      break;
    }
    bool failed = false;
    if (exit_when_done && job_done((*service)->job_state(), &failed)) {
      std::cerr << "[mcx-coordinator] every task has left" << (failed ? " (the job failed)" : "") << std::endl;
      exit_code = failed ? 1 : 0;
      break;
    }
  }
  if (watch_id) (*service)->end_watch(*watch_id, /*connection_lost=*/false);
  metrics.reset();  // before the service its renderer reads
  (*server)->shutdown(absl::Milliseconds(500));
  server->reset();
  service->reset();
  return exit_code;
}
