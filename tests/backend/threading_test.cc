// Thread pool contract, concurrent execute, bitwise determinism across thread counts, argument errors.
#include <atomic>
#include <stdexcept>
#include <thread>

#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/ir/builder.h"
#include "tests/backend/backend_test_util.h"

namespace mcx::cpu::testing {
namespace {

using ir::OpKind;
using Ints = std::vector<int64_t>;

AbstractValue av(DType t, const Ints& dims) { return {t, concrete_shape(dims)}; }

TEST(ThreadPool, CoversRangeExactlyOnce) {
  ThreadCountGuard guard;
  for (int threads : {1, 2, 3, 8}) {
    set_num_threads(threads);
    for (int64_t n : {0, 1, 5, 1000, 100003}) {
      std::vector<std::atomic<int>> hits(n);
      parallel_for(n, 7, [&](int64_t b, int64_t e) {
        EXPECT_LT(b, e);
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

TEST(ThreadPool, NestedCallsRunInlineAndExceptionsPropagate) {
  ThreadCountGuard guard;
  set_num_threads(4);
  std::atomic<int64_t> total{0};
  parallel_for(64, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      parallel_for(100, 1, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
    }
  });
  EXPECT_EQ(total.load(), 6400);
  EXPECT_THROW(parallel_for(100, 1,
                            [&](int64_t b, int64_t) {
                              if (b > 50) throw std::runtime_error("chunk failed");
                            }),
               std::runtime_error);
  // The pool still works after an exception.
  std::atomic<int64_t> after{0};
  parallel_for(1000, 10, [&](int64_t b, int64_t e) { after += e - b; });
  EXPECT_EQ(after.load(), 1000);
}

TEST(ThreadPool, SetNumThreads) {
  ThreadCountGuard guard;
  set_num_threads(3);
  EXPECT_EQ(num_threads(), 3);
  set_num_threads(0);  // clamped to 1
  EXPECT_EQ(num_threads(), 1);
}

ir::Program mixed_program() {
  ir::ProgramBuilder b("mixed");
  auto x = b.add_parameter(av(DType::kFloat32, {300, 517}));
  auto w = b.add_parameter(av(DType::kFloat32, {517, 64}));
  auto e = b.unary(OpKind::kTanh, b.binary(OpKind::kMul, b.unary(OpKind::kExp, x), x));
  auto s = b.reduce_sum(e, {0});                 // column reduction
  auto s2 = b.reduce_sum(e, {0, 1});             // full reduction (chunked)
  auto mx = b.emit_or_throw(OpKind::kReduceMax, {e}, {{"dimensions", Ints{1}}});
  auto d = b.emit_or_throw(OpKind::kDotGeneral, {e, w},
                           {{"lhs_batch", Ints{}}, {"rhs_batch", Ints{}}, {"lhs_contracting", Ints{1}},
                            {"rhs_contracting", Ints{0}}});
  auto cs = b.emit_or_throw(OpKind::kCumsum, {e}, {{"dimension", int64_t{0}}, {"reverse", int64_t{0}}});
  return std::move(b).build({e, s, s2, mx, d, cs});
}

TEST(Determinism, BitwiseIdenticalAcrossThreadCounts) {
  ThreadCountGuard guard;
  ir::Program p = mixed_program();
  std::vector<Buffer> args = {test::random_buffer(DType::kFloat32, {300, 517}, 1, -2, 2),
                              test::random_buffer(DType::kFloat32, {517, 64}, 2)};
  auto exe = CpuExecutable::compile(p);
  ASSERT_TRUE(exe.ok()) << exe.status();
  set_num_threads(1);
  auto base = (*exe)->execute(args);
  ASSERT_TRUE(base.ok()) << base.status();
  for (int threads : {2, 3, 4, 7}) {
    set_num_threads(threads);
    auto r = (*exe)->execute(args);
    ASSERT_TRUE(r.ok());
    // dot_general is OpenBLAS's business (its kernels may block differently per thread count), so it is
    // checked with a tolerance; everything else must be bitwise identical.
    for (size_t i = 0; i < r->size(); ++i) {
      if (i == 4) {
        EXPECT_TRUE(test::buffers_near((*r)[i], (*base)[i], 1e-5, 1e-5));
      } else {
        EXPECT_TRUE((*r)[i].bitwise_equal((*base)[i])) << "result " << i << " with " << threads << " threads";
      }
    }
  }
  expect_matches_reference(p, args, 1e-4, 1e-3);
}

TEST(Concurrency, ExecuteFromFourThreads) {
  ir::Program p = mixed_program();
  auto exe = CpuExecutable::compile(p);
  ASSERT_TRUE(exe.ok());
  std::vector<std::vector<Buffer>> args(4), results(4);
  for (int t = 0; t < 4; ++t) {
    args[t] = {test::random_buffer(DType::kFloat32, {300, 517}, 10 + t), test::random_buffer(DType::kFloat32, {517, 64}, 20 + t)};
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) {
        auto r = (*exe)->execute(args[t]);
        if (!r.ok()) { failures++; return; }
        if (rep == 0) results[t] = *r;
        else if (!(*r)[0].bitwise_equal(results[t][0]) || !(*r)[2].bitwise_equal(results[t][2])) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  for (int t = 0; t < 4; ++t) {
    std::vector<Buffer> single = run_cpu(p, args[t]);
    ASSERT_EQ(single.size(), results[t].size());
    for (size_t i = 0; i < single.size(); ++i) {
      EXPECT_TRUE(test::buffers_near(results[t][i], single[i], 1e-5, 1e-5)) << "thread " << t << " result " << i;
    }
  }
}

TEST(Execute, ArgumentErrorsNameIndexAndTypes) {
  ir::Program p = test::single_op_program(OpKind::kAdd, {av(DType::kFloat32, {256, 784}), av(DType::kFloat32, {256, 784})});
  auto exe = CpuExecutable::compile(p);
  ASSERT_TRUE(exe.ok());
  std::vector<Buffer> bad = {Buffer::zeros(DType::kFloat32, {256, 784}), Buffer::zeros(DType::kFloat32, {256, 785})};
  auto r = (*exe)->execute(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "[execute] argument 1: expected f32[256,784], found f32[256,785]");
  std::vector<Buffer> wrong_dtype = {Buffer::zeros(DType::kFloat64, {256, 784}), Buffer::zeros(DType::kFloat32, {256, 784})};
  r = (*exe)->execute(wrong_dtype);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "[execute] argument 0: expected f32[256,784], found f64[256,784]");
  ir::Program scalar = test::single_op_program(OpKind::kNeg, {av(DType::kFloat32, {})});
  auto sexe = CpuExecutable::compile(scalar);
  ASSERT_TRUE(sexe.ok());
  auto sr = (*sexe)->execute(std::vector<Buffer>{Buffer()});
  ASSERT_FALSE(sr.ok());
  EXPECT_EQ(sr.status().message(), "[execute] argument 0: expected f32[], found f32[] without storage");
  r = (*exe)->execute(std::vector<Buffer>{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("expected 2 arguments, found 0"), std::string::npos) << r.status();
}

TEST(Execute, SymbolicProgramsAreRejectedAtCompile) {
  ir::ProgramBuilder b("sym");
  auto x = b.add_parameter({DType::kFloat32, symbolic_shape("b, 4")});
  auto y = b.unary(OpKind::kExp, x);
  auto exe = CpuExecutable::compile(std::move(b).build({y}));
  ASSERT_FALSE(exe.ok());
  EXPECT_EQ(exe.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(exe.status().message().find("symbolic"), std::string::npos) << exe.status();
}

}  // namespace
}  // namespace mcx::cpu::testing
