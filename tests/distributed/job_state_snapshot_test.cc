// JobStateSnapshot's history (which tasks changed since an older version) and the watch stream's messages built
// from it: deltas applied by a receiver rebuild exactly the state the service published, checked against the
// whole states over random histories; a receiver that missed a message is told (DataLoss), never left wrong.
#include "mcx/distributed/coordination/job_state_snapshot.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "mcx/distributed/rpc/proto_convert.h"

namespace mcx::distributed {
namespace {

using ::testing::ElementsAre;
using ::testing::Optional;

JobState state_of(uint64_t version, int n) {
  JobState s;
  s.version = version;
  s.service_incarnation = 77;
  for (int i = 0; i < n; ++i) s.tasks.push_back(TaskInfo{i, 100u + static_cast<uint64_t>(i), TaskState::kConnected, {}});
  return s;
}

// The next version of `previous`'s state with tasks `failed` failed.
std::shared_ptr<const JobStateSnapshot> next(const std::shared_ptr<const JobStateSnapshot>& previous,
                                             const std::vector<TaskId>& failed, uint64_t skip = 1) {
  JobState s = previous->state();
  s.version += skip;
  for (TaskId id : failed) {
    s.tasks[static_cast<size_t>(id)].state = TaskState::kError;
    s.tasks[static_cast<size_t>(id)].error = absl::UnavailableError("killed");
  }
  return std::make_shared<const JobStateSnapshot>(*previous, std::move(s));
}

TEST(JobStateSnapshot, ChangedSinceNamesEachChangedTaskOnce) {
  auto v1 = std::make_shared<const JobStateSnapshot>(state_of(1, 8));
  auto v2 = next(v1, {5});
  auto v3 = next(v2, {2, 5});  // 5 does not change again
  auto v5 = next(v3, {7}, /*skip=*/2);  // versions nobody built in between
  EXPECT_EQ(v1->changed_since(0), std::nullopt);  // nothing held: the whole state
  EXPECT_THAT(v1->changed_since(1), Optional(ElementsAre()));
  EXPECT_EQ(v1->changed_since(2), std::nullopt);  // newer than the snapshot
  EXPECT_THAT(v3->changed_since(2), Optional(ElementsAre(2)));
  EXPECT_THAT(v3->changed_since(1), Optional(ElementsAre(2, 5)));
  EXPECT_THAT(v5->changed_since(3), Optional(ElementsAre(7)));
  EXPECT_THAT(v5->changed_since(1), Optional(ElementsAre(2, 5, 7)));
  EXPECT_THAT(v5->changed_since(5), Optional(ElementsAre()));
}

TEST(JobStateSnapshot, HistoryStopsWhereTheWholeStateIsNoLarger) {
  // A job of 4 tasks: once the chain would hold more than 4 task ids it starts again, and a receiver further
  // behind gets the whole state.
  std::vector<std::shared_ptr<const JobStateSnapshot>> v{std::make_shared<const JobStateSnapshot>(state_of(1, 4))};
  for (TaskId id : {0, 1, 2, 3, 0}) {
    JobState s = v.back()->state();
    ++s.version;
    s.tasks[static_cast<size_t>(id)].incarnation += 1000;  // a restart: a change whatever the task's state
    v.push_back(std::make_shared<const JobStateSnapshot>(*v.back(), std::move(s)));
  }
  const auto& newest = v.back();  // version 6
  EXPECT_THAT(newest->changed_since(5), Optional(ElementsAre(0)));
  EXPECT_EQ(newest->changed_since(1), std::nullopt);
  EXPECT_THAT(v[4]->changed_since(1), Optional(ElementsAre(0, 1, 2, 3)));  // 4 ids: still within the bound
}

TEST(JobStateSnapshot, DeltasAppliedByAReceiverRebuildEveryPublishedState) {
  // Random histories: receivers at random older versions apply the message built for them and must hold exactly
  // the newest whole state.
  std::mt19937 rng(7);
  const int n = 40;
  std::vector<std::shared_ptr<const JobStateSnapshot>> published{
      std::make_shared<const JobStateSnapshot>(state_of(1, n))};
  int deltas = 0;
  for (int step = 0; step < 300; ++step) {
    JobState s = published.back()->state();
    s.version += 1 + rng() % 3;
    const int changes = static_cast<int>(rng() % 4);
    for (int c = 0; c < changes; ++c) {
      TaskInfo& t = s.tasks[rng() % n];
      t.state = static_cast<TaskState>(rng() % 4);
      t.incarnation = rng() | 1;
      t.error = t.state == TaskState::kError ? absl::UnavailableError(std::to_string(rng())) : absl::OkStatus();
    }
    if (rng() % 50 == 0) s.job_error = absl::AbortedError("the job failed");
    published.push_back(std::make_shared<const JobStateSnapshot>(*published.back(), std::move(s)));
    const auto& newest = published.back();
    // Most receivers are a few versions behind (as watchers are); some anywhere.
    const size_t back = rng() % 5 == 0 ? rng() % published.size() : rng() % std::min<size_t>(5, published.size());
    const size_t held_at = published.size() - 1 - back;
    JobState held = published[held_at]->state();
    proto::JobStateProto msg;
    to_proto(*newest, held.version, &msg);
    deltas += msg.base_version() != 0;
    ASSERT_TRUE(apply_proto(msg, &held).ok());
    ASSERT_EQ(held.version, newest->version());
    ASSERT_EQ(held.tasks, newest->state().tasks) << "receiver at version " << published[held_at]->version();
    ASSERT_EQ(held.job_error, newest->state().job_error);
    if (msg.base_version() != 0) {
      ASSERT_LE(static_cast<size_t>(msg.tasks_size()), newest->changed_since(msg.base_version())->size());
    }
  }
  EXPECT_GT(deltas, 200);  // the history reaches back far enough for nearly every receiver a few versions behind
}

TEST(JobStateSnapshot, AReceiverThatMissedAMessageIsToldAndKeepsItsState) {
  auto v1 = std::make_shared<const JobStateSnapshot>(state_of(1, 4));
  auto v2 = next(v1, {1});
  auto v3 = next(v2, {2});
  proto::JobStateProto delta;
  to_proto(*v3, 2, &delta);
  EXPECT_EQ(delta.base_version(), 2u);
  EXPECT_EQ(delta.tasks_size(), 1);
  JobState held = v1->state();  // missed version 2
  absl::Status s = apply_proto(delta, &held);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("from version 2"));
  EXPECT_EQ(held.version, 1u);
  EXPECT_EQ(held.tasks, v1->state().tasks);
  // A delta naming a task outside the job, and whole states that do not add up, are refused too.
  proto::JobStateProto bad = delta;
  bad.mutable_tasks(0)->set_id(9);
  held = v2->state();
  EXPECT_EQ(apply_proto(bad, &held).code(), absl::StatusCode::kDataLoss);
  proto::JobStateProto whole;
  to_proto(*v3, 0, &whole);
  EXPECT_EQ(whole.base_version(), 0u);
  EXPECT_EQ(whole.states().size(), 4u);  // compact: a byte and an incarnation per task,
  EXPECT_EQ(whole.tasks_size(), 2);      // and the tasks with an error in full
  proto::JobStateProto short_whole = whole;
  short_whole.mutable_incarnations()->RemoveLast();
  EXPECT_EQ(apply_proto(short_whole, &held).code(), absl::StatusCode::kDataLoss);
  proto::JobStateProto outside = whole;
  outside.mutable_tasks(1)->set_id(4);
  EXPECT_EQ(apply_proto(outside, &held).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(held.version, 2u);
  ASSERT_TRUE(apply_proto(whole, &held).ok());
  EXPECT_EQ(held.tasks, v3->state().tasks);
}

}  // namespace
}  // namespace mcx::distributed
