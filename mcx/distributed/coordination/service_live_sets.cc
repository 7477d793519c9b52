// The coordination service's live-set agreements (service.h, "Live-set agreement").
#include "mcx/distributed/coordination/service.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/error.h"
#include "mcx/distributed/coordination/service_format.h"

namespace mcx::distributed {

// How `now` differs from the agreement before it over the same (name, set): one merge of the two sorted lists.
std::shared_ptr<const LiveTasks::Change> CoordinationService::live_set_change(const AgreedLiveSet& before,
                                                                             const LiveTasks& now) {
  auto c = std::make_shared<LiveTasks::Change>();
  c->from_generation = before.generation;
  size_t i = 0, j = 0;
  while (i < before.tasks.size() || j < now.tasks.size()) {
    if (j == now.tasks.size() || (i < before.tasks.size() && before.tasks[i] < now.tasks[j])) {
      c->removed.push_back(before.tasks[i++]);
    } else if (i == before.tasks.size() || now.tasks[j] < before.tasks[i]) {
      c->added.push_back(now.tasks[j++]);
    } else {
      if (before.incarnations[i] != now.incarnations[j]) {  // restarted: another process under the same id
        c->removed.push_back(before.tasks[i]);
        c->added.push_back(now.tasks[j]);
      }
      ++i;
      ++j;
    }
  }
  c->payloads_empty = std::all_of(now.payloads.begin(), now.payloads.end(), [](const std::string& p) { return p.empty(); });
  return c;
}

void CoordinationService::get_live_tasks(TaskId task, Incarnation incarnation, LiveSetRequest request,
                                         absl::Duration timeout, Callback<const absl::StatusOr<LiveTasks>&> done) {
  ServiceLock lock(&mu_);
  auto reply = [&](absl::Status s) { lock.defer([f = std::move(done), s] { f(s); }); };
  if (absl::Status s = check_caller_locked("get_live_tasks", task, incarnation); !s.ok()) return reply(s);
  if (absl::Status s = check_participants("get_live_tasks", request.tasks); !s.ok()) return reply(s);
  if (request.payload.size() > options_.max_value_bytes) {
    return reply(absl::InvalidArgumentError(absl::StrCat("[get_live_tasks] the payload of task ", task, " is ",
                                                         request.payload.size(), " bytes; the limit is ",
                                                         options_.max_value_bytes)));
  }
  TaskSet set = resolve_set(std::move(request.tasks));
  if (!std::binary_search(set->begin(), set->end(), task)) {
    return reply(absl::InvalidArgumentError(
        absl::StrCat("[get_live_tasks] task ", task, " is not in the requested set {", join_ids(*set), "}")));
  }
  LiveSet& ls = live_sets_[LiveSetKey{std::move(request.name), std::move(set)}];
  auto old = ls.waiting.find(task);
  if (old != ls.waiting.end()) {
    lock.defer([f = std::move(old->second.done)] {
      f(absl::CancelledError("[get_live_tasks] superseded by a repeated call"));
    });
    ls.waiting.erase(old);
  }
  const absl::Time deadline = clock_->now() + timeout;
  if (ls.waiting.empty()) ls.first_call = clock_->now();
  ls.waiting[task] = LiveWaiter{incarnation, deadline, std::move(request.payload), std::move(done)};
  wake_timer_for_locked(deadline);
  evaluate_live_sets_locked(lock, /*membership_changed=*/false);
}

void CoordinationService::evaluate_live_sets_locked(ServiceLock& lock, bool membership_changed) {
  // After a coordinator restart no agreement completes until the membership is rebuilt: a task that has not
  // rejoined yet is live, and its generation floor is not known yet. (An O(N) walk after a restart: asked only
  // when an agreement could complete.)
  std::optional<bool> pending;
  auto membership_pending = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!pending) pending = !awaited_after_restart_locked().empty();
    return *pending;
  };
  for (auto it = live_sets_.begin(); it != live_sets_.end();) {
    const std::vector<TaskId>& set = *it->first.second;
    LiveSet& ls = it->second;
    if (membership_changed) ls.live_members_valid = false;
    if (ls.live_members_valid) {
      // No task changed since the last scan: the waiters are live members, and the new one completes it or not.
      if (ls.waiting.empty() || ls.waiting.size() < ls.live_members || membership_pending()) {
        ++it;
        continue;
      }
    }
    // Waiters whose task is no longer live (or restarted) are answered and dropped.
    for (auto w = ls.waiting.begin(); w != ls.waiting.end();) {
      const Task& t = tasks_[w->first];
      if (t.state != TaskState::kConnected || t.incarnation != w->second.incarnation) {
        auto f = std::move(w->second.done);
        absl::Status st = absl::AbortedError(
            absl::StrCat("[get_live_tasks] task ", w->first, " is no longer live: ", t.error.message()));
        lock.defer([f = std::move(f), st] { f(st); });
        w = ls.waiting.erase(w);
      } else {
        ++w;
      }
    }
    size_t live = 0;
    bool all_called = true;
    for (TaskId id : set) {
      if (tasks_[id].state != TaskState::kConnected) continue;
      ++live;
      if (all_called && !ls.waiting.count(id)) all_called = false;
    }
    ls.live_members = live;
    ls.live_members_valid = true;
    const bool complete = !ls.waiting.empty() && all_called && !membership_pending();
    if (complete) {
      LiveTasks result;
      for (auto& [id, w] : ls.waiting) {
        result.tasks.push_back(id);
        result.incarnations.push_back(w.incarnation);
        result.payloads.push_back(std::move(w.payload));
      }
      AgreedLiveSet& last = agreed_live_sets_[it->first];
      if (last.generation != 0) result.change = live_set_change(last, result);
      if (last.generation == 0 || last.tasks != result.tasks || last.incarnations != result.incarnations) {
        last = AgreedLiveSet{result.tasks, result.incarnations, ++live_set_generation_};
      }
      result.generation = last.generation;
      metrics_.live_set_agreements.add();
      metrics_.live_set_seconds.observe(absl::ToDoubleSeconds(clock_->now() - ls.first_call));
      // One answer, shared by reference: N copies of N tasks made a 16,384-task agreement cost seconds.
      auto shared = std::make_shared<const absl::StatusOr<LiveTasks>>(std::move(result));
      for (auto& [id, w] : ls.waiting) {
        auto f = std::move(w.done);
        lock.defer([f = std::move(f), shared] { f(*shared); });
      }
      it = live_sets_.erase(it);
    } else if (ls.waiting.empty()) {
      it = live_sets_.erase(it);
    } else {
      ++it;
    }
  }
}

// Ends the live-set calls past their deadline, naming the live tasks that did not call.
void CoordinationService::expire_live_sets_locked(absl::Time now, ServiceLock& lock) {
  for (auto it = live_sets_.begin(); it != live_sets_.end();) {
    LiveSet& ls = it->second;
    for (auto w = ls.waiting.begin(); w != ls.waiting.end();) {
      if (w->second.deadline > now) {
        ++w;
        continue;
      }
      std::vector<TaskId> missing;
      const std::string& name = it->first.first;
      const std::vector<TaskId>& set = *it->first.second;
      for (TaskId id : set) {
        if (tasks_[id].state == TaskState::kConnected && !ls.waiting.count(id)) missing.push_back(id);
      }
      const std::vector<TaskId> awaited = awaited_after_restart_locked();
      absl::Status st = absl::DeadlineExceededError(absl::StrCat(
          "[get_live_tasks] task ", w->first, " timed out waiting for the live tasks {", join_ids(missing), "} of {",
          join_ids(set), "} to call get_live_tasks", name.empty() ? "" : absl::StrCat(" ('", name, "')"),
          awaited.empty() ? ""
                          : absl::StrCat(" and for tasks {", join_ids(awaited),
                                         "} to come back after the coordinator restarted")));
      auto f = std::move(w->second.done);
      lock.defer([f = std::move(f), st] { f(st); });
      w = ls.waiting.erase(w);
    }
    if (ls.waiting.empty()) {
      it = live_sets_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace mcx::distributed
