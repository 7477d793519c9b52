#include "mcx/multihost/preemption.h"

#include <unistd.h>

#include <mutex>

#include "absl/strings/str_cat.h"
#include "mcx/core/config.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"
#include "mcx/core/mutex.h"
#include "mcx/core/profiler.h"
#include "mcx/distributed/distributed.h"
#include "mcx/distributed/coordination/preemption_notifier.h"
#include "mcx/distributed/coordination/preemption_sync.h"

namespace mcx::multihost {
namespace {

const Flag<double> kPreemptionSyncTimeoutFlag(
    "MCX_PREEMPTION_SYNC_TIMEOUT_S", 60.0,
    "deadline in seconds of the preemption sync agreement: every live process must report its step within it",
    [](const double& v) -> std::optional<std::string> {
      if (v > 0 && v <= 1e9) return std::nullopt;
      return "is out of range: expected seconds in (0, 1e9]";
    });

// This process's own view: the notice it received (SIGTERM or notify_preemption) and, without a job, the
// steps of its calls.
struct Local {
  Mutex mu;
  std::optional<std::string> notice ABSL_GUARDED_BY(mu);
  bool published ABSL_GUARDED_BY(mu) = false;  // the notice reached the job's key-value store
  std::optional<int64_t> last_step ABSL_GUARDED_BY(mu);
  std::optional<int64_t> sync_step ABSL_GUARDED_BY(mu);  // one process: the step that returned true
  std::once_flag handler_once;
};

Local& local() {
  static Local* l = new Local();  // never destroyed: the notifier thread may use it during exit
  return *l;
}

std::string self() {
  if (auto sync = distributed::process_preemption_sync()) return absl::StrCat("process ", sync->task_id());
  return absl::StrCat("pid ", getpid());
}

// Records the notice and publishes it to the job when there is one. Runs on the notifier thread (SIGTERM) or
// the caller's (notify_preemption).
absl::Status deliver(const std::string& reason) {
  Local& l = local();
  {
    MutexLock lock(&l.mu);
    if (!l.notice) l.notice = reason;
  }
  std::shared_ptr<distributed::PreemptionSync> sync = distributed::process_preemption_sync();
  if (!sync) return absl::OkStatus();  // one process, or not initialized yet: the next call publishes it
  absl::Status s = sync->notify(reason);
  MutexLock lock(&l.mu);
  if (s.ok()) l.published = true;
  return s;
}

void on_sigterm() {
  const std::string reason = absl::StrCat(self(), " received SIGTERM");
  log_info("[mcx.preemption] {}: stopping at the next preemption sync point (a second SIGTERM ends the process)",
           reason);
  if (absl::Status s = deliver(reason); !s.ok()) {
    log_warn("[mcx.preemption] the preemption notice could not be published yet (the next step retries): {}",
             s.ToString());
  }
}

absl::Status install_handler() { return distributed::install_sigterm_notifier(on_sigterm); }

// Throws FailedPrecondition when MCX_ENABLE_PREEMPTION_SERVICE=0 (JAX raises for its flag the same way).
void require_service(const char* api) {
  if (kEnablePreemptionServiceFlag.value()) return;
  throw FailedPrecondition(absl::StrCat("[", api, "] the preemption service is off (MCX_ENABLE_PREEMPTION_SERVICE=0): "
                                        "unset the variable (or set it to 1) to use preemption sync points"));
}

}  // namespace

void enable_preemption_sync() {
  require_service("enable_preemption_sync");
  std::call_once(local().handler_once, [] {});  // the first reached_preemption_sync_point need not try again
  throw_if_error(install_handler());
}

void notify_preemption(const std::string& reason) {
  require_service("notify_preemption");
  throw_if_error(deliver(reason));
}

bool reached_preemption_sync_point(int64_t step, std::optional<absl::Duration> timeout) {
  require_service("reached_preemption_sync_point");
  const std::optional<double> option =
      timeout ? std::optional<double>(absl::ToDoubleSeconds(*timeout)) : std::nullopt;
  const double seconds = value_or_throw(kPreemptionSyncTimeoutFlag.resolve(option));
  Local& l = local();
  std::call_once(l.handler_once, [] {
    if (absl::Status s = install_handler(); !s.ok()) {
      log_warn("[mcx.preemption] SIGTERM is not a preemption notice in this process: {}", s.ToString());
    }
  });
  if (std::shared_ptr<distributed::PreemptionSync> sync = distributed::process_preemption_sync()) {
    sync->set_timeout(absl::Seconds(seconds));
    std::optional<std::string> unpublished;
    {
      MutexLock lock(&l.mu);
      if (l.notice && !l.published) unpublished = l.notice;
    }
    if (unpublished) {  // received before initialize, or its publication failed: try again now
      if (absl::Status s = deliver(*unpublished); !s.ok()) {
        log_warn("[mcx.preemption] cannot publish the preemption notice yet: {}", s.ToString());
      }
    }
    profiler::Scope traced("fault_tolerance", "preemption sync point");
    traced.arg("step", step);
    const bool reached = value_or_throw(sync->reached_sync_point(step));
    if (reached) profiler::instant("fault_tolerance", absl::StrCat("preemption sync point reached at step ", step));
    return reached;
  }
  MutexLock lock(&l.mu);
  if (l.last_step && step <= *l.last_step) {
    throw InvalidArgument(absl::StrCat("[reached_preemption_sync_point] expected a step larger than the previous "
                                       "call's (", *l.last_step, "), got ", step));
  }
  l.last_step = step;
  if (l.notice && !l.sync_step) {
    l.sync_step = step;
    profiler::instant("fault_tolerance", absl::StrCat("preemption sync point reached at step ", step));
    log_info("[mcx.preemption] reached the preemption sync point at step {} ({})", step, *l.notice);
    return true;
  }
  return false;
}

std::optional<int64_t> preemption_sync_step() {
  if (std::shared_ptr<distributed::PreemptionSync> sync = distributed::process_preemption_sync()) {
    if (auto p = sync->sync_point()) return p->step;
    return std::nullopt;
  }
  Local& l = local();
  MutexLock lock(&l.mu);
  return l.sync_step;
}

}  // namespace mcx::multihost
