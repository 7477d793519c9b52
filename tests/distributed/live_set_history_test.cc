// A deterministic fault-injection test of the live-set agreement (CoordinationService::get_live_tasks, under
// mcx::live_devices): seeded random histories of calls, failures and restarts against the in-process service,
// and a checker over the recorded history, in the spirit of a linearizability checker. For every agreement it
// checks JAX's formal semantics plus generations:
//  1. every caller answered by one agreement got the same tasks, incarnations and generation;
//  2. at the instant it completed, every returned task had a pending call with the returned incarnation, and
//     every task left out was not live (failed, or not yet re-registered);
//  3. generations: the first agreement has 1; each later one keeps the previous generation when it agreed on
//     the same tasks and incarnations, else has the next number;
//  5. every member's payload (its incarnation, as text) reaches every caller, in task order.
//  4. a pending call of a live task is never dropped: it is answered by an agreement, or aborted because its
//     task died or restarted.
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mcx/distributed/coordination/service.h"

namespace mcx::distributed {
namespace {

struct Pending {
  Incarnation incarnation;
  bool answered = false;
};

struct Answer {
  int op;  // the step of the history that produced it: one agreement at most per step (one requested set)
  TaskId task;
  Incarnation incarnation;
  absl::StatusOr<LiveTasks> result;
  std::set<TaskId> live_at_answer;              // the model's live tasks when the answer came
  std::map<TaskId, Incarnation> pending_at_answer;  // the pending calls then (before any was answered)
};

class LiveSetHistory : public ::testing::TestWithParam<int> {};

TEST_P(LiveSetHistory, EveryAgreementSatisfiesTheLiveSetSemantics) {
  const int n = 4;
  std::mt19937 rng(GetParam());
  // Declared before the service: its destructor answers the calls still pending.
  std::map<TaskId, Pending> pending;  // calls not yet answered
  std::vector<Answer> answers;
  bool stopping = false;  // answers given by the service's shutdown are not part of the history
  ManualClock clock;
  ServiceOptions o;
  o.num_tasks = n;
  o.clock = &clock;
  o.start_timer_thread = false;
  o.recoverable = true;
  auto made = CoordinationService::create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  CoordinationService& s = **made;

  std::map<TaskId, Incarnation> live;  // the model: task -> incarnation of its live instance
  Incarnation next_incarnation = 100;
  // All four register (the last registration completes every one).
  std::vector<bool> reg_ok(n, false);
  for (TaskId t = 0; t < n; ++t) {
    const Incarnation inc = next_incarnation++;
    s.register_task(t, inc, n, absl::Seconds(5), [&reg_ok, t](absl::StatusOr<RegisterResult> r) { reg_ok[t] = r.ok(); });
    live[t] = inc;
  }
  for (TaskId t = 0; t < n; ++t) ASSERT_TRUE(reg_ok[t]) << "task " << t << " did not register";

  int op = 0;
  auto call = [&](TaskId t) {
    const Incarnation inc = live.at(t);
    pending[t] = Pending{inc};
    s.get_live_tasks(t, inc, LiveSetRequest{{}, "", std::to_string(inc)}, absl::Seconds(30),
                     [&, t, inc](absl::StatusOr<LiveTasks> r) {
      if (stopping) return;
      std::set<TaskId> alive;
      for (auto& [id, i] : live) alive.insert(id);
      std::map<TaskId, Incarnation> waiting;
      for (auto& [id, p] : pending) {
        if (!p.answered) waiting[id] = p.incarnation;
      }
      answers.push_back(Answer{op, t, inc, std::move(r), alive, waiting});
      pending[t].answered = true;
    });
  };

  for (op = 0; op < 300; ++op) {
    const int kind = static_cast<int>(rng() % 10);
    const TaskId t = static_cast<TaskId>(rng() % n);
    if (kind < 6) {  // a live task without a pending call calls
      if (live.count(t) && (!pending.count(t) || pending[t].answered)) call(t);
    } else if (kind < 8) {  // a live task dies (keep at least one alive)
      if (live.count(t) && live.size() > 1) {
        live.erase(t);
        s.fail_task(t, absl::UnavailableError("killed by the test"));
      }
    } else {  // a dead task restarts with a new incarnation
      if (!live.count(t)) {
        const Incarnation inc = next_incarnation++;
        bool ok = false;
        s.register_task(t, inc, n, absl::Seconds(5), [&ok](absl::StatusOr<RegisterResult> r) { ok = r.ok(); });
        ASSERT_TRUE(ok) << "restart of task " << t;
        live[t] = inc;
        pending.erase(t);  // a call of its old incarnation is answered (aborted) or dropped with it
      }
    }
    // Drop answered calls from the pending table once recorded.
    for (auto it = pending.begin(); it != pending.end();) it = it->second.answered ? pending.erase(it) : std::next(it);
  }

  stopping = true;
  made->reset();

  // The checker.
  std::map<int, LiveTasks> by_agreement;  // by the op that completed it
  const LiveTasks* previous = nullptr;
  int agreements = 0;
  for (const Answer& a : answers) {
    if (!a.result.ok()) {
      // Only a caller that died or restarted may be turned away (4).
      EXPECT_EQ(a.result.status().code(), absl::StatusCode::kAborted) << a.result.status();
      EXPECT_TRUE(!a.live_at_answer.count(a.task) || a.pending_at_answer.count(a.task) == 0 ||
                  a.pending_at_answer.at(a.task) != a.incarnation)
          << "task " << a.task << " was live and waiting but its call failed: " << a.result.status();
      continue;
    }
    const LiveTasks& r = *a.result;
    auto [it, first] = by_agreement.emplace(a.op, r);
    if (first) {
      ++agreements;
      if (previous == nullptr) {
        EXPECT_EQ(r.generation, 1u) << "the first live set is generation 1 (3)";
      } else if (previous->tasks == r.tasks && previous->incarnations == r.incarnations) {
        EXPECT_EQ(r.generation, previous->generation) << "the same live set keeps its generation (3)";
      } else {
        EXPECT_EQ(r.generation, previous->generation + 1) << "a different live set has the next generation (3)";
      }
      previous = &it->second;
      ASSERT_EQ(r.payloads.size(), r.tasks.size());
      for (size_t i = 0; i < r.tasks.size(); ++i) {
        EXPECT_EQ(r.payloads[i], std::to_string(r.incarnations[i])) << "task " << r.tasks[i] << "'s payload (5)";
      }
      // (2) at completion: members were waiting with those incarnations; non-members were not live.
      std::set<TaskId> members(r.tasks.begin(), r.tasks.end());
      for (size_t i = 0; i < r.tasks.size(); ++i) {
        ASSERT_TRUE(a.pending_at_answer.count(r.tasks[i])) << "member " << r.tasks[i] << " was not in the call";
        EXPECT_EQ(a.pending_at_answer.at(r.tasks[i]), r.incarnations[i]);
      }
      for (TaskId id = 0; id < n; ++id) {
        if (!members.count(id)) {
          EXPECT_FALSE(a.live_at_answer.count(id)) << "task " << id << " was live but left out";
        }
      }
    } else {
      EXPECT_EQ(it->second, r) << "callers of one agreement got different answers (1)";
    }
    EXPECT_TRUE(std::find(r.tasks.begin(), r.tasks.end(), a.task) != r.tasks.end())
        << "a caller must be in the set it is given";
  }
  EXPECT_GT(agreements, 10) << "the history exercised too few agreements";
}

INSTANTIATE_TEST_SUITE_P(Seeds, LiveSetHistory, ::testing::Range(1, 9));

}  // namespace
}  // namespace mcx::distributed
