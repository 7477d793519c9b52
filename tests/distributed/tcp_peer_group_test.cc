// The data plane's own transport in one process: N "processes" are threads, each with its own coordination agent
// (in-process transport to one service) and its own TcpDataPlane (a real listener on loopback), plaintext and
// TLS 1.3 with real certificates. So the handshake, the exchange loop, deadlines, aborts and refusals of
// strangers run under the sanitizers; the multi-process tests cover real processes and kill -9.
#include "mcx/distributed/data_plane/tcp/tcp_data_plane.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

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
#include "tests/distributed/shared_memory_probe.h"
#include "mcx/distributed/data_plane/data_plane.h"
#include "mcx/distributed/data_plane/tcp/handshake.h"
#include "tests/distributed/test_agent_options.h"
#include "tests/distributed/test_certs.h"

namespace mcx::distributed {
namespace {

using ::testing::HasSubstr;

constexpr int kMaxTasks = 8;  // the largest group a test starts

// Made once per process and removed when it exits (each ctest entry is a process of its own).
Certs* certs() {
  static const std::unique_ptr<Certs> c = [] {
    auto made = std::make_unique<Certs>();
    made->make_ca("ca");
    made->make_ca("other_ca");
    for (int i = 0; i < kMaxTasks; ++i) made->make_leaf(absl::StrCat("task", i), "ca", absl::StrCat("spiffe://mcx.test/job/task/", i));
    made->make_leaf("stranger", "other_ca", "spiffe://mcx.test/job/task/1");
    return made;
  }();
  return c.get();
}

MtlsOptions task_mtls(const std::string& leaf, const std::string& ca = "ca.pem") {
  MtlsOptions o = certs()->opts(leaf, ca);
  o.peer_uri_prefix = "spiffe://mcx.test/";
  o.bind_task_identity = true;
  return o;
}

// n agents over the in-process transport, connected (registered) together.
std::vector<std::unique_ptr<CoordinationAgent>> connected_agents(CoordinationService* service, int n) {
  std::vector<std::unique_ptr<CoordinationAgent>> agents;
  for (int i = 0; i < n; ++i) {
    AgentOptions ao = test_agent_options(i, n, absl::Seconds(5));
    ao.on_failure = [](const TaskFailure&) {};
    agents.push_back(std::make_unique<CoordinationAgent>(std::make_unique<InProcessClient>(service), ao));
  }
  on_each(n, [&](int i) { EXPECT_TRUE(agents[i]->connect().ok()); });
  return agents;
}

// The transports a group's connections can take: TCP, TLS, and shared memory (the processes on one host).
enum class Link { kPlain, kTls, kSharedMemory };

class TcpPeerGroupTest : public ::testing::TestWithParam<Link> {
 protected:
  bool tls() const { return GetParam() == Link::kTls; }
  bool shared_memory() const { return GetParam() == Link::kSharedMemory; }

  // Starts n agents and their data planes (process i with leaf `leaf_of(i)`).
  void start_planes(int n, const std::function<std::string(int)>& leaf_of = nullptr) {
    ServiceOptions o;
    o.num_tasks = n;
    o.heartbeat_timeout = absl::Seconds(5);
    service_ = *CoordinationService::create(o);
    agents_ = connected_agents(service_.get(), n);
    planes_.resize(n);
    for (int i = 0; i < n; ++i) {
      TcpDataPlane::Options po;
      po.process = i;
      po.address = "127.0.0.1";
      po.kv = std::make_shared<AgentKeyValue>(agents_[i].get(), i, n);
      if (shared_memory()) po.host = "the test's host";
      if (tls()) {
        auto t = DataPlaneTls::create(task_mtls(leaf_of ? leaf_of(i) : absl::StrCat("task", i)));
        ASSERT_TRUE(t.ok()) << t.status();
        po.tls = *t;
      }
      auto p = TcpDataPlane::start(po);
      ASSERT_TRUE(p.ok()) << p.status();
      planes_[i] = *p;
    }
  }
  // Connects one group over all n processes; returns each process's status.
  std::vector<absl::Status> connect_all(int n, absl::Duration timeout = absl::Seconds(20)) {
    groups_.clear();
    groups_.resize(n);
    std::vector<absl::Status> out(n);
    std::vector<int> all;
    for (int p = 0; p < n; ++p) all.push_back(p);
    const absl::Time deadline = absl::Now() + timeout;
    on_each(n, [&](int i) {
      auto g = planes_[i]->connect(PeerGroupRequest{all, "test group", 0, deadline});
      out[i] = g.status();
      if (g.ok()) groups_[i] = std::move(*g);
    });
    return out;
  }
  void start(int n) {
    start_planes(n);
    for (const absl::Status& s : connect_all(n)) ASSERT_TRUE(s.ok()) << s;
  }
  void TearDown() override {
    groups_.clear();
    planes_.clear();
    agents_.clear();
    service_.reset();
  }
  std::unique_ptr<CoordinationService> service_;
  std::vector<std::unique_ptr<CoordinationAgent>> agents_;
  std::vector<std::shared_ptr<TcpDataPlane>> planes_;
  std::vector<std::unique_ptr<PeerGroup>> groups_;
};

INSTANTIATE_TEST_SUITE_P(Links, TcpPeerGroupTest, ::testing::Values(Link::kPlain, Link::kTls, Link::kSharedMemory),
                         [](const ::testing::TestParamInfo<Link>& i) {
                           return i.param == Link::kPlain ? "Plain" : i.param == Link::kTls ? "Tls" : "SharedMemory";
                         });

TEST_P(TcpPeerGroupTest, AllReduceAndAllGatherForEveryGroupSize) {
  for (int n : {1, 2, 3, 4}) {
    SCOPED_TRACE(n);
    TearDown();
    start(n);
    const int64_t count = 300007;  // uneven chunks, payloads above and below the coalescing size
    on_each(n, [&](int i) {
      std::vector<float> x(count);
      for (int64_t k = 0; k < count; ++k) x[k] = static_cast<float>(i + 1) * 0.5f + static_cast<float>(k % 7);
      ASSERT_TRUE(peer_all_reduce(*groups_[i], x.data(), count, DType::kFloat32, ReduceOp::kSum, 0,
                                  absl::Now() + absl::Seconds(20))
                      .ok());
      const float sum_of_ranks = 0.5f * static_cast<float>(n * (n + 1) / 2);
      for (int64_t k = 0; k < count; k += 997) {
        ASSERT_EQ(x[k], sum_of_ranks + static_cast<float>(n) * static_cast<float>(k % 7)) << k;
      }
      std::vector<int64_t> sizes(n);
      for (int p = 0; p < n; ++p) sizes[p] = p == 1 ? 0 : 3 + p;  // a process may contribute nothing
      std::vector<char> mine(static_cast<size_t>(sizes[i]), static_cast<char>('a' + i));
      std::string expected;
      for (int p = 0; p < n; ++p) expected += std::string(static_cast<size_t>(sizes[p]), static_cast<char>('a' + p));
      std::vector<char> all(expected.size(), '?');
      ASSERT_TRUE(peer_all_gatherv(*groups_[i], mine.data(), sizes, all.data(), kPeerTagSpan,
                                   absl::Now() + absl::Seconds(20))
                      .ok());
      EXPECT_EQ(std::string(all.begin(), all.end()), expected);
    });
  }
}

TEST_P(TcpPeerGroupTest, ProcessesOfOneHostShareMemoryAndLeaveNoNameBehind) {
  const int before = test::mapped_data_plane_segments();
  const int n = 4;
  start(n);
  // Every connection is mapped at both of its ends (here, one process plays all four).
  EXPECT_EQ(test::mapped_data_plane_segments() - before, shared_memory() ? n * (n - 1) : 0);
  EXPECT_EQ(test::named_data_plane_segments(), 0);
  // Larger than a ring (1 MiB), so the rings wrap and the writers wait for room.
  const int64_t count = (int64_t{3} << 20) / 4 + 5;
  on_each(n, [&](int i) {
    std::vector<float> x(static_cast<size_t>(count));
    for (int64_t k = 0; k < count; ++k) x[k] = static_cast<float>(i + 1) + static_cast<float>(k % 13);
    ASSERT_TRUE(peer_all_reduce(*groups_[i], x.data(), count, DType::kFloat32, ReduceOp::kSum, 0,
                                absl::Now() + absl::Seconds(20))
                    .ok());
    for (int64_t k = 0; k < count; k += 1009) ASSERT_EQ(x[k], 10.0f + 4.0f * static_cast<float>(k % 13)) << k;
  });
  TearDown();
  EXPECT_EQ(test::mapped_data_plane_segments(), before);
}

// A group that reports the hosts of its ranks (as make_peer_group's groups do from the topology).
class GroupOnHosts final : public PeerGroup {
 public:
  GroupOnHosts(PeerGroup& inner, std::vector<int> hosts) : inner_(inner), hosts_(std::move(hosts)) {}
  int size() const override { return inner_.size(); }
  int rank() const override { return inner_.rank(); }
  std::string description() const override { return inner_.description(); }
  absl::Status exchange(std::span<const Send> sends, std::span<const Recv> recvs, absl::Time deadline,
                        const OnRecv& on_recv) override {
    return inner_.exchange(sends, recvs, deadline, on_recv);
  }
  void abort(const absl::Status& why) override { inner_.abort(why); }
  std::span<const int> hosts() const override { return hosts_; }

 private:
  PeerGroup& inner_;
  const std::vector<int> hosts_;
};

// A group that counts the exchanges this rank makes (which algorithm ran).
class CountingGroup final : public PeerGroup {
 public:
  explicit CountingGroup(PeerGroup& inner) : inner_(inner) {}
  int size() const override { return inner_.size(); }
  int rank() const override { return inner_.rank(); }
  std::string description() const override { return inner_.description(); }
  absl::Status exchange(std::span<const Send> sends, std::span<const Recv> recvs, absl::Time deadline,
                        const OnRecv& on_recv) override {
    ++exchanges;
    receives += static_cast<int>(recvs.size());
    return inner_.exchange(sends, recvs, deadline, on_recv);
  }
  void abort(const absl::Status& why) override { inner_.abort(why); }
  int exchanges = 0;
  int receives = 0;

 private:
  PeerGroup& inner_;
};

TEST_P(TcpPeerGroupTest, SmallAllReducesTakeLog2PStepsAndAgreeBitwise) {
  for (int n : {2, 3, 5, 8}) {
    SCOPED_TRACE(n);
    TearDown();
    start(n);
    int log2_core = 0;
    while ((2 << log2_core) <= n) ++log2_core;
    const int extra = n - (1 << log2_core);
    const int64_t largest = kDoublingAllReduceMaxBytes / 4;
    std::vector<std::vector<float>> sums(n);
    std::vector<std::vector<float>> maxes(n);
    std::vector<std::string> heard(n);
    on_each(n, [&](int i) {
      uint64_t tag = 0;
      for (int64_t count : {int64_t{1}, int64_t{1000}, largest}) {
        CountingGroup g(*groups_[i]);
        std::vector<float> x(static_cast<size_t>(count));
        for (int64_t k = 0; k < count; ++k) x[k] = 1.0f / static_cast<float>(3 + i + k % 11) + static_cast<float>(i);
        ASSERT_TRUE(peer_all_reduce(g, x.data(), count, DType::kFloat32, ReduceOp::kSum, tag,
                                    absl::Now() + absl::Seconds(20))
                        .ok());
        tag += kPeerTagSpan;
        // log2 of the core's size, plus one fold-in or fold-out for the ranks outside it or paired with one.
        const bool folds = i < extra || i >= (1 << log2_core);
        EXPECT_EQ(g.exchanges, i >= (1 << log2_core) ? 2 : log2_core + (folds ? 2 : 0)) << "count " << count;
        for (int64_t k = 0; k < count; k += 97) {
          double want = 0;
          for (int p = 0; p < n; ++p) want += 1.0 / (3 + p + k % 11) + p;
          ASSERT_NEAR(x[k], want, 1e-5 * n * n) << k;
        }
        if (count == largest) sums[i] = std::move(x);
      }
      // The max of +0 and -0 (and of equal values) comes out with the same bits everywhere; the launch check's
      // piggyback still goes around the whole ring first.
      std::vector<float> y(64);
      for (size_t k = 0; k < y.size(); ++k) y[k] = ((i + static_cast<int>(k)) % 2 == 0) ? 0.0f : -0.0f;
      char out = static_cast<char>('a' + i), in = '?';
      Piggyback pb{&out, &in, 1, [&] {
                     heard[i] = std::string(1, in);
                     return absl::OkStatus();
                   }};
      ASSERT_TRUE(peer_all_reduce(*groups_[i], y.data(), 64, DType::kFloat32, ReduceOp::kMax, tag,
                                  absl::Now() + absl::Seconds(20), &pb)
                      .ok());
      maxes[i] = std::move(y);
    });
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(heard[i], std::string(1, static_cast<char>('a' + (i + n - 1) % n)));
      ASSERT_EQ(std::memcmp(sums[i].data(), sums[0].data(), sums[0].size() * sizeof(float)), 0) << "rank " << i;
      ASSERT_EQ(std::memcmp(maxes[i].data(), maxes[0].data(), maxes[0].size() * sizeof(float)), 0) << "rank " << i;
    }
  }
}

// A large all-reduce takes the ring's 2(P - 1) exchanges, each reduce-scatter step moving its chunk in pieces
// that are accumulated as they arrive (uneven pieces of uneven chunks here); every rank ends with the same bits,
// close to the double-precision sum, and with the launch check's piggyback the first step still carries it.
TEST_P(TcpPeerGroupTest, LargeAllReducesMoveTheirChunksInPiecesAndAgreeBitwise) {
  for (int n : {2, 3}) {
    SCOPED_TRACE(n);
    TearDown();
    start(n);
    const int64_t count = n * (5 * kReducePieceBytes / 8) + 13;  // chunks of about 2.5 pieces' bytes: 2 pieces
    std::vector<std::vector<float>> sums(n);
    std::vector<int> receives(n);
    on_each(n, [&](int i) {
      uint64_t tag = 0;
      for (bool with_piggyback : {false, true}) {
        CountingGroup g(*groups_[i]);
        std::vector<float> x(static_cast<size_t>(count));
        for (int64_t k = 0; k < count; ++k) x[k] = 1.0f / static_cast<float>(3 + i + k % 13) + static_cast<float>(i);
        char out = 'x', in = '?';
        Piggyback pb{&out, &in, 1, [] { return absl::OkStatus(); }};
        ASSERT_TRUE(peer_all_reduce(g, x.data(), count, DType::kFloat32, ReduceOp::kSum, tag,
                                    absl::Now() + absl::Seconds(30), with_piggyback ? &pb : nullptr)
                        .ok());
        tag += kPeerTagSpan;
        if (with_piggyback) {
          EXPECT_EQ(in, 'x');
        } else {
          EXPECT_EQ(g.exchanges, 2 * (n - 1));
        }
        for (int64_t k = 0; k < count; k += 1009) {
          double want = 0;
          for (int p = 0; p < n; ++p) want += 1.0 / (3 + p + k % 13) + p;
          ASSERT_NEAR(x[k], want, 1e-5 * n * n) << k;
        }
        if (!with_piggyback) {
          sums[i] = std::move(x);
          receives[i] = g.receives;
        }
      }
    });
    for (int i = 0; i < n; ++i) {
      // Each of the P - 1 reduce-scatter steps receives 2 pieces; the all-gather steps one message each.
      EXPECT_GE(receives[i], 2 * (n - 1) + (n - 1)) << "rank " << i;
      ASSERT_EQ(std::memcmp(sums[i].data(), sums[0].data(), sums[0].size() * sizeof(float)), 0) << "rank " << i;
    }
  }
}

// All-gathers of a power-of-two group take log2 P exchanges (recursive doubling), others P - 1 (the ring); the
// blocks, of different sizes (one empty), land in rank order either way, and the piggyback is still checked.
TEST_P(TcpPeerGroupTest, AllGathersTakeLog2PStepsOnPowersOfTwoAndPMinus1Otherwise) {
  for (int n : {2, 3, 4, 5, 8}) {
    SCOPED_TRACE(n);
    TearDown();
    start(n);
    const bool power_of_two = (n & (n - 1)) == 0;
    int log2 = 0;
    while ((1 << log2) < n) ++log2;
    std::vector<int64_t> sizes(n);
    for (int p = 0; p < n; ++p) sizes[p] = p == 2 ? 0 : 1000 * (p + 1) + 7;
    std::string expected;
    for (int p = 0; p < n; ++p) {
      for (int64_t k = 0; k < sizes[p]; ++k) expected.push_back(static_cast<char>('a' + (p * 7 + k) % 26));
    }
    std::vector<std::string> heard(n);  // every header's letter (the ring's, and the first step's partner's)
    on_each(n, [&](int i) {
      CountingGroup g(*groups_[i]);
      std::string mine;
      for (int64_t k = 0; k < sizes[i]; ++k) mine.push_back(static_cast<char>('a' + (i * 7 + k) % 26));
      std::string all(expected.size(), '?');
      char out = static_cast<char>('A' + i), in = '?';
      Piggyback pb{&out, &in, 1, [&] {
                     heard[i].push_back(in);
                     return absl::OkStatus();
                   }};
      ASSERT_TRUE(peer_all_gatherv(g, mine.data(), sizes, all.data(), 0, absl::Now() + absl::Seconds(20), &pb).ok());
      EXPECT_EQ(all, expected);
      // The piggyback's header round is one more exchange.
      EXPECT_EQ(g.exchanges, (power_of_two ? log2 : n - 1) + 1);
    });
    for (int i = 0; i < n; ++i) {
      EXPECT_THAT(heard[i], ::testing::HasSubstr(std::string(1, static_cast<char>('A' + (i + n - 1) % n))));
    }
  }
}

TEST_P(TcpPeerGroupTest, ABarrierTakesCeilLog2PRoundsAndWaitsForTheLastRank) {
  for (int n : {2, 3, 5, 8}) {
    SCOPED_TRACE(n);
    TearDown();
    start(n);
    int rounds = 0;
    while ((1 << rounds) < n) ++rounds;
    const int late = n / 2;  // arrives 100 ms after the others
    std::vector<absl::Time> left(n);
    absl::Time late_arrival;
    on_each(n, [&](int i) {
      CountingGroup g(*groups_[i]);
      if (i == late) {
        absl::SleepFor(absl::Milliseconds(100));
        late_arrival = absl::Now();
      }
      ASSERT_TRUE(peer_barrier(g, 0, absl::Now() + absl::Seconds(20)).ok());
      left[i] = absl::Now();
      EXPECT_EQ(g.exchanges, rounds);
    });
    for (int i = 0; i < n; ++i) EXPECT_GE(left[i], late_arrival) << "rank " << i << " left before rank " << late << " came";
  }
}

TEST_P(TcpPeerGroupTest, HierarchicalAllReduceOverHostsOfSeveralRanks) {
  // 7 ranks on 3 hosts, unevenly and not contiguously: {0, 1, 6} on host 0, {2, 3, 4} on host 1, {5} on host 2.
  const std::vector<int> hosts = {0, 0, 1, 1, 1, 2, 0};
  const int n = static_cast<int>(hosts.size());
  start(n);
  const int64_t count = 100003;
  std::vector<std::vector<float>> results(n);
  std::vector<std::string> heard(n);
  on_each(n, [&](int i) {
    GroupOnHosts g(*groups_[i], hosts);
    std::vector<float> x(count);
    for (int64_t k = 0; k < count; ++k) x[k] = static_cast<float>(i + 1) * 0.1f + static_cast<float>(k % 5);
    // The launch check's piggyback still travels the whole group's ring and is checked before any data is used.
    char out = static_cast<char>('a' + i), in = '?';
    Piggyback pb{&out, &in, 1, [&] {
                   heard[i] = std::string(1, in);
                   return in == static_cast<char>('a' + (i + n - 1) % n) ? absl::OkStatus()
                                                                         : absl::InternalError("wrong predecessor");
                 }};
    ASSERT_TRUE(peer_all_reduce(g, x.data(), count, DType::kFloat32, ReduceOp::kSum, 0,
                                absl::Now() + absl::Seconds(20), &pb)
                    .ok());
    results[i] = std::move(x);
    // An exact one (integers) against its closed form, with max.
    std::vector<int32_t> y(1001);
    for (size_t k = 0; k < y.size(); ++k) y[k] = static_cast<int32_t>((i * 31 + static_cast<int>(k)) % 97);
    ASSERT_TRUE(peer_all_reduce(g, y.data(), 1001, DType::kInt32, ReduceOp::kMax, kPeerTagSpan,
                                absl::Now() + absl::Seconds(20))
                    .ok());
    for (size_t k = 0; k < y.size(); ++k) {
      int32_t want = 0;
      for (int p = 0; p < n; ++p) want = std::max(want, static_cast<int32_t>((p * 31 + static_cast<int>(k)) % 97));
      ASSERT_EQ(y[k], want) << k;
    }
  });
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(heard[i], std::string(1, static_cast<char>('a' + (i + n - 1) % n)));
    // Bitwise identical on every member, and within rounding of the double-precision sum.
    ASSERT_EQ(std::memcmp(results[i].data(), results[0].data(), count * sizeof(float)), 0) << "rank " << i;
  }
  for (int64_t k = 0; k < count; k += 991) {
    double want = 0;
    for (int p = 0; p < n; ++p) want += (p + 1) * 0.1 + static_cast<double>(k % 5);
    EXPECT_NEAR(results[0][k], want, 1e-4) << k;
  }
}

TEST_P(TcpPeerGroupTest, ShorterMessageCompletesTheReceiveAndLongerIsAnError) {
  start(2);
  on_each(2, [&](int i) {
    std::vector<int32_t> buf(8, -1);
    if (i == 0) {
      int32_t v[3] = {1, 2, 3};
      PeerGroup::Send s{1, 7, v, sizeof(v)};
      ASSERT_TRUE(groups_[0]->exchange({&s, 1}, {}, absl::Now() + absl::Seconds(10)).ok());
    } else {
      PeerGroup::Recv r{0, 7, buf.data(), static_cast<int64_t>(buf.size() * sizeof(int32_t))};
      ASSERT_TRUE(groups_[1]->exchange({}, {&r, 1}, absl::Now() + absl::Seconds(10)).ok());
      EXPECT_EQ(buf[2], 3);
      EXPECT_EQ(buf[3], -1);  // the rest of the receive is left as it was
    }
  });
  on_each(2, [&](int i) {
    std::vector<int32_t> buf(8, -1);
    if (i == 0) {
      PeerGroup::Send s{1, 8, buf.data(), static_cast<int64_t>(buf.size() * sizeof(int32_t))};
      (void)groups_[0]->exchange({&s, 1}, {}, absl::Now() + absl::Seconds(10));
    } else {
      PeerGroup::Recv r{0, 8, buf.data(), 4};
      absl::Status st = groups_[1]->exchange({}, {&r, 1}, absl::Now() + absl::Seconds(10));
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
      EXPECT_THAT(st.message(), HasSubstr("sent 32 bytes with tag 8; the receive posted for it holds 4"));
    }
  });
}

TEST_P(TcpPeerGroupTest, MessagesThatComeEarlyWaitForTheirReceiveInOrder) {
  start(2);
  on_each(2, [&](int i) {
    if (i == 0) {
      for (int32_t v : {10, 20, 30}) {  // three exchanges before the receiver posts anything
        std::vector<int32_t> payload(v == 20 ? 40000 : 1, v);  // one above the coalescing size
        PeerGroup::Send s{1, 5, payload.data(), static_cast<int64_t>(payload.size() * sizeof(int32_t))};
        ASSERT_TRUE(groups_[0]->exchange({&s, 1}, {}, absl::Now() + absl::Seconds(10)).ok());
      }
    } else {
      absl::SleepFor(absl::Milliseconds(200));
      for (int32_t v : {10, 20, 30}) {
        std::vector<int32_t> got(40000, 0);
        PeerGroup::Recv r{0, 5, got.data(), static_cast<int64_t>(got.size() * sizeof(int32_t))};
        ASSERT_TRUE(groups_[1]->exchange({}, {&r, 1}, absl::Now() + absl::Seconds(10)).ok());
        EXPECT_EQ(got[0], v);
        if (v == 20) {
          EXPECT_EQ(got[39999], 20);
        }
      }
    }
  });
}

// Rank 1's first exchange ends while the next exchange's large message is half read; the receive posted for it
// next must get all of it (this once returned the half that had arrived).
TEST_P(TcpPeerGroupTest, AMessageHalfReadWhenItsReceiveIsPostedArrivesWhole) {
  start(2);
  const int64_t count = 4 << 20;  // 16 MiB: far more than the socket buffers hold
  on_each(2, [&](int i) {
    if (i == 0) {
      int32_t small = 7;
      std::vector<int32_t> big(count);
      for (int64_t k = 0; k < count; ++k) big[k] = static_cast<int32_t>(k);
      PeerGroup::Send s[2] = {{1, 1, &small, sizeof(small)}, {1, 9, big.data(), count * 4}};
      ASSERT_TRUE(groups_[0]->exchange(s, {}, absl::Now() + absl::Seconds(20)).ok());
    } else {
      int32_t small = 0;
      PeerGroup::Recv r1{0, 1, &small, sizeof(small)};
      ASSERT_TRUE(groups_[1]->exchange({}, {&r1, 1}, absl::Now() + absl::Seconds(20)).ok());
      EXPECT_EQ(small, 7);
      std::vector<int32_t> big(count, -1);
      PeerGroup::Recv r9{0, 9, big.data(), count * 4};
      ASSERT_TRUE(groups_[1]->exchange({}, {&r9, 1}, absl::Now() + absl::Seconds(20)).ok());
      for (int64_t k = 0; k < count; k += 4093) ASSERT_EQ(big[k], static_cast<int32_t>(k)) << k;
      EXPECT_EQ(big[count - 1], static_cast<int32_t>(count - 1));
    }
  });
}

TEST_P(TcpPeerGroupTest, MissingPeerIsADeadlineNamingItsProcess) {
  start_planes(3);
  std::vector<int> all = {0, 1, 2};
  std::vector<absl::Status> st(2);
  on_each(2, [&](int i) {
    st[i] = planes_[i]->connect(PeerGroupRequest{all, "partial", 0, absl::Now() + absl::Milliseconds(800)}).status();
  });
  for (const absl::Status& s : st) {
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_THAT(s.message(), HasSubstr("process 2"));
  }
}

// A peer the coordination service reports dead while the group is being connected ends the rendezvous at once,
// marked as its failure (so with_live_devices retries on the survivors), instead of at the 60 s deadline.
TEST_P(TcpPeerGroupTest, APeerReportedDeadEndsTheRendezvousAtOnce) {
  start_planes(3);
  std::vector<int> all = {0, 1, 2};
  std::vector<absl::Status> st(2);
  const absl::Time start = absl::Now();
  std::thread report([] {
    absl::SleepFor(absl::Milliseconds(300));
    record_process_failure(2, 12345, mark_process_failure(absl::UnavailableError("process 2 was killed"), 2));
  });
  on_each(2, [&](int i) {
    st[i] = planes_[i]->connect(PeerGroupRequest{all, "dead peer", 0, absl::Now() + absl::Seconds(60)}).status();
  });
  report.join();
  record_process_alive(2, 67890);  // forget the failure (another incarnation) for the other tests
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (const absl::Status& s : st) {
    EXPECT_EQ(failed_process(s), 2) << s;
    EXPECT_THAT(s.message(), HasSubstr("process 2 was killed"));
  }
}

TEST_P(TcpPeerGroupTest, AbortEndsABlockedExchangePromptly) {
  start(2);
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(200));
    groups_[0]->abort(absl::CancelledError("stop now"));
  });
  int32_t v = 0;
  PeerGroup::Recv r{1, 1, &v, sizeof(v)};
  const absl::Time start = absl::Now();
  absl::Status st = groups_[0]->exchange({}, {&r, 1}, absl::Now() + absl::Seconds(30));
  aborter.join();
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // Poisoned: the next exchange fails at once, naming the first error.
  absl::Status again = groups_[0]->exchange({}, {&r, 1}, absl::Now() + absl::Seconds(30));
  EXPECT_EQ(again.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(again.message(), HasSubstr("stop now"));
  EXPECT_TRUE(groups_[0]->failed());
}

// A peer's last message, sent just before the group is aborted (its process died right after sending, and the
// report of its death aborted the group here), still completes the exchange waiting for it: the data is there.
// The receiving thread is held in the callback of the exchange's first receive while the second message is sent
// and delivered and the abort comes, so nothing has read that message when the exchange sees the abort.
TEST_P(TcpPeerGroupTest, AMessageSentBeforeTheAbortStillCompletesTheExchange) {
  start(2);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  const int32_t one = 1, two = 2;
  int32_t first = 0, second = 0;
  const PeerGroup::Send send_first{0, 7, &one, sizeof(one)};
  ASSERT_TRUE(groups_[1]->exchange({&send_first, 1}, {}, deadline).ok());
  const PeerGroup::Recv recvs[] = {{1, 7, &first, sizeof(first)}, {1, 8, &second, sizeof(second)}};
  absl::Status sent_second;
  const absl::Status received = groups_[0]->exchange({}, recvs, deadline, [&](size_t index) {
    if (index == 0) {
      const PeerGroup::Send send_second{0, 8, &two, sizeof(two)};
      sent_second = groups_[1]->exchange({&send_second, 1}, {}, deadline);
      absl::SleepFor(absl::Milliseconds(100));  // in this process's ring or socket by now
      groups_[0]->abort(absl::UnavailableError("process 1 failed"));
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(sent_second.ok()) << sent_second;
  EXPECT_TRUE(received.ok()) << received;
  EXPECT_EQ(first, one);
  EXPECT_EQ(second, two);
  // The group has failed all the same: the next exchange fails at once, naming the abort.
  absl::Status again = groups_[0]->exchange({}, {}, absl::Now() + absl::Seconds(30));
  EXPECT_EQ(again.code(), absl::StatusCode::kAborted) << again;
  EXPECT_THAT(again.message(), HasSubstr("process 1 failed"));
}

TEST_P(TcpPeerGroupTest, ClosedPeerFailsTheOtherFastNamingItsProcess) {
  start(2);
  groups_[1].reset();  // process 1 "dies": its connections close
  int32_t v = 0;
  PeerGroup::Recv r{1, 1, &v, sizeof(v)};
  const absl::Time start = absl::Now();
  absl::Status st = groups_[0]->exchange({}, {&r, 1}, absl::Now() + absl::Seconds(30));
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_THAT(st.message(), HasSubstr("process 1"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// Process 0 gives up on the group because process 2 failed; process 1, waiting for process 0, learns that from
// process 0's goodbye and blames process 2, not the messenger.
TEST_P(TcpPeerGroupTest, AProcessThatLeavesSaysWhichProcessFailed) {
  start(3);
  std::thread leaver([&] {
    absl::SleepFor(absl::Milliseconds(100));
    groups_[0]->abort(mark_process_failure(absl::UnavailableError("process 2 failed (heartbeats stopped)"), 2));
  });
  int32_t v = 0;
  PeerGroup::Recv r{0, 1, &v, sizeof(v)};
  absl::Status st = groups_[1]->exchange({}, {&r, 1}, absl::Now() + absl::Seconds(30));
  leaver.join();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_EQ(failed_process(st), 2) << st;
  EXPECT_THAT(st.message(), HasSubstr("process 0 (peer 0 of"));
  EXPECT_THAT(st.message(), HasSubstr("left the group: process 2 failed (heartbeats stopped)"));
}

TEST_P(TcpPeerGroupTest, PeerMustBeAnotherRank) {
  start(2);
  int32_t v = 0;
  PeerGroup::Send s{0, 1, &v, sizeof(v)};
  absl::Status st = groups_[0]->exchange({&s, 1}, {}, absl::Now() + absl::Seconds(1));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("names peer 0"));
}

// A raw TCP connection to process 0's listener, optionally wrapped in TLS with `leaf`'s certificate.
std::unique_ptr<DataPlaneStream> dial_raw(const std::string& address, const std::shared_ptr<DataPlaneTls>& tls) {
  const size_t colon = address.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return nullptr;
  }
  SSL* ssl = tls ? *tls->new_ssl(fd, /*server=*/false) : nullptr;
  return std::make_unique<DataPlaneStream>(fd, ssl);
}

TEST_P(TcpPeerGroupTest, AStrangerWithoutTheSecretIsRefusedAndLogged) {
  start_planes(2);
  std::shared_ptr<DataPlaneTls> client_tls;
  if (tls()) client_tls = *DataPlaneTls::create(task_mtls("task1"));  // a real task certificate, but no secret
  auto stream = dial_raw(planes_[0]->address(), client_tls);
  ASSERT_NE(stream, nullptr);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  ASSERT_TRUE(stream->tls_handshake(deadline).ok());
  DataPlaneHello hello;
  hello.from_process = 1;
  hello.from_rank = 1;
  hello.to_process = 0;
  hello.to_rank = 0;
  hello.nonce = random_32_bytes();
  hello.group = "test group|0.0";
  absl::Status st = connector_handshake(*stream, hello, "not the job's secret", deadline);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
  EXPECT_THAT(st.message(), HasSubstr("does not know the job's secret"));  // the listener's proof fails the guess
  stream.reset();
  // A stranger that answers with a forged proof anyway gets a refusal, never a connection.
  auto forger = dial_raw(planes_[0]->address(), client_tls);
  ASSERT_TRUE(forger->tls_handshake(deadline).ok());
  const std::string body = encode_hello(hello);
  std::string first("MCXDP\x01\0\0", 8);
  for (int b = 0; b < 4; ++b) first.push_back(static_cast<char>((body.size() >> (8 * b)) & 0xff));
  first += body;
  ASSERT_TRUE(forger->write_all(first.data(), first.size(), deadline, "hello").ok());
  char answer[64];
  ASSERT_TRUE(forger->read_exact(answer, sizeof(answer), deadline, "answer").ok());
  const std::string forged(32, 'f');
  ASSERT_TRUE(forger->write_all(forged.data(), forged.size(), deadline, "proof").ok());
  char verdict = 1;
  ASSERT_TRUE(forger->read_exact(&verdict, 1, deadline, "verdict").ok());
  EXPECT_EQ(verdict, 0);
  // Garbage instead of a hello.
  auto garbage = dial_raw(planes_[0]->address(), client_tls);
  ASSERT_TRUE(garbage->tls_handshake(deadline).ok());
  const std::string junk(64, 'x');
  ASSERT_TRUE(garbage->write_all(junk.data(), junk.size(), deadline, "junk").ok());
  const absl::Time wait_until = absl::Now() + absl::Seconds(5);
  while (planes_[0]->refused_connections() < 3 && absl::Now() < wait_until) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(planes_[0]->refused_connections(), 3);
  // A connection that never speaks does not hold up the job: the real group still connects.
  auto silent = dial_raw(planes_[0]->address(), nullptr);
  ASSERT_NE(silent, nullptr);
  for (const absl::Status& s : connect_all(2, absl::Seconds(10))) EXPECT_TRUE(s.ok()) << s;
}

TEST_P(TcpPeerGroupTest, TheListenerAlsoProvesItselfToTheConnector) {
  // A listener that does not know the secret took over process 0's published address (with TLS it even holds
  // process 0's certificate): process 1 finds out before it sends a tensor.
  start_planes(2);
  DataPlaneListener::Options fake;
  fake.address = "127.0.0.1";
  fake.process = 0;
  if (tls()) fake.tls = *DataPlaneTls::create(task_mtls("task0"));
  fake.secret = [](absl::Time) -> absl::StatusOr<std::string> { return std::string("a guess"); };
  auto impostor = DataPlaneListener::start(fake);
  ASSERT_TRUE(impostor.ok()) << impostor.status();
  ASSERT_TRUE(agents_[0]->kv_insert(TcpDataPlane::address_key(0), (*impostor)->address(), true).ok());
  std::vector<int> pair = {0, 1};
  auto g = planes_[1]->connect(PeerGroupRequest{pair, "redirected", 0, absl::Now() + absl::Seconds(5)});
  EXPECT_EQ(g.status().code(), absl::StatusCode::kPermissionDenied) << g.status();
  EXPECT_THAT(g.status().message(), HasSubstr("the listener of process 0 does not know the job's secret"));
}

TEST(TcpPeerGroupTlsTest, ACertificateOfAnotherTaskOrCaIsRefused) {
  for (const std::string leaf : {"task3", "stranger"}) {
    SCOPED_TRACE(leaf);
    ServiceOptions o;
    o.num_tasks = 2;
    auto service = *CoordinationService::create(o);
    std::vector<std::unique_ptr<CoordinationAgent>> agents = connected_agents(service.get(), 2);
    std::vector<std::shared_ptr<TcpDataPlane>> planes;
    for (int i = 0; i < 2; ++i) {
      // Process 1 presents `leaf`: a certificate naming task 3, or one from another CA.
      MtlsOptions m = i == 1 ? task_mtls(leaf, leaf == "stranger" ? "other_ca.pem" : "ca.pem") : task_mtls("task0");
      auto p = TcpDataPlane::start(
        {i, "127.0.0.1", *DataPlaneTls::create(m), std::make_shared<AgentKeyValue>(agents[i].get(), i, 2)});
      ASSERT_TRUE(p.ok()) << p.status();
      planes.push_back(*p);
    }
    std::vector<int> pair = {0, 1};
    const absl::Time deadline = absl::Now() + absl::Seconds(2);
    absl::Status s1;
    std::thread c1([&] { s1 = planes[1]->connect(PeerGroupRequest{pair, "g", 0, deadline}).status(); });
    absl::Status s0 = planes[0]->connect(PeerGroupRequest{pair, "g", 0, deadline}).status();
    c1.join();
    EXPECT_FALSE(s0.ok());
    EXPECT_FALSE(s1.ok());
    // Process 1 verifies process 0 and sends its hello; process 0 finds that the certificate does not name task 1
    // (or does not verify at all) and closes the connection.
    EXPECT_THAT(std::string(s1.message()), HasSubstr(leaf == "task3" ? "closed the connection during the handshake"
                                                                     : "TLS handshake failed"));
    EXPECT_GE(planes[0]->refused_connections(), 1);
  }
}

// The data plane's transport choice refuses what would silently send tensors in the clear.
// Rotation: process 1's files are replaced (by rename) with a certificate of another CA, then with its own again;
// each new group uses the files of the moment (refresh interval 0: checked at every connection).
TEST(TcpPeerGroupTlsTest, RotatedCertificateFilesApplyToNewConnections) {
  ServiceOptions o;
  o.num_tasks = 2;
  auto service = *CoordinationService::create(o);
  std::vector<std::unique_ptr<CoordinationAgent>> agents = connected_agents(service.get(), 2);
  // Process 1's own copies of its files, replaced the way rotation tools do it (write aside, rename over).
  const std::string own_cert = certs()->path("rotating.pem"), own_key = certs()->path("rotating.key");
  auto install = [&](const std::string& leaf) {
    for (const auto& [from, to] : {std::pair{certs()->path(leaf + ".pem"), own_cert},
                                   std::pair{certs()->path(leaf + ".key"), own_key}}) {
      std::filesystem::copy_file(from, to + ".new", std::filesystem::copy_options::overwrite_existing);
      std::filesystem::rename(to + ".new", to);
    }
  };
  install("task1");
  std::vector<std::shared_ptr<TcpDataPlane>> planes;
  for (int i = 0; i < 2; ++i) {
    MtlsOptions m = task_mtls(absl::StrCat("task", i));
    if (i == 1) {
      m.cert_file = own_cert;
      m.key_file = own_key;
    }
    m.refresh_interval = absl::ZeroDuration();
    auto p = TcpDataPlane::start(
        {i, "127.0.0.1", *DataPlaneTls::create(m), std::make_shared<AgentKeyValue>(agents[i].get(), i, 2)});
    ASSERT_TRUE(p.ok()) << p.status();
    planes.push_back(*p);
  }
  auto connect = [&](const std::string& key) {
    std::vector<int> pair = {0, 1};
    std::vector<absl::Status> st(2);
    const absl::Time deadline = absl::Now() + absl::Seconds(2);
    on_each(2, [&](int i) { st[i] = planes[i]->connect(PeerGroupRequest{pair, key, 0, deadline}).status(); });
    return st[0].ok() && st[1].ok();
  };
  EXPECT_TRUE(connect("before"));
  install("stranger");  // another CA: process 0 refuses it
  EXPECT_FALSE(connect("rotated to a foreign certificate"));
  install("task1");
  EXPECT_TRUE(connect("rotated back"));
}

TEST(DataPlaneStart, TlsIsNeverSilentlyDropped) {
  ServiceOptions o;
  o.num_tasks = 1;
  auto service = *CoordinationService::create(o);
  CoordinationAgent agent(std::make_unique<InProcessClient>(service.get()), test_agent_options(0, 1, absl::Seconds(5)));
  ASSERT_TRUE(agent.connect().ok());
  auto kv = std::make_shared<AgentKeyValue>(&agent, 0, 1);
  ::setenv("MCX_DATA_PLANE_TLS", "1", 1);
  ::setenv("MCX_COLLECTIVES", "gloo", 1);
  absl::Status gloo = start_data_plane(kv, DataPlaneConfig{"127.0.0.1:1", 0, 1, {}});
  EXPECT_EQ(gloo.code(), absl::StatusCode::kFailedPrecondition) << gloo;
  EXPECT_THAT(gloo.message(), HasSubstr("MCX_COLLECTIVES=gloo has no TLS"));
  ::setenv("MCX_COLLECTIVES", "tcp", 1);
  absl::Status no_files = start_data_plane(kv, DataPlaneConfig{"127.0.0.1:1", 0, 1, {}});
  EXPECT_EQ(no_files.code(), absl::StatusCode::kFailedPrecondition) << no_files;
  EXPECT_THAT(no_files.message(), HasSubstr("needs the mTLS files"));
  ::unsetenv("MCX_DATA_PLANE_TLS");
  ::unsetenv("MCX_COLLECTIVES");
  EXPECT_EQ(peer_group_backend(), "");  // nothing was installed
}

TEST(DataPlaneHandshake, HelloRoundTripsAndMalformedHellosAreRefused) {
  DataPlaneHello h;
  h.from_process = 3;
  h.from_rank = 2;
  h.to_process = 1;
  h.to_rank = 0;
  h.nonce = random_32_bytes();
  h.group = "devices 0,1|4.2";
  auto back = decode_hello(encode_hello(h));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->from_process, 3u);
  EXPECT_EQ(back->to_rank, 0u);
  EXPECT_EQ(back->nonce, h.nonce);
  EXPECT_EQ(back->group, h.group);
  EXPECT_EQ(decode_hello("short").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(decode_hello(std::string(kMaxHelloBytes + 1, 'a')).status().code(), absl::StatusCode::kInvalidArgument);
  // Proofs depend on the role, the secret, the hello and the acceptor's nonce.
  const std::string body = encode_hello(h);
  const auto n = random_32_bytes();
  EXPECT_NE(handshake_proof("s", "acceptor", body, n), handshake_proof("s", "connector", body, n));
  EXPECT_NE(handshake_proof("s", "acceptor", body, n), handshake_proof("t", "acceptor", body, n));
  EXPECT_NE(handshake_proof("s", "acceptor", body, n), handshake_proof("s", "acceptor", body, random_32_bytes()));
  EXPECT_EQ(handshake_proof("s", "acceptor", body, n), handshake_proof("s", "acceptor", body, n));
}

}  // namespace
}  // namespace mcx::distributed
