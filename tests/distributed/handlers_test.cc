// The wire answers the handlers build (shared by the gRPC and fast-path transports): a live-set agreement answers a
// caller that holds the previous one with the difference only, and with the whole list otherwise.
#include "mcx/distributed/rpc/handlers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "tests/distributed/callback_result.h"

namespace mcx::distributed {
namespace {

using ::testing::ElementsAre;

// Every task of `tasks` calls (with `known` and `payload`); the answers, in call order (the agreement completes
// at the last call, which runs every reply).
std::vector<proto::LiveTasksResponse> agree(CoordinationService& s, const std::vector<TaskId>& tasks, uint64_t known,
                                            const std::string& payload = "") {
  std::vector<proto::LiveTasksResponse> answers(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    proto::LiveTasksRequest req;
    req.set_task(tasks[i]);
    req.set_incarnation(100 + static_cast<uint64_t>(tasks[i]));
    req.set_timeout_ms(5000);
    req.set_known_generation(known);
    req.set_payload(payload);
    serve_live_tasks(s, req, [&answers, i](proto::LiveTasksResponse r) { answers[i] = std::move(r); });
  }
  return answers;
}

TEST(Handlers, ALiveSetAnswerIsTheDifferenceForACallerHoldingThePreviousOne) {
  ServiceOptions o;
  o.num_tasks = 4;
  o.recoverable = true;
  auto s = *CoordinationService::create(o);
  std::vector<Result<absl::StatusOr<RegisterResult>>> registered(4);
  for (int i = 0; i < 4; ++i) s->register_task(i, 100 + i, 4, absl::Seconds(5), registered[i].cb());
  for (auto& r : registered) ASSERT_TRUE(r.get().ok());

  std::vector<proto::LiveTasksResponse> first = agree(*s, {0, 1, 2, 3}, 0);
  for (const auto& a : first) {
    EXPECT_EQ(a.status().code(), 0);
    EXPECT_EQ(a.base_generation(), 0u);  // nothing held: the whole list
    EXPECT_EQ(a.tasks_size(), 4);
  }
  const uint64_t g1 = first[0].generation();
  s->fail_task(3, absl::UnavailableError("killed"));
  std::vector<proto::LiveTasksResponse> second = agree(*s, {0, 1, 2}, g1);
  for (const auto& a : second) {
    EXPECT_EQ(a.base_generation(), g1);
    EXPECT_THAT(a.removed(), ElementsAre(3));
    EXPECT_EQ(a.added_size(), 0);
    EXPECT_EQ(a.tasks_size(), 0);  // no list
    EXPECT_GT(a.generation(), g1);
  }
  const uint64_t g2 = second[0].generation();
  // A caller that holds something else, or an agreement with payloads, gets the whole answer.
  for (const auto& a : agree(*s, {0, 1, 2}, g1)) {
    EXPECT_EQ(a.base_generation(), 0u);
    EXPECT_EQ(a.tasks_size(), 3);
    EXPECT_EQ(a.generation(), g2);  // the same members: the same generation
  }
  for (const auto& a : agree(*s, {0, 1, 2}, g2, "payload")) {
    EXPECT_EQ(a.base_generation(), 0u);
    EXPECT_EQ(a.payload_sizes_size(), 3);
  }
  // Unchanged members: an empty difference.
  for (const auto& a : agree(*s, {0, 1, 2}, g2)) {
    EXPECT_EQ(a.base_generation(), g2);
    EXPECT_EQ(a.removed_size() + a.added_size() + a.tasks_size(), 0);
  }
}

}  // namespace
}  // namespace mcx::distributed
