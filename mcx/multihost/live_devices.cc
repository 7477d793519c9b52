#include "mcx/multihost/live_devices.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "mcx/core/error.h"
#include "mcx/collectives/live_set.h"
#include "mcx/core/logging.h"
#include "mcx/collectives/peer_group.h"
#include "mcx/core/profiler.h"
#include "mcx/distributed/distributed.h"
#include "mcx/runtime/spmd_executable.h"
#include "mcx/runtime/stream.h"

namespace mcx {
namespace {

// Agreements of live_devices run under this name, apart from other users of the service's live-set agreement.
constexpr const char* kAgreementName = "mcx/live_devices";

// What each caller sends with an agreement: how its scope's body ended. One letter, then for failures
// "<code>\n<failed process>\n<message>".
constexpr char kEntering = 'E';      // a fresh entry (no body ran)
constexpr char kBodyOk = 'O';        // the body finished without error
constexpr char kBodyFailed = 'F';    // the body raised
constexpr char kBodyLostPeer = 'P';  // the body raised mcx::ProcessFailure

struct Outcome {
  char kind = kEntering;
  absl::StatusCode code = absl::StatusCode::kOk;
  int failed_process = -1;  // kBodyLostPeer: the process the body's error named
  std::string message;
};

std::string encode(const Outcome& o) {
  if (o.kind != kBodyFailed && o.kind != kBodyLostPeer) return std::string(1, o.kind);
  return absl::StrCat(std::string(1, o.kind), static_cast<int>(o.code), "\n", o.failed_process, "\n", o.message);
}

Outcome decode(const std::string& payload) {
  Outcome o;
  if (payload.empty()) return o;
  o.kind = payload[0];
  if (o.kind != kBodyFailed && o.kind != kBodyLostPeer) return o;
  std::vector<std::string> parts = absl::StrSplit(payload.substr(1), absl::MaxSplits('\n', 2));
  int code = static_cast<int>(absl::StatusCode::kUnknown);
  if (parts.size() == 3 && absl::SimpleAtoi(parts[0], &code) && absl::SimpleAtoi(parts[1], &o.failed_process)) {
    o.code = static_cast<absl::StatusCode>(code);
    o.message = parts[2];
  } else {
    o.code = absl::StatusCode::kUnknown;
    o.message = "(an undecodable outcome)";
  }
  return o;
}

Outcome outcome_of(const std::exception_ptr& error) {
  Outcome o;
  if (!error) {
    o.kind = kBodyOk;
    return o;
  }
  try {
    std::rethrow_exception(error);
  } catch (const ProcessFailure& e) {
    o = Outcome{kBodyLostPeer, e.code(), e.process(), e.what()};
  } catch (const Error& e) {
    o = Outcome{kBodyFailed, e.code(), -1, e.what()};
  } catch (const std::exception& e) {
    o = Outcome{kBodyFailed, absl::StatusCode::kUnknown, -1, e.what()};
  } catch (...) {
    o = Outcome{kBodyFailed, absl::StatusCode::kUnknown, -1, "an exception that is not a std::exception"};
  }
  return o;
}

// The processes hosting `devices`, ascending; checks the caller is one of them.
std::vector<int> hosting_processes(const std::vector<Device>& devices, const char* api) {
  if (devices.empty()) throw InvalidArgument(absl::StrCat("[", api, "] expected at least one device, got none"));
  std::set<int> hosting;
  for (const Device& d : devices) hosting.insert(d.process_index);
  const int me = process_index();
  if (!hosting.count(me)) {
    throw InvalidArgument(absl::StrCat("[", api, "] process ", me, " hosts none of the ", devices.size(),
                                       " devices asked about (they are on processes {", absl::StrJoin(hosting, ","),
                                       "}); only their processes may call it"));
  }
  return std::vector<int>(hosting.begin(), hosting.end());
}

struct Agreement {
  LiveDevices live;
  std::map<int, std::string> payloads;  // by process
};

// One live-set agreement over the processes hosting `devices`, carrying `payload`; records it as the live
// set of those processes and aborts the data-plane groups of the ones found dead.
Agreement agree(const std::vector<Device>& devices, const std::vector<int>& hosting, absl::Duration timeout,
                std::string payload) {
  Agreement a;
  if (!distributed::is_initialized()) {  // one process: everything is live, always the same live set
    a.live.devices = devices;
    a.live.processes = {process_index()};
    a.live.incarnations = {0};
    a.live.generation = 1;
    a.payloads[process_index()] = std::move(payload);
    return a;
  }
  distributed::LiveSetRequest request{std::vector<distributed::TaskId>(hosting.begin(), hosting.end()),
                                      kAgreementName, std::move(payload)};
  profiler::Scope traced("fault_tolerance", "live-set agreement");
  if (traced.recording()) traced.arg("processes asked", absl::StrJoin(hosting, ","));
  distributed::LiveTasks live = value_or_throw(distributed::agent()->get_live_tasks(request, timeout));
  if (traced.recording()) {
    traced.arg("live", absl::StrJoin(live.tasks, ",")).arg("generation", static_cast<int64_t>(live.generation));
  }
  const std::set<int> alive(live.tasks.begin(), live.tasks.end());
  for (int p : hosting) {
    if (alive.count(p)) continue;
    profiler::instant("fault_tolerance", absl::StrCat("process ", p, " not live"),
                      {{"generation", static_cast<int64_t>(live.generation)}});
    abort_peer_groups_of_process(
        p, mark_process_failure(absl::UnavailableError(absl::StrCat(
                                    "[live_devices] process ", p, " is not live (generation ", live.generation,
                                    " of the live set of processes {", absl::StrJoin(hosting, ","), "})")),
                                p));
  }
  for (const Device& d : devices) {
    if (alive.count(d.process_index)) a.live.devices.push_back(d);
  }
  a.live.processes.assign(live.tasks.begin(), live.tasks.end());
  a.live.incarnations = live.incarnations;
  a.live.generation = live.generation;
  for (size_t i = 0; i < live.tasks.size(); ++i) a.payloads[live.tasks[i]] = live.payloads.at(i);
  record_live_set(LiveSet{a.live.generation, hosting, a.live.processes, a.live.incarnations});
  return a;
}

std::vector<int> device_ids(const std::vector<Device>& devices) {
  std::vector<int> ids;
  for (const Device& d : devices) ids.push_back(d.global_id);
  return ids;
}

// What the last scope over a requested device list left: its exit agreement (the next scope's entry), the
// generation its body ran on and whether it raised.
struct LastScope {
  LiveDevices exit;
  uint64_t body_generation = 0;
  bool failed = false;
};

struct ScopeHistory {
  std::mutex mu;
  std::map<std::vector<int>, LastScope> by_devices;  // guarded by mu
};

ScopeHistory& scope_history() {
  static ScopeHistory* r = new ScopeHistory();  // never destroyed: a scope may run during exit
  return *r;
}

// How a scope ended, decided from its entry and exit agreements alone, so every surviving entry member decides
// the same: an entry member missing from the exit (or back with another incarnation) is lost; otherwise the
// first member whose body did not finish is the failure, preferring an error that is not a process failure (a
// process failure seen by a live process is usually the echo of a failing body's abort).
struct Verdict {
  int lost = -1;          // an entry member not in the exit with its entry incarnation
  bool restarted = false;  // ... because it came back with another incarnation
  int failed = -1;        // the member whose body's outcome is reported
  Outcome failure;
  bool completed() const { return lost < 0 && failed < 0; }
};

Verdict judge(const LiveDevices& entry, const Agreement& exit) {
  Verdict v;
  for (size_t i = 0; i < entry.processes.size() && v.lost < 0; ++i) {
    const int p = entry.processes[i];
    auto it = std::find(exit.live.processes.begin(), exit.live.processes.end(), p);
    if (it == exit.live.processes.end()) {
      v.lost = p;
    } else if (exit.live.incarnations[it - exit.live.processes.begin()] != entry.incarnations[i]) {
      v.lost = p;
      v.restarted = true;
    }
  }
  if (v.lost >= 0) return v;
  for (int p : entry.processes) {
    Outcome o = decode(exit.payloads.at(p));
    if (o.kind == kBodyOk) continue;
    if (o.kind == kEntering) {
      o = Outcome{kBodyFailed, absl::StatusCode::kFailedPrecondition, -1,
                  "it entered a new scope instead of finishing this one (do all processes run the same scopes?)"};
    }
    if (v.failed < 0 || (v.failure.kind == kBodyLostPeer && o.kind == kBodyFailed)) {
      v.failed = p;
      v.failure = o;
    }
  }
  return v;
}

// Waits for the work this process's devices have queued (the body's, issued without waiting).
absl::Status drain_local_devices(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (const Device& d : local_devices()) MCX_RETURN_IF_ERROR(synchronize_device(d, deadline));
  return absl::OkStatus();
}

}  // namespace

LiveDevices live_devices(const std::vector<Device>& devices, absl::Duration timeout) {
  const std::vector<int> hosting = hosting_processes(devices, "live_devices");
  {  // a plain agreement starts a new sequence: the next scope agrees afresh
    ScopeHistory& r = scope_history();
    std::lock_guard<std::mutex> lock(r.mu);
    r.by_devices.clear();
  }
  LiveDevices live = agree(devices, hosting, timeout, encode(Outcome{})).live;
  restart_launch_sequences(hosting);  // every live process of `hosting` passes here together
  return live;
}

namespace detail {
namespace {

// Whether a scope is running in this process (scopes agree in one sequence per job: they cannot nest).
std::atomic<bool> g_scope_running{false};

}  // namespace

LiveDevicesScope::LiveDevicesScope(const std::vector<Device>& devices, absl::Duration timeout)
    : devices_(devices), timeout_(timeout) {
  hosting_ = hosting_processes(devices, "with_live_devices");
  if (g_scope_running.exchange(true)) {
    throw FailedPrecondition(
        "[with_live_devices] a scope is already running in this process: scopes cannot be nested or run from "
        "several threads (every process must enter the same scopes in the same order)");
  }
  std::optional<LastScope> last;
  {
    ScopeHistory& r = scope_history();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.by_devices.find(device_ids(devices));
    if (it != r.by_devices.end()) last = it->second;
  }
  try {
    entry_ = last ? last->exit : agree(devices, hosting_, timeout, encode(Outcome{})).live;
  } catch (...) {
    g_scope_running.store(false);  // no destructor runs for an object whose constructor threw
    throw;
  }
  entered_ = true;
  // The launch check counts launches per mesh; the members' counts may differ after a failed scope (one
  // process launched what another did not) or on a new live set (a restarted process counts from 0), so every
  // member restarts them at this entry, which they all pass together.
  if (!last || last->failed || last->body_generation != entry_.generation) restart_launch_sequences(hosting_);
}

LiveDevicesScope::~LiveDevicesScope() {
  if (entered_) g_scope_running.store(false);
}

void LiveDevicesScope::exit(std::exception_ptr body_error) {
  const int me = process_index();
  if (!body_error) {
    if (absl::Status drained = drain_local_devices(timeout_); !drained.ok()) {
      body_error = std::make_exception_ptr(Error(drained.code(), std::string(drained.message())));
    }
  }
  const Outcome mine = outcome_of(body_error);
  if (!distributed::is_initialized()) {
    if (body_error) std::rethrow_exception(body_error);
    return;
  }
  if (body_error) {
    // The others may be waiting for this process in a collective of the body: end those groups now.
    const absl::Status why = absl::AbortedError(
        absl::StrCat("[with_live_devices] the body failed on process ", me, ": ", mine.message));
    for (int p : entry_.processes) {
      if (p != me) abort_peer_groups_of_process(p, why);
    }
  }
  Agreement exit;
  try {
    exit = agree(devices_, hosting_, timeout_, encode(mine));
  } catch (...) {  // no agreement to reuse: the next scope agrees afresh
    ScopeHistory& r = scope_history();
    std::lock_guard<std::mutex> lock(r.mu);
    r.by_devices.erase(device_ids(devices_));
    throw;
  }
  // The same decision on every surviving entry member: they all see the same entry and the same exit.
  const Verdict verdict = judge(entry_, exit);
  {
    ScopeHistory& r = scope_history();
    std::lock_guard<std::mutex> lock(r.mu);
    r.by_devices.insert_or_assign(device_ids(devices_), LastScope{exit.live, entry_.generation, !verdict.completed()});
  }
  if (verdict.completed()) return;
  if (verdict.lost >= 0) {
    throw ProcessFailure(absl::StatusCode::kUnavailable,
                         absl::StrCat("[with_live_devices] process ", verdict.lost,
                                      verdict.restarted ? " restarted (a new incarnation)" : " failed",
                                      " during the body (entry generation ", entry_.generation, ", processes {",
                                      absl::StrJoin(entry_.processes, ","), "}); the live set is now generation ",
                                      exit.live.generation, " (processes {", absl::StrJoin(exit.live.processes, ","),
                                      "})"),
                         verdict.lost);
  }
  const int chosen = verdict.failed;
  Outcome chosen_outcome = verdict.failure;
  if (chosen == me && body_error) std::rethrow_exception(body_error);
  if (body_error) {
    log_debug("[with_live_devices] this process's body failed too (reporting process {}'s error): {}", chosen,
              mine.message);
  }
  if (chosen_outcome.code == absl::StatusCode::kOk) chosen_outcome.code = absl::StatusCode::kUnknown;
  absl::Status st(chosen_outcome.code, absl::StrCat("[with_live_devices] the body failed on process ", chosen, ": ",
                                                    chosen_outcome.message));
  if (chosen_outcome.kind == kBodyLostPeer) st = mark_process_failure(st, chosen_outcome.failed_process);
  throw_if_error(st);
}

}  // namespace detail
}  // namespace mcx
