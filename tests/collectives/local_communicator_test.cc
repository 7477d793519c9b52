// LocalGroup / LocalCommunicator with real threads (one per rank) against naive references, on group
// sizes {1, 2, 3, 4, 8}.
#include "mcx/collectives/local_communicator.h"

#include <atomic>
#include <cstring>
#include <functional>
#include <random>
#include <latch>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mcx {
namespace {

using testing::HasSubstr;

absl::Time soon() { return absl::Now() + absl::Seconds(10); }

// Runs fn(rank) on one thread per rank and returns each rank's status.
std::vector<absl::Status> run_ranks(int n, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> st(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { st[r] = fn(r); });
  for (auto& t : threads) t.join();
  return st;
}

void expect_all_ok(const std::vector<absl::Status>& st) {
  for (size_t r = 0; r < st.size(); ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
}

template <typename T>
std::vector<T> values(int rank, int64_t n, int salt) {
  std::mt19937_64 g(rank * 7919 + salt);
  std::vector<T> v(n);
  for (auto&& x : v) {
    if constexpr (std::is_same_v<T, bool>) {
      x = g() % 3 == 0;
    } else if constexpr (std::is_floating_point_v<T>) {
      x = static_cast<T>(std::uniform_real_distribution<double>(-2, 2)(g));
    } else {
      x = static_cast<T>(static_cast<int64_t>(g() % 2001) - 1000);
    }
  }
  return v;
}

// Element k reduced over ranks in rank order, in T's arithmetic (the documented order).
template <typename T>
T naive_reduce(const std::vector<std::vector<T>>& in, int64_t k, ReduceOp op) {
  T a = in[0][k];
  for (size_t r = 1; r < in.size(); ++r) {
    T v = in[r][k];
    if constexpr (std::is_same_v<T, bool>) {
      a = (op == ReduceOp::kMax || op == ReduceOp::kSum) ? (a || v) : (a && v);
    } else if constexpr (std::is_integral_v<T>) {  // integers wrap: computed unsigned (no signed overflow)
      using U = std::make_unsigned_t<T>;
      switch (op) {
        case ReduceOp::kSum: a = static_cast<T>(static_cast<U>(a) + static_cast<U>(v)); break;
        case ReduceOp::kProd: a = static_cast<T>(static_cast<U>(a) * static_cast<U>(v)); break;
        case ReduceOp::kMax: a = std::max(a, v); break;
        case ReduceOp::kMin: a = std::min(a, v); break;
      }
    } else {
      switch (op) {
        case ReduceOp::kSum: a = static_cast<T>(a + v); break;
        case ReduceOp::kProd: a = static_cast<T>(a * v); break;
        case ReduceOp::kMax: a = std::max(a, v); break;
        case ReduceOp::kMin: a = std::min(a, v); break;
      }
    }
  }
  return a;
}

class LocalCommunicatorTest : public ::testing::TestWithParam<int> {};

template <typename T>
void check_all_reduce(int n, DType dtype, ReduceOp op, int64_t count) {
  SCOPED_TRACE(testing::Message() << "dtype " << dtype_short_name(dtype) << " op " << reduce_op_name(op) << " count "
                                  << count);
  LocalGroup g(n);
  std::vector<std::vector<T>> in(n), out(n);
  for (int r = 0; r < n; ++r) {
    in[r] = values<T>(r, count, static_cast<int>(op));
    out[r].assign(count, T{});
  }
  auto st = run_ranks(n, [&](int r) {
    // bool vectors are bit-packed: go through plain arrays.
    std::unique_ptr<T[]> i(new T[count + 1]), o(new T[count + 1]);
    for (int64_t k = 0; k < count; ++k) i[k] = in[r][k];
    absl::Status s = g.member(r).all_reduce(i.get(), o.get(), count, dtype, op, soon());
    for (int64_t k = 0; k < count; ++k) out[r][k] = o[k];
    return s;
  });
  expect_all_ok(st);
  for (int64_t k = 0; k < count; ++k) {
    T want = naive_reduce(in, k, op);
    for (int r = 0; r < n; ++r) {
      if constexpr (std::is_floating_point_v<T>) {
        ASSERT_EQ(std::memcmp(&out[r][k], &want, sizeof(T)), 0) << "rank " << r << " element " << k << ": "
                                                                 << out[r][k] << " vs " << want;
      } else {
        ASSERT_EQ(out[r][k], want) << "rank " << r << " element " << k;
      }
    }
  }
}

TEST_P(LocalCommunicatorTest, AllReduceEveryDtypeAndOp) {
  const int n = GetParam();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}) {
    for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}}) {
      check_all_reduce<float>(n, DType::kFloat32, op, count);
      check_all_reduce<double>(n, DType::kFloat64, op, count);
      check_all_reduce<int32_t>(n, DType::kInt32, op, count);
      if (op != ReduceOp::kProd && op != ReduceOp::kSum) check_all_reduce<bool>(n, DType::kBool, op, count);
    }
  }
}

TEST_P(LocalCommunicatorTest, AllReduceInPlace) {
  const int n = GetParam();
  LocalGroup g(n);
  std::vector<std::vector<double>> buf(n);
  for (int r = 0; r < n; ++r) buf[r] = {1.0 * r, 2.0 * r, 3.0};
  expect_all_ok(run_ranks(n, [&](int r) {
    return g.member(r).all_reduce(buf[r].data(), buf[r].data(), 3, DType::kFloat64, ReduceOp::kSum, soon());
  }));
  const double s = n * (n - 1) / 2.0;
  for (int r = 0; r < n; ++r) EXPECT_EQ(buf[r], (std::vector<double>{s, 2 * s, 3.0 * n}));
}

TEST_P(LocalCommunicatorTest, AllReduceSharedGivesEveryMemberTheSameResult) {
  const int n = GetParam();
  LocalGroup g(n);
  for (int round = 0; round < 3; ++round) {  // each round gets a fresh result buffer
    std::vector<std::vector<float>> in(n);
    for (int r = 0; r < n; ++r) in[r] = {1.0f * r + round, 2.0f, -1.0f * r, 0.5f, 3.0f, 4.0f};
    std::vector<Buffer> out(n);
    expect_all_ok(run_ranks(n, [&](int r) -> absl::Status {
      absl::StatusOr<Buffer> b = g.member(r).all_reduce_shared(in[r].data(), {2, 3}, DType::kFloat32,
                                                               ReduceOp::kSum, soon());
      if (b.ok()) out[r] = *b;
      return b.status();
    }));
    const float s = n * (n - 1) / 2.0f;
    const std::vector<float> want = {s + n * round, 2.0f * n, -s, 0.5f * n, 3.0f * n, 4.0f * n};
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(out[r].dims(), (std::vector<int64_t>{2, 3}));
      EXPECT_EQ(std::vector<float>(out[r].data<float>(), out[r].data<float>() + 6), want) << "rank " << r;
      if (n > 1) EXPECT_EQ(out[r].data(), out[0].data()) << "members share one result in one process";
    }
  }
}

TEST_P(LocalCommunicatorTest, AllGatherSharedConcatenatesInRankOrder) {
  const int n = GetParam();
  LocalGroup g(n);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::vector<int32_t>> in(n);
    for (int r = 0; r < n; ++r) in[r] = {10 * r + round, 10 * r + 1, 10 * r + 2};
    std::vector<Buffer> out(n);
    expect_all_ok(run_ranks(n, [&](int r) -> absl::Status {
      absl::StatusOr<Buffer> b = g.member(r).all_gather_shared(in[r].data(), 3 * sizeof(int32_t), {n, 3},
                                                               DType::kInt32, soon());
      if (b.ok()) out[r] = *b;
      return b.status();
    }));
    std::vector<int32_t> want;
    for (int r = 0; r < n; ++r) want.insert(want.end(), in[r].begin(), in[r].end());
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(out[r].dims(), (std::vector<int64_t>{n, 3}));
      EXPECT_EQ(std::vector<int32_t>(out[r].data<int32_t>(), out[r].data<int32_t>() + 3 * n), want) << "rank " << r;
      if (n > 1) EXPECT_EQ(out[r].data(), out[0].data()) << "members share one result in one process";
    }
  }
  // Result dims that do not hold the blocks are an error, not an overrun.
  std::vector<int32_t> x = {1, 2, 3};
  auto st = run_ranks(n, [&](int r) { return g.member(r).all_gather_shared(x.data(), 12, {n + 1, 3}, DType::kInt32, soon()).status(); });
  for (const absl::Status& s : st) EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST_P(LocalCommunicatorTest, AllGatherReduceScatterAllToAll) {
  const int n = GetParam();
  LocalGroup g(n);
  const int64_t c = 5;  // elements per block
  std::vector<std::vector<int32_t>> in(n), gathered(n, std::vector<int32_t>(n * c)), a2a_in(n),
      a2a_out(n, std::vector<int32_t>(n * c)), rs_out(n, std::vector<int32_t>(c));
  for (int r = 0; r < n; ++r) {
    in[r] = values<int32_t>(r, c, 1);
    a2a_in[r] = values<int32_t>(r, n * c, 2);
  }
  expect_all_ok(run_ranks(n, [&](int r) -> absl::Status {
    Communicator& m = g.member(r);
    absl::Status s = m.all_gather(in[r].data(), gathered[r].data(), c * 4, soon());
    if (!s.ok()) return s;
    s = m.reduce_scatter(a2a_in[r].data(), rs_out[r].data(), c, DType::kInt32, ReduceOp::kSum, soon());
    if (!s.ok()) return s;
    return m.all_to_all(a2a_in[r].data(), a2a_out[r].data(), c * 4, soon());
  }));
  for (int r = 0; r < n; ++r) {
    for (int s = 0; s < n; ++s)
      for (int64_t k = 0; k < c; ++k) {
        ASSERT_EQ(gathered[r][s * c + k], in[s][k]) << "all_gather rank " << r << " block " << s;
        ASSERT_EQ(a2a_out[r][s * c + k], a2a_in[s][r * c + k]) << "all_to_all rank " << r << " block " << s;
      }
    for (int64_t k = 0; k < c; ++k) {
      int32_t want = 0;
      for (int s = 0; s < n; ++s) want += a2a_in[s][r * c + k];
      ASSERT_EQ(rs_out[r][k], want) << "reduce_scatter rank " << r;
    }
  }
}

TEST_P(LocalCommunicatorTest, PermuteRingAndPartial) {
  const int n = GetParam();
  LocalGroup g(n);
  std::vector<double> in(n), out(n, -1.0);
  for (int r = 0; r < n; ++r) in[r] = 10.0 + r;
  expect_all_ok(run_ranks(n, [&](int r) {
    return g.member(r).permute(&in[r], &out[r], 8, (r + 1) % n, (r + n - 1) % n, soon());
  }));
  for (int r = 0; r < n; ++r) EXPECT_EQ(out[r], 10.0 + (r + n - 1) % n);
  // Only rank 0 sends, to the last rank; the others' outputs stay untouched.
  std::fill(out.begin(), out.end(), -1.0);
  expect_all_ok(run_ranks(n, [&](int r) {
    int to = r == 0 ? n - 1 : -1, from = r == n - 1 ? 0 : -1;
    return g.member(r).permute(&in[r], &out[r], 8, to, from, soon());
  }));
  for (int r = 0; r < n; ++r) EXPECT_EQ(out[r], r == n - 1 ? 10.0 : -1.0) << "rank " << r;
}

TEST_P(LocalCommunicatorTest, ManyRoundsOnOneGroup) {
  const int n = GetParam();
  LocalGroup g(n);
  std::vector<int64_t> totals(n, 0);
  expect_all_ok(run_ranks(n, [&](int r) -> absl::Status {
    for (int round = 0; round < 300; ++round) {
      int64_t x = r + round, y = 0;
      absl::Status s = round % 3 == 2 ? g.member(r).barrier(soon())
                                      : g.member(r).all_reduce(&x, &y, 1, DType::kInt64, ReduceOp::kSum, soon());
      if (!s.ok()) return s;
      totals[r] += y;
    }
    return absl::OkStatus();
  }));
  int64_t want = 0;
  for (int round = 0; round < 300; ++round)
    if (round % 3 != 2) want += int64_t{n} * round + n * (n - 1) / 2;
  for (int r = 0; r < n; ++r) EXPECT_EQ(totals[r], want);
}

TEST_P(LocalCommunicatorTest, DeadlineNamesTheMissingRanksAndPoisons) {
  const int n = GetParam();
  if (n == 1) GTEST_SKIP() << "a group of one never waits";
  std::vector<std::string> names;
  for (int r = 0; r < n; ++r) names.push_back("cpu:" + std::to_string(r));
  LocalGroup g(n, names);
  // The last rank never calls. The others start together and share a deadline that leaves them time to arrive
  // even when thread start-up is slow (sanitizers), so the only missing member is the last.
  std::latch started(n - 1);
  std::mutex mu;
  std::optional<absl::Time> deadline;
  auto st = run_ranks(n - 1, [&](int r) {
    started.arrive_and_wait();
    absl::Time d;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!deadline) deadline = absl::Now() + absl::Milliseconds(500);
      d = *deadline;
    }
    float x = 1, y;
    return g.member(r).all_reduce(&x, &y, 1, DType::kFloat32, ReduceOp::kSum, d);
  });
  for (int r = 0; r < n - 1; ++r) {
    EXPECT_EQ(st[r].code(), absl::StatusCode::kDeadlineExceeded) << st[r];
    EXPECT_THAT(std::string(st[r].message()), HasSubstr("[all_reduce]"));
    EXPECT_THAT(std::string(st[r].message()), HasSubstr("waiting for cpu:" + std::to_string(n - 1) + " (1 of"));
  }
  // Every later call, on any member, fails with the first error.
  float x = 1, y;
  absl::Status late = g.member(n - 1).all_reduce(&x, &y, 1, DType::kFloat32, ReduceOp::kSum, soon());
  EXPECT_EQ(late.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(late.message()), HasSubstr("deadline exceeded"));
  EXPECT_EQ(g.member(0).barrier(soon()).code(), absl::StatusCode::kAborted);
}

TEST_P(LocalCommunicatorTest, MismatchedArgumentsAreInvalidArgument) {
  const int n = GetParam();
  if (n == 1) GTEST_SKIP() << "nothing to mismatch with";
  LocalGroup g(n);
  auto st = run_ranks(n, [&](int r) {
    std::vector<float> x(8, 1.0f), y(8);
    return g.member(r).all_reduce(x.data(), y.data(), r == 1 ? 5 : 4, DType::kFloat32, ReduceOp::kSum, soon());
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(st[r].code(), absl::StatusCode::kInvalidArgument) << st[r];
    EXPECT_THAT(std::string(st[r].message()),
                HasSubstr("rank 0 called all_reduce(count=4, f32, sum), rank 1 called all_reduce(count=5, f32, sum)"));
  }
  EXPECT_EQ(g.member(0).barrier(soon()).code(), absl::StatusCode::kAborted);
  // Different collectives, and an inconsistent permutation.
  LocalGroup h(n);
  auto st2 = run_ranks(n, [&](int r) {
    float x = 0;
    return r == 0 ? h.member(r).barrier(soon()) : h.member(r).all_gather(&x, nullptr, 0, soon());
  });
  EXPECT_THAT(std::string(st2[0].message()), HasSubstr("rank 0 called barrier(), rank 1 called all_gather(bytes=0)"));
  LocalGroup p(n);
  auto st3 = run_ranks(n, [&](int r) {
    float x = 0, y = 0;
    return p.member(r).permute(&x, &y, 4, r == 0 ? 1 : -1, -1, soon());
  });
  EXPECT_EQ(st3[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st3[0].message()), HasSubstr("rank 0 sends to rank 1 which receives from -1"));
}

INSTANTIATE_TEST_SUITE_P(GroupSizes, LocalCommunicatorTest, ::testing::Values(1, 2, 3, 4, 8));

TEST(LocalCommunicator, DescriptionAndReduceOpNames) {
  LocalGroup g(2, {"cpu:0", "cpu:1"});
  EXPECT_EQ(g.member(1).description(), "local group {cpu:0,cpu:1}");
  EXPECT_EQ(g.member(1).rank(), 1);
  EXPECT_EQ(g.size(), 2);
  EXPECT_EQ(reduce_op_name(ReduceOp::kProd), "prod");
  EXPECT_EQ(reduce_op_name(ReduceOp::kMin), "min");
}

}  // namespace
}  // namespace mcx
