// Recoverable jobs survive a coordinator restart: the agent rejoins the new coordination service with its old
// incarnation, re-publishes the key-value entries it owns, and the calls the outage interrupted are retried
// (coordination/agent.h, "Losing the coordinator"; docs/fault_tolerance.md, "The coordinator can restart").
#include "mcx/distributed/coordination/agent_impl.h"

#include "absl/strings/str_cat.h"
#include "mcx/core/logging.h"

namespace mcx::distributed {
namespace {

std::string fmt_duration(absl::Duration d) { return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(1))); }

// The coordinator may come back: transport failures and deadlines are worth another attempt.
bool retryable(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kDeadlineExceeded ||
         s.code() == absl::StatusCode::kCancelled;
}

std::string without_trailing_slashes(std::string_view s) {
  while (!s.empty() && s.back() == '/') s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

void CoordinationAgent::Impl::request_rejoin(absl::Status why, uint64_t epoch) {
  std::shared_ptr<WatchStream> s;
  {
    MutexLock lock(&mu);
    if (stopping || link != Link::kUp || link_epoch != epoch || rejoin_requested) return;
    rejoin_requested = true;
    rejoin_reason = std::move(why);
    s = stream;
  }
  if (s) s->cancel();  // wakes the watcher thread, which rejoins
}

std::shared_ptr<WatchStream> CoordinationAgent::Impl::rejoin(absl::Status why) {
  const AgentOptions& o = options();
  const absl::Time lost_at = absl::Now();
  const absl::Time deadline = lost_at + o.reconnect_timeout;
  std::shared_ptr<WatchStream> old;
  {
    MutexLock lock(&mu);
    if (stopping) return nullptr;
    link = Link::kRejoining;
    rejoining_since = lost_at;
    rejoin_requested = false;
    old = std::move(stream);
  }
  if (old) old->cancel();
  old.reset();
  std::string what(why.message());
  if (what.rfind("lost the coordination service", 0) != 0) {
    what = absl::StrCat("lost the coordination service at ", client().target(), " (", what, ")");
  }
  log_warn("[mcx.distributed] task {} {}; rejoining it for up to {} (recoverable job)", o.task_id, what,
           fmt_duration(o.reconnect_timeout));
  // The default handler ends the process before a waiting call can return the error (and the program exit with
  // its own code); with on_failure the calls fail too, after the callback was called.
  auto give_up = [&](const absl::Status& error) {
    if (!o.on_failure) coordinator_lost(error);
    {
      MutexLock lock(&mu);
      link = Link::kLost;
      link_error = error;
    }
    coordinator_lost(error);
  };
  absl::Duration backoff = kFirstBackoff;
  absl::Status last = why;
  int attempts = 0;
  while (true) {
    if (is_stopping()) return nullptr;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      give_up(absl::UnavailableError(absl::StrCat(
          "lost the coordination service at ", client().target(), ": could not rejoin it within ",
          fmt_duration(o.reconnect_timeout), " (", attempts, " attempt(s); last error: ", last.message(), ")")));
      return nullptr;
    }
    ++attempts;
    uint64_t generation;
    std::vector<PassedBarrier> passed;
    {
      MutexLock lock(&mu);
      generation = live_set_generation;
      for (const auto& [name, counter] : barrier_passed) passed.push_back({name, counter});
    }
    const absl::Time attempt_start = absl::Now();
    // Short attempts: the gRPC client waits in them for the connection to come up (see rejoin_task).
    const absl::Duration rpc = std::min({left, o.rpc_timeout, kRejoinAttempt});
    absl::StatusOr<RegisterResult> r = client().rejoin_task(o.task_id, o.incarnation, o.num_tasks, generation, passed, rpc);
    if (r.ok()) {
      absl::StatusOr<std::unique_ptr<WatchStream>> opened = client().watch(o.task_id, o.incarnation, rpc);
      if (opened.ok()) {
        std::shared_ptr<WatchStream> fresh = std::move(*opened);
        absl::StatusOr<int> republished = republish(deadline);
        if (republished.ok()) {
          Incarnation before;
          {
            MutexLock lock(&mu);
            if (!stopping) {
              before = service_incarnation;
              service_incarnation = r->service_incarnation;
              stream = fresh;
              link = Link::kUp;
              ++link_epoch;
            }
          }
          if (is_stopping()) {
            fresh->cancel();
            return nullptr;
          }
          log_info("[mcx.distributed] task {} rejoined the coordination service at {} {} after losing it "
                   "({} attempt(s); service incarnation {:x} -> {:x}); re-published {} key(s)",
                   o.task_id, client().target(), fmt_duration(absl::Now() - lost_at), attempts, before,
                   r->service_incarnation, *republished);
          return fresh;
        }
        last = republished.status();
        fresh->cancel();
      } else {
        last = opened.status();
      }
    } else {
      last = r.status();
    }
    if (!retryable(last)) {
      give_up(absl::Status(last.code(), absl::StrCat("lost the coordination service at ", client().target(),
                                                     ": it refused this task's rejoin: ", last.message())));
      return nullptr;
    }
    {
      MutexLock lock(&mu);
      auto stop = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping; };
      mu.await_until(stop, std::min(attempt_start + backoff, deadline));  // an attempt that waited counts
    }
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

absl::StatusOr<int> CoordinationAgent::Impl::republish(absl::Time deadline) {
  std::vector<std::pair<std::string, OwnedEntry>> entries;
  {
    MutexLock lock(&mu);
    entries.assign(owned.begin(), owned.end());
  }
  int written = 0;
  for (const auto& [key, e] : entries) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("re-publishing ", entries.size(), " key-value entries took too long"));
    }
    absl::Status s = client().kv_insert(key, e.value, e.allow_overwrite, std::min(left, options().rpc_timeout));
    if (s.ok()) {
      ++written;
    } else if (retryable(s)) {
      return s;
    } else if (s.code() != absl::StatusCode::kAlreadyExists) {  // someone wrote it again already: theirs is newer
      log_warn("[mcx.distributed] task {} could not re-publish the key '{}' after rejoining: {}", options().task_id,
               key, std::string(s.message()));
    }
  }
  return written;
}

void CoordinationAgent::Impl::remember(std::string_view key, std::string_view value, bool allow_overwrite) {
  MutexLock lock(&mu);
  owned[std::string(key)] = OwnedEntry{std::string(value), allow_overwrite};
}

void CoordinationAgent::Impl::forget(std::string_view key) {
  const std::string k = without_trailing_slashes(key);
  const std::string under = k + "/";
  MutexLock lock(&mu);
  owned.erase(k);
  for (auto it = owned.lower_bound(under); it != owned.end() && it->first.starts_with(under);) it = owned.erase(it);
}

bool CoordinationAgent::Impl::lost_link(const absl::Status& s, uint64_t epoch) const {
  // UNAVAILABLE comes only from the transport (the service never answers it); other failures count when the
  // link changed during the call (the answer came from a coordinator that was going away).
  if (s.code() == absl::StatusCode::kUnavailable) return true;
  if (!retryable(s) && s.code() != absl::StatusCode::kAborted) return false;
  MutexLock lock(&mu);
  return link_epoch != epoch || link != Link::kUp;
}

absl::StatusOr<uint64_t> CoordinationAgent::Impl::await_link(std::string_view api, absl::Time deadline) {
  MutexLock lock(&mu);
  auto settled = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return link != Link::kRejoining || stopping; };
  mu.await_until(settled, deadline);
  if (link == Link::kLost) {
    return absl::Status(link_error.code(), absl::StrCat("[", std::string(api), "] ", link_error.message()));
  }
  if (link == Link::kRejoining) {
    return absl::UnavailableError(absl::StrCat("[", std::string(api), "] the coordination service at ",
                                               client().target(), " is unreachable (this task has been rejoining it for ",
                                               fmt_duration(absl::Now() - rejoining_since), ")"));
  }
  return link_epoch;
}

void CoordinationAgent::Impl::await_link_change(uint64_t epoch, absl::Time until) {
  MutexLock lock(&mu);
  auto changed = [this, epoch]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return link_epoch != epoch || link == Link::kLost || stopping;
  };
  mu.await_until(changed, until);
}

}  // namespace mcx::distributed
