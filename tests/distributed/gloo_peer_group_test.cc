// The Gloo peer group in one process: N "processes" are threads, each with its own coordination agent (in-process
// transport to one service) and its own GlooPeerGroup over real TCP on loopback, rendezvous through the KV
// store. So the data plane's transport, the ring collectives on it, deadlines and aborts run under the
// sanitizers (the multi-process tests cover real processes and kill -9).
#include "mcx/distributed/data_plane/gloo/gloo_peer_group.h"

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/core/error.h"
#include "mcx/collectives/live_set.h"
#include "mcx/collectives/peer_collectives.h"
#include "mcx/distributed/coordination/agent.h"
#include "mcx/distributed/coordination/agent_key_value.h"
#include "mcx/distributed/coordination/client.h"
#include "mcx/distributed/coordination/service.h"
#include "tests/distributed/on_each.h"

namespace mcx::distributed {
namespace {

using ::testing::HasSubstr;

class GlooPeerGroupTest : public ::testing::Test {
 protected:
  // Starts n agents and connects one group over all of them (each on its own thread, as processes would).
  void start(int n, const std::string& key = "test group") {
    ServiceOptions o;
    o.num_tasks = n;
    o.heartbeat_timeout = absl::Seconds(5);
    service_ = *CoordinationService::create(o);
    for (int i = 0; i < n; ++i) {
      AgentOptions ao;
      ao.task_id = i;
      ao.num_tasks = n;
      ao.init_timeout = absl::Seconds(10);
      ao.heartbeat_interval = absl::Milliseconds(200);
      ao.heartbeat_timeout = absl::Seconds(5);
      ao.on_failure = [](const TaskFailure&) {};
      agents_.push_back(std::make_unique<CoordinationAgent>(std::make_unique<InProcessClient>(service_.get()), ao));
    }
    ASSERT_TRUE(init_gloo_device("127.0.0.1").ok());
    groups_.resize(n);
    on_each(n, [&](int i) {
      ASSERT_TRUE(agents_[i]->connect().ok());
      std::vector<int> all;
      for (int p = 0; p < n; ++p) all.push_back(p);
      AgentKeyValue kv(agents_[i].get(), i, n);
      auto g = connect_gloo_peer_group(PeerGroupRequest{all, key, 0, absl::Now() + absl::Seconds(20)}, i, kv);
      ASSERT_TRUE(g.ok()) << g.status();
      groups_[i] = std::move(*g);
    });
  }
  void TearDown() override {
    groups_.clear();
    agents_.clear();
    service_.reset();
  }
  std::unique_ptr<CoordinationService> service_;
  std::vector<std::unique_ptr<CoordinationAgent>> agents_;
  std::vector<std::unique_ptr<PeerGroup>> groups_;
};

TEST_F(GlooPeerGroupTest, RingAllReduceAndAllGatherOverTcp) {
  const int n = 3;
  start(n);
  // Each rank's rendezvous entry lives under its own process's prefix (only that task may write it).
  for (int p = 0; p < n; ++p) {
    EXPECT_TRUE(service_->kv_try_get(absl::StrCat("mcx/task/", p, "/data_plane/test_group/0.0/", p)).ok()) << p;
  }
  const int64_t count = 100003;  // uneven chunks
  on_each(n, [&](int i) {
    std::vector<float> x(count);
    for (int64_t k = 0; k < count; ++k) x[k] = static_cast<float>(i + 1) * 0.5f + static_cast<float>(k % 7);
    ASSERT_TRUE(peer_all_reduce(*groups_[i], x.data(), count, DType::kFloat32, ReduceOp::kSum, 0,
                                absl::Now() + absl::Seconds(20))
                    .ok());
    for (int64_t k = 0; k < count; k += 997) ASSERT_EQ(x[k], 3.0f + 3.0f * static_cast<float>(k % 7)) << k;
    std::vector<int64_t> sizes = {3, 0, 5};  // a process may contribute nothing
    std::vector<char> mine(static_cast<size_t>(sizes[i]), static_cast<char>('a' + i)), all(8);
    ASSERT_TRUE(peer_all_gatherv(*groups_[i], mine.data(), sizes, all.data(), kPeerTagSpan,
                                 absl::Now() + absl::Seconds(20))
                    .ok());
    EXPECT_EQ(std::string(all.begin(), all.end()), "aaaccccc");
  });
}

// The piggyback's header receive relies on it (peer_group.h): a message shorter than its receive completes it.
TEST_F(GlooPeerGroupTest, ShorterMessageCompletesTheReceive) {
  start(2);
  on_each(2, [&](int i) {
    std::vector<char> out(10, static_cast<char>('a' + i)), in(64, '.');
    std::vector<PeerGroup::Send> sends = {{1 - i, 3, out.data(), 10}};
    std::vector<PeerGroup::Recv> recvs = {{1 - i, 3, in.data(), 64}};
    ASSERT_TRUE(groups_[i]->exchange(sends, recvs, absl::Now() + absl::Seconds(10)).ok());
    EXPECT_EQ(std::string(in.begin(), in.begin() + 12), std::string(10, static_cast<char>('b' - i)) + "..");
  });
}

TEST_F(GlooPeerGroupTest, MissingPeerIsADeadlineNamingItsProcess) {
  start(2);
  char x = 1, y = 0;
  std::vector<PeerGroup::Send> sends = {{1, 7, &x, 1}};
  std::vector<PeerGroup::Recv> recvs = {{1, 7, &y, 1}};
  absl::Status st = groups_[0]->exchange(sends, recvs, absl::Now() + absl::Milliseconds(300));
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("process 1"));
  // Poisoned: later exchanges fail at once.
  EXPECT_EQ(groups_[0]->exchange(sends, recvs, absl::Now() + absl::Seconds(5)).code(), absl::StatusCode::kAborted);
}

// The rendezvous (Gloo's store over the KV store) stops waiting for a process reported dead, instead of
// waiting out its 60 s deadline for its address.
TEST_F(GlooPeerGroupTest, APeerReportedDeadEndsTheRendezvousAtOnce) {
  start(2);
  groups_.clear();
  std::thread report([] {
    absl::SleepFor(absl::Milliseconds(300));
    record_process_failure(1, 4242, mark_process_failure(absl::UnavailableError("process 1 was killed"), 1));
  });
  const absl::Time began = absl::Now();
  AgentKeyValue kv(agents_[0].get(), 0, 2);
  auto g = connect_gloo_peer_group(PeerGroupRequest{{0, 1}, "dead peer", 0, absl::Now() + absl::Seconds(60)}, 0, kv);
  report.join();
  record_process_alive(1, 4343);  // forget the failure (another incarnation) for the other tests
  EXPECT_LT(absl::Now() - began, absl::Seconds(5));
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("process 1 was killed"));
}

TEST_F(GlooPeerGroupTest, AbortEndsABlockedExchangePromptly) {
  start(2);
  absl::Status st;
  std::thread t([&] {
    char y = 0;
    std::vector<PeerGroup::Recv> recvs = {{1, 9, &y, 1}};
    st = groups_[0]->exchange({}, recvs, absl::Now() + absl::Seconds(30));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const absl::Time t0 = absl::Now();
  groups_[0]->abort(absl::UnavailableError("process 1 was reported dead"));
  t.join();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
  EXPECT_THAT(std::string(st.message()), HasSubstr("reported dead"));
}

TEST_F(GlooPeerGroupTest, ClosedPeerFailsTheOtherFast) {
  start(2);
  groups_[1].reset();  // the peer's connections close (as when its process dies)
  char y = 0;
  std::vector<PeerGroup::Recv> recvs = {{1, 3, &y, 1}};
  const absl::Time t0 = absl::Now();
  absl::Status st = groups_[0]->exchange({}, recvs, absl::Now() + absl::Seconds(20));
  EXPECT_FALSE(st.ok());
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("process 1"));
}

}  // namespace
}  // namespace mcx::distributed
