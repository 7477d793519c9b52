// SpanningGroup and the peer collectives, in one process: "processes" are sets of threads, each with its own
// SpanningGroup over an in-memory PeerGroup (a mailbox per (source, destination, tag)), so the hierarchical
// algorithms, the launch check, deadlines and aborts run under the sanitizers without sockets. Every result is
// compared with the single-process LocalGroup over the same number of devices: bitwise in deterministic mode,
// within rounding otherwise, and always bitwise identical across members.
// The real transport (Gloo over TCP between processes) is tested in tests/distributed/multiprocess.
#include "mcx/collectives/spanning_group.h"

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/core/error.h"
#include "mcx/collectives/local_communicator.h"
#include "mcx/collectives/peer_collectives.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;

// Mailboxes shared by the in-memory peer groups of one test.
struct Hub {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::tuple<int, int, uint64_t>, std::vector<std::vector<char>>> boxes;  // (src, dst, tag)
};

class MemoryPeerGroup final : public PeerGroup {
 public:
  MemoryPeerGroup(std::shared_ptr<Hub> hub, int size, int rank) : hub_(std::move(hub)), size_(size), rank_(rank) {}
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  std::string description() const override { return "memory group"; }
  bool failed() const override {
    std::lock_guard<std::mutex> lk(hub_->mu);
    return !poison_.ok();
  }
  absl::Status failure() const override {
    std::lock_guard<std::mutex> lk(hub_->mu);
    return poison_;
  }

  absl::Status exchange(std::span<const Send> sends, std::span<const Recv> recvs, absl::Time deadline,
                        const OnRecv& on_recv) override {
    std::unique_lock<std::mutex> lk(hub_->mu);
    if (!poison_.ok()) return poison_;
    for (const Send& s : sends) {
      if (s.bytes <= 0) continue;
      const char* p = static_cast<const char*>(s.data);
      hub_->boxes[{rank_, s.peer, s.tag}].emplace_back(p, p + s.bytes);
    }
    hub_->cv.notify_all();
    for (size_t i = 0; i < recvs.size(); ++i) {
      const Recv& r = recvs[i];
      if (r.bytes <= 0) continue;
      auto key = std::make_tuple(r.peer, rank_, r.tag);
      while (hub_->boxes[key].empty()) {
        if (!poison_.ok()) return poison_;
        if (hub_->cv.wait_until(lk, absl::ToChronoTime(std::min(deadline, absl::Now() + absl::Seconds(1)))) ==
                std::cv_status::timeout &&
            absl::Now() >= deadline) {
          poison_ = absl::DeadlineExceededError(absl::StrCat("waiting for process ", r.peer));
          return poison_;
        }
      }
      std::vector<char> m = std::move(hub_->boxes[key].front());
      hub_->boxes[key].erase(hub_->boxes[key].begin());
      // As Gloo: a shorter message completes the receive; a longer one is an error (Gloo ends the process).
      if (static_cast<int64_t>(m.size()) > r.bytes) return absl::InternalError("message longer than its receive");
      std::memcpy(r.data, m.data(), m.size());
      if (on_recv) {
        lk.unlock();
        absl::Status st = on_recv(i);
        lk.lock();
        if (!st.ok()) {
          poison_ = st;
          return st;
        }
      }
    }
    return absl::OkStatus();
  }
  void abort(const absl::Status& why) override {
    std::lock_guard<std::mutex> lock(hub_->mu);
    if (poison_.ok()) poison_ = why;
    hub_->cv.notify_all();
  }

 private:
  std::shared_ptr<Hub> hub_;
  int size_, rank_;
  absl::Status poison_;  // guarded by hub_->mu
};

// A job of `processes` x `devices`: process p hosts group ranks assigned by `owner` (default: blocks).
struct Job {
  std::vector<std::unique_ptr<SpanningGroup>> groups;  // by process
  std::vector<PeerGroup*> peers;                       // by process, owned by groups[p]
  std::vector<int> owner;                              // group rank -> process

  Job(int processes, int devices, bool deterministic, std::vector<int> owner_of = {}) {
    const int g = processes * devices;
    owner = owner_of;
    if (owner.empty()) {
      for (int r = 0; r < g; ++r) owner.push_back(r / devices);
    }
    auto hub = std::make_shared<Hub>();
    for (int p = 0; p < processes; ++p) {
      std::vector<SpanningMember> members;
      for (int r = 0; r < g; ++r) members.push_back({owner[r], owner[r] == p, absl::StrCat("cpu:", r)});
      auto peer_group = std::make_unique<MemoryPeerGroup>(hub, processes, p);
      peers.push_back(peer_group.get());
      auto made = SpanningGroup::create(members, std::move(peer_group), SpanningGroupOptions{deterministic});
      EXPECT_TRUE(made.ok()) << made.status();
      groups.push_back(std::move(*made));
    }
  }
  Communicator& member(int rank) { return groups[owner[rank]]->member(rank); }
  int size() const { return static_cast<int>(owner.size()); }
};

// Runs fn(rank, comm) on one thread per member.
template <typename Comm, typename F>
void on_every_member(int g, Comm&& comm, F&& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < g; ++r) threads.emplace_back([&, r] { fn(r, comm(r)); });
  for (auto& t : threads) t.join();
}

float value(int rank, int64_t i) { return std::sin(1.0f + 0.37f * static_cast<float>(rank) + 0.11f * i) / 3.0f; }

absl::Time soon() { return absl::Now() + absl::Seconds(20); }

struct Layout {
  int processes, devices;
};

class SpanningGroupTest : public ::testing::TestWithParam<std::tuple<Layout, bool>> {};

TEST_P(SpanningGroupTest, AllReduceMatchesOneProcessAndIsIdenticalOnEveryMember) {
  const auto [l, det] = GetParam();
  Job job(l.processes, l.devices, det);
  const int g = job.size();
  const int64_t n = 1001;  // not a multiple of the process count: uneven ring chunks
  std::vector<std::vector<float>> in(g, std::vector<float>(n)), out(g, std::vector<float>(n)), ref(g, std::vector<float>(n));
  for (int r = 0; r < g; ++r)
    for (int64_t i = 0; i < n; ++i) in[r][i] = value(r, i);
  on_every_member(g, [&](int r) -> Communicator& { return job.member(r); }, [&](int r, Communicator& c) {
    EXPECT_TRUE(c.all_reduce(in[r].data(), out[r].data(), n, DType::kFloat32, ReduceOp::kSum, soon()).ok());
  });
  LocalGroup local(g);
  on_every_member(g, [&](int r) -> Communicator& { return local.member(r); }, [&](int r, Communicator& c) {
    EXPECT_TRUE(c.all_reduce(in[r].data(), ref[r].data(), n, DType::kFloat32, ReduceOp::kSum, soon()).ok());
  });
  for (int r = 0; r < g; ++r) {
    EXPECT_EQ(std::memcmp(out[r].data(), out[0].data(), n * sizeof(float)), 0) << "member " << r << " drifted";
    for (int64_t i = 0; i < n; ++i) {
      if (det) {
        ASSERT_EQ(out[r][i], ref[r][i]) << "deterministic mode differs from one process at " << i;
      } else {
        ASSERT_NEAR(out[r][i], ref[r][i], 1e-6) << "element " << i;
      }
    }
  }
}

TEST_P(SpanningGroupTest, DataMovementMatchesOneProcess) {
  const auto [l, det] = GetParam();
  // Interleaved ownership (rank r on process r % P) checks that blocks are placed by group rank.
  std::vector<int> owner;
  for (int r = 0; r < l.processes * l.devices; ++r) owner.push_back(r % l.processes);
  Job job(l.processes, l.devices, det, owner);
  const int g = job.size();
  const int64_t b = 12;  // bytes per block
  auto run = [&](auto&& comm, std::vector<std::vector<char>>& gathered, std::vector<std::vector<char>>& a2a,
                 std::vector<std::vector<char>>& perm, std::vector<std::vector<float>>& rs) {
    gathered.assign(g, std::vector<char>(g * b));
    a2a.assign(g, std::vector<char>(g * b));
    perm.assign(g, std::vector<char>(b, 0));
    rs.assign(g, std::vector<float>(3));
    on_every_member(g, comm, [&](int r, Communicator& c) {
      std::vector<char> mine(b), blocks(g * b);
      for (int64_t i = 0; i < b; ++i) mine[i] = static_cast<char>(r * 16 + i);
      for (int64_t i = 0; i < g * b; ++i) blocks[i] = static_cast<char>(r * 31 + i);
      std::vector<float> x(g * 3);
      for (int i = 0; i < g * 3; ++i) x[i] = value(r, i);
      // Each collective its own launch: the launch check rides on every pattern (ring, all-to-all, permute).
      uint64_t launch = 0;
      c.set_launch(LaunchTag{"jit(move)", 0x77, launch++});
      EXPECT_TRUE(c.all_gather(mine.data(), gathered[r].data(), b, soon()).ok());
      c.set_launch(LaunchTag{"jit(move)", 0x77, launch++});
      EXPECT_TRUE(c.all_to_all(blocks.data(), a2a[r].data(), b, soon()).ok());
      c.set_launch(LaunchTag{"jit(move)", 0x77, launch++});
      EXPECT_TRUE(c.permute(mine.data(), perm[r].data(), b, (r + 1) % g, (r + g - 1) % g, soon()).ok());
      c.set_launch(LaunchTag{"jit(move)", 0x77, launch++});
      EXPECT_TRUE(c.reduce_scatter(x.data(), rs[r].data(), 3, DType::kFloat32, ReduceOp::kMax, soon()).ok());
      c.set_launch(LaunchTag{"jit(move)", 0x77, launch++});
      EXPECT_TRUE(c.barrier(soon()).ok());
    });
  };
  std::vector<std::vector<char>> g1, a1, p1, g2, a2, p2;
  std::vector<std::vector<float>> r1, r2;
  run([&](int r) -> Communicator& { return job.member(r); }, g1, a1, p1, r1);
  LocalGroup local(g);
  run([&](int r) -> Communicator& { return local.member(r); }, g2, a2, p2, r2);
  EXPECT_EQ(g1, g2) << "all_gather";
  EXPECT_EQ(a1, a2) << "all_to_all";
  EXPECT_EQ(p1, p2) << "permute";
  EXPECT_EQ(r1, r2) << "reduce_scatter (max is exact in any order)";
}

INSTANTIATE_TEST_SUITE_P(Layouts, SpanningGroupTest,
                         ::testing::Combine(::testing::Values(Layout{1, 3}, Layout{2, 1}, Layout{2, 2}, Layout{3, 1},
                                                              Layout{3, 2}, Layout{4, 1}, Layout{4, 2}),
                                            ::testing::Bool()),
                         [](const auto& i) {
                           const Layout l = std::get<0>(i.param);
                           return absl::StrCat(l.processes, "x", l.devices, std::get<1>(i.param) ? "_det" : "");
                         });

TEST(SpanningGroup, DifferentComputationsFailAtOnceNamingBoth) {
  Job job(2, 1, false);
  std::vector<absl::Status> st(2);
  on_every_member(2, [&](int r) -> Communicator& { return job.member(r); }, [&](int r, Communicator& c) {
    c.set_launch(LaunchTag{r == 0 ? "jit(train)" : "jit(eval)", r == 0 ? 0x1111u : 0x2222u, 7});
    float x = 1, y = 0;
    st[r] = c.all_reduce(&x, &y, 1, DType::kFloat32, ReduceOp::kSum, soon());
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(st[r].ok());
  }
  bool named = false;
  for (const absl::Status& s : st) {
    named = named || (s.code() == absl::StatusCode::kFailedPrecondition &&
                      absl::StrContains(s.message(), "jit(train)") && absl::StrContains(s.message(), "jit(eval)") &&
                      absl::StrContains(s.message(), "#7"));
  }
  EXPECT_TRUE(named) << st[0] << " / " << st[1];
  EXPECT_TRUE(job.groups[0]->failed());
}

TEST(SpanningGroup, SameComputationInADifferentOrderFails) {
  Job job(2, 1, false);
  std::vector<absl::Status> st(2);
  on_every_member(2, [&](int r) -> Communicator& { return job.member(r); }, [&](int r, Communicator& c) {
    c.set_launch(LaunchTag{"jit(step)", 0xabcdu, r == 0 ? 3u : 4u});
    float x = 1, y = 0;
    st[r] = c.all_reduce(&x, &y, 1, DType::kFloat32, ReduceOp::kSum, soon());
  });
  EXPECT_FALSE(st[0].ok());
  EXPECT_FALSE(st[1].ok());
}

TEST(SpanningGroup, MatchingLaunchesRunAndAreCheckedOncePerLaunch) {
  Job job(3, 1, false);
  // One element, and more than the piggyback carries in its own message (the rest follows in a second one).
  for (int64_t n : {int64_t{1}, 3 * kPiggybackFoldBytes / 4 * 2 + 5}) {
    on_every_member(3, [&](int r) -> Communicator& { return job.member(r); }, [&](int r, Communicator& c) {
      for (uint64_t seq = 0; seq < 3; ++seq) {
        c.set_launch(LaunchTag{"jit(step)", 0xabcdu + static_cast<uint64_t>(n), seq});
        for (int k = 0; k < 2; ++k) {
          std::vector<float> x(n), y(n, 0.0f);
          for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(r + 1) * static_cast<float>(i % 7);
          ASSERT_TRUE(c.all_reduce(x.data(), y.data(), n, DType::kFloat32, ReduceOp::kSum, soon()).ok());
          for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], 6.0f * static_cast<float>(i % 7)) << "element " << i;
        }
      }
    });
  }
  EXPECT_FALSE(job.groups[0]->failed());
}

// Different computations whose collectives have different sizes: the check fails before any data of a
// different size is posted (the in-memory group, like Gloo, cannot take a message of an unexpected size).
TEST(SpanningGroup, DifferentComputationsOfDifferentSizesFailNamingBoth) {
  Job job(2, 1, false);
  std::vector<absl::Status> st(2);
  on_every_member(2, [&](int r) -> Communicator& { return job.member(r); }, [&](int r, Communicator& c) {
    c.set_launch(LaunchTag{r == 0 ? "jit(train)" : "jit(eval)", r == 0 ? 0x1111u : 0x2222u, 0});
    const int64_t n = r == 0 ? 100000 : 10;
    std::vector<float> x(n, 1.0f), y(n);
    st[r] = c.all_reduce(x.data(), y.data(), n, DType::kFloat32, ReduceOp::kSum, soon());
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].code(), absl::StatusCode::kFailedPrecondition) << st[r];
    EXPECT_THAT(std::string(st[r].message()), HasSubstr("jit(train)"));
    EXPECT_THAT(std::string(st[r].message()), HasSubstr("jit(eval)"));
  }
}

TEST(SpanningGroup, SameLaunchWithDifferentArgumentsFailsNamingBothCalls) {
  Job job(2, 1, false);
  std::vector<absl::Status> st(2);
  on_every_member(2, [&](int r) -> Communicator& { return job.member(r); }, [&](int r, Communicator& c) {
    c.set_launch(LaunchTag{"jit(step)", 0x3333u, 5});
    const int64_t n = r == 0 ? 3000 : 20000;
    std::vector<float> x(n, 1.0f), y(n);
    st[r] = c.all_reduce(x.data(), y.data(), n, DType::kFloat32, ReduceOp::kSum, soon());
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].code(), absl::StatusCode::kFailedPrecondition) << st[r];
    EXPECT_THAT(std::string(st[r].message()), HasSubstr("all_reduce(count=3000"));
    EXPECT_THAT(std::string(st[r].message()), HasSubstr("all_reduce(count=20000"));
  }
}

TEST(SpanningGroup, MissingLocalMemberIsADeadlineNamingIt) {
  Job job(1, 2, false);
  float x = 1, y = 0;
  absl::Status s =
      job.member(0).all_reduce(&x, &y, 1, DType::kFloat32, ReduceOp::kSum, absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("cpu:1"));
  // Poisoned: the late member gets the same deadline error, later calls are refused.
  absl::Status late = job.member(1).all_reduce(&x, &y, 1, DType::kFloat32, ReduceOp::kSum, soon());
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded) << late;
  EXPECT_TRUE(job.groups[0]->failed());
}

TEST(SpanningGroup, AbortEndsABlockedCollectivePromptly) {
  Job job(2, 1, false);
  absl::Status st;
  std::thread t([&] {
    float x = 1, y = 0;  // process 1 never joins
    st = job.member(0).all_reduce(&x, &y, 1, DType::kFloat32, ReduceOp::kSum, soon());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const absl::Time t0 = absl::Now();
  job.groups[0]->abort(mark_process_failure(absl::UnavailableError("process 1 died"), 1));
  t.join();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
  EXPECT_THAT(std::string(st.message()), HasSubstr("process 1 died"));
  EXPECT_EQ(failed_process(st), 1) << "the abort's process-failure mark reaches the collective";
  // Later collectives on the poisoned group are refused, still marked as process 1's failure.
  float x = 1, y = 0;
  absl::Status later = job.member(0).all_reduce(&x, &y, 1, DType::kFloat32, ReduceOp::kSum, soon());
  EXPECT_EQ(later.code(), absl::StatusCode::kAborted) << later;
  EXPECT_EQ(failed_process(later), 1) << later;
}

// The failure watcher aborts the group between processes while a local member waits for another local member
// that will never come (its task failed before reaching the collective): the waiting member fails at once with
// the abort's reason instead of waiting out its deadline (this hung a survivor of the main job for its 300 s
// device timeout).
TEST(SpanningGroup, AnAbortedPeerGroupReleasesLocalMembersWaitingForEachOther) {
  Job job(2, 2, false);
  absl::Status st;
  std::thread t([&] {
    float x = 1, y = 0;  // cpu:1 (the other local member of process 0) never arrives
    st = job.member(0).all_reduce(&x, &y, 1, DType::kFloat32, ReduceOp::kSum, soon());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const absl::Time t0 = absl::Now();
  job.peers[0]->abort(mark_process_failure(absl::UnavailableError("process 1 died"), 1));
  t.join();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
  EXPECT_THAT(std::string(st.message()), HasSubstr("process 1 died"));
  EXPECT_EQ(failed_process(st), 1) << st;
  EXPECT_TRUE(job.groups[0]->failed());
}

TEST(SpanningGroup, ArgumentMismatchBetweenLocalMembersIsAnError) {
  Job job(1, 2, false);
  std::vector<absl::Status> st(2);
  on_every_member(2, [&](int r) -> Communicator& { return job.member(r); }, [&](int r, Communicator& c) {
    float x[2] = {1, 2}, y[2];
    st[r] = c.all_reduce(x, y, r == 0 ? 1 : 2, DType::kFloat32, ReduceOp::kSum, soon());
  });
  EXPECT_EQ(st[0].code(), absl::StatusCode::kInvalidArgument) << st[0];
  EXPECT_THAT(std::string(st[0].message()), HasSubstr("count=1"));
}

}  // namespace
}  // namespace mcx
