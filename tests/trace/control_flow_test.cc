// Structured control flow (while_loop, fori_loop, scan, cond, switch_): each checked against the unrolled
// program (the same body called in a C++ loop), the reference evaluator and closed forms; eagerly, under
// jit (one trace however many iterations), nested, under vmap; and the errors a user meets.
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/text.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using testing::HasSubstr;
using testing_util::error_of;
using testing_util::expect_same_values;
using testing_util::random_array;

Array f32_scalar(float v) { return Array(Buffer::scalar<float>(v)); }
Array i32_scalar(int32_t v) { return Array(Buffer::scalar<int32_t>(v)); }

// Row t of x (leading dim dropped).
Array row(const Array& x, int64_t t) { return take(x, i32_scalar(static_cast<int32_t>(t))); }

int count_ops(const ir::Program& p, ir::OpKind kind) {
  int n = 0;
  for (const ir::Instr& in : p.instrs) n += in.kind == kind;
  return n;
}

TEST(ForiLoopTest, SumOfSquaresEagerAndUnderJit) {
  auto f = [](const Array& init) {
    return fori_loop(0, 10, [](const Array& i, const Array& acc) { return acc + astype(i * i, DType::kFloat32); },
                     init);
  };
  EXPECT_EQ(f(f32_scalar(0)).item<float>(), 285.0f);
  EXPECT_EQ(jit(f)(f32_scalar(1)).item<float>(), 286.0f);
  // Staged as one scan (not unrolled): the program has one scan result per carry leaf, no 10 copies.
  ir::Program p = trace(f, f32_scalar(0));
  EXPECT_EQ(count_ops(p, ir::OpKind::kScan), 2) << ir::print_program(p);  // the counter and the sum
  EXPECT_EQ(count_ops(p, ir::OpKind::kAdd), 0) << ir::print_program(p);
}

TEST(ForiLoopTest, EmptyRangeReturnsTheInitialCarryAndBoundsMustFitI32) {
  auto body = [](const Array& i, const Array& acc) { return acc + astype(i, DType::kFloat32); };
  EXPECT_EQ(fori_loop(5, 5, body, f32_scalar(2)).item<float>(), 2.0f);
  EXPECT_EQ(fori_loop(5, 1, body, f32_scalar(2)).item<float>(), 2.0f);
  EXPECT_THAT(error_of([&] { fori_loop(0, int64_t{1} << 40, body, f32_scalar(0)); }),
              HasSubstr("[fori_loop] the bounds [0, 1099511627776) do not fit the i32 loop counter"));
}

TEST(ForiLoopTest, ManyIterationsCostOneTraceAndOneCompile) {
#if defined(MCX_SANITIZER_BUILD)
  constexpr int kIterations = 20000;  // instrumented builds run each iteration ~30x slower; no time bound there
#else
  constexpr int kIterations = 200000;
#endif
  int traces = 0;
  auto f = jit([&](const Array& x) {
    return fori_loop(0, kIterations, [&](const Array&, const Array& acc) {
      ++traces;  // a C++ side effect: runs when the body is traced, not per iteration
      return acc + 1.0f;
    }, x);
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(f(f32_scalar(0)).item<float>(), static_cast<float>(kIterations));
  EXPECT_EQ(f(f32_scalar(1)).item<float>(), static_cast<float>(kIterations + 1));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(traces, 1);
#if !defined(MCX_SANITIZER_BUILD)
  EXPECT_LT(seconds, 20.0);  // about 1 s in a release build on 2 cores: the loop runs compiled, not unrolled
#else
  (void)seconds;
#endif
}

TEST(ForiLoopTest, TracedBoundsRunAWhileLoopWithADynamicTripCount) {
  int traces = 0;
  auto f = jit([&](const Array& n, const Array& x) {
    ++traces;
    return fori_loop(i32_scalar(0), n, [](const Array&, const Array& acc) { return acc * 2.0f; }, x);
  });
  EXPECT_EQ(f(i32_scalar(3), f32_scalar(1)).item<float>(), 8.0f);
  EXPECT_EQ(f(i32_scalar(10), f32_scalar(1)).item<float>(), 1024.0f);
  EXPECT_EQ(f(i32_scalar(-4), f32_scalar(5)).item<float>(), 5.0f);
  EXPECT_EQ(traces, 1);
}

TEST(WhileLoopTest, NewtonSquareRootMatchesTheUnrolledIteration) {
  // carry (iteration, x, a): x <- (x + a/x) / 2 until 6 iterations.
  using State = std::tuple<Array, Array, Array>;
  auto cond_fun = [](const State& s) { return std::get<0>(s) < 6; };
  auto body_fun = [](const State& s) {
    const auto& [i, x, a] = s;
    return State(i + 1, (x + a / x) * 0.5f, a);
  };
  Array a = array(std::vector<float>{2, 9, 10, 0.25f}, {4});
  State start(i32_scalar(0), full_like(a, Array(1.0f)), a);
  State looped = while_loop(cond_fun, body_fun, start);
  State unrolled = start;
  for (int k = 0; k < 6; ++k) unrolled = body_fun(unrolled);
  EXPECT_EQ(std::get<0>(looped).item<int32_t>(), 6);
  EXPECT_EQ(std::get<1>(looped).to_host().to_doubles(), std::get<1>(unrolled).to_host().to_doubles());
  State jitted = jit([&](const State& s) { return while_loop(cond_fun, body_fun, s); })(start);
  EXPECT_EQ(std::get<1>(jitted).to_host().to_doubles(), std::get<1>(unrolled).to_host().to_doubles());
}

TEST(WhileLoopTest, ZeroIterationsAndAClosedOverBound) {
  Array limit = f32_scalar(100);
  auto run = [&](const Array& x) {
    return while_loop([&](const Array& v) { return v < limit; }, [](const Array& v) { return v * 3.0f; }, x);
  };
  EXPECT_EQ(run(f32_scalar(500)).item<float>(), 500.0f);  // cond false at first: body never runs
  EXPECT_EQ(run(f32_scalar(1)).item<float>(), 243.0f);
  EXPECT_EQ(jit(run)(f32_scalar(2)).item<float>(), 162.0f);
}

TEST(WhileLoopTest, TheCarryMustKeepItsTypesAndTheConditionMustBeABoolScalar) {
  std::vector<Array> init{f32_scalar(0), zeros({2})};
  std::string e = error_of([&] {
    while_loop([](const std::vector<Array>& c) { return c[0] < 3.0f; },
               [](const std::vector<Array>& c) { return std::vector<Array>{c[0] + 1.0f, zeros({3})}; }, init);
  });
  EXPECT_THAT(e, HasSubstr("[while_loop] body_fun returns carry leaf [1] as f32[3], the initial carry has f32[2]"));
  e = error_of([&] {
    while_loop([](const std::vector<Array>& c) { return c[0] < 3.0f; },
               [](const std::vector<Array>& c) { return std::vector<Array>{astype(c[0], DType::kFloat64), c[1]}; },
               init);
  });
  EXPECT_THAT(e, HasSubstr("carry leaf [0] as f64[], the initial carry has f32[]"));
  e = error_of([&] {
    while_loop([](const std::vector<Array>& c) { return c[1]; }, [](const std::vector<Array>& c) { return c; }, init);
  });
  EXPECT_THAT(e, HasSubstr("[while_loop] cond_fun must return a bool[] Array, found f32[2]"));
  e = error_of([&] {
    while_loop([](const std::vector<Array>& c) { return c[0] < 1.0f; },
               [](const std::vector<Array>& c) { return std::vector<Array>{c[0]}; }, init);
  });
  EXPECT_THAT(e, HasSubstr("[while_loop] body_fun returns a carry of structure"));
}

// h_{t+1} = tanh(h_t @ w + x_t): the recurrence of an RNN, with w closed over.
std::pair<Array, Array> rnn_step(const Array& h, const Array& x, const Array& w) {
  Array next = tanh(matmul(h, w) + x);
  return {next, next * 2.0f};
}

TEST(ScanTest, RecurrenceMatchesTheUnrolledLoopAndTheReference) {
  Array w = random_array({8, 8}, 1) * 0.5;
  Array xs = random_array({5, 3, 8}, 2);
  Array h0 = random_array({3, 8}, 3);
  auto f = [&](const Array& h, const Array& seq) {
    return scan([&](const Array& c, const Array& x) { return rnn_step(c, x, w); }, h, seq);
  };
  auto [h, ys] = f(h0, xs);
  Array hu = h0;
  std::vector<Array> rows;
  for (int t = 0; t < 5; ++t) {
    auto [next, y] = rnn_step(hu, row(xs, t), w);
    hu = next;
    rows.push_back(y);
  }
  expect_same_values(h, hu, 1e-6, 1e-6, "final carry");
  expect_same_values(ys, stack(rows, 0), 1e-6, 1e-6, "stacked ys");
  auto [hj, ysj] = jit(f)(h0, xs);
  expect_same_values(hj, hu, 1e-6, 1e-6, "jit final carry");
  expect_same_values(ysj, ys, 0, 0, "jit ys");
  std::vector<Buffer> ref = testing_util::reference(
      [&](const Array& a, const Array& b) {
        auto [c, y] = f(a, b);
        return std::vector<Array>{c, y};
      },
      h0, xs);
  ASSERT_EQ(ref.size(), 2u);
  testing_util::expect_allclose(h, ref[0].to_doubles(), 1e-5, 1e-6, "reference carry");
  testing_util::expect_allclose(ys, ref[1].to_doubles(), 1e-5, 1e-6, "reference ys");
}

TEST(ScanTest, ReverseAndPytreesAndCumulativeSums) {
  Array xs = random_array({6, 4}, 4);
  auto step = [](const Array& c, const Array& x) { return std::pair{c + x, c + x}; };
  auto [total, partial] = scan(step, zeros({4}), xs);
  expect_same_values(partial, cumsum(xs, 0), 1e-6, 1e-6, "forward");
  expect_same_values(total, sum(xs, {0}), 1e-6, 1e-6, "total");
  auto [rtotal, rpartial] = scan(step, zeros({4}), xs, {.reverse = true});
  expect_same_values(rpartial, cumsum(xs, 0, /*reverse=*/true), 1e-6, 1e-6, "reverse");
  // A dict carry and a tuple of xs; ys a tuple of two leaves of different dtypes.
  using Carry = std::map<std::string, Array>;
  Carry init{{"count", i32_scalar(0)}, {"sum", zeros({4})}};
  auto [c, ys] = scan(
      [](const Carry& c, const std::tuple<Array, Array>& x) {
        Carry next{{"count", c.at("count") + 1}, {"sum", c.at("sum") + std::get<0>(x) * std::get<1>(x)}};
        return std::pair{next, std::tuple<Array, Array>{next.at("count"), next.at("sum")}};
      },
      init, std::tuple<Array, Array>{xs, xs});
  EXPECT_EQ(c.at("count").item<int32_t>(), 6);
  expect_same_values(c.at("sum"), sum(xs * xs, {0}), 1e-6, 1e-6, "sum of squares");
  EXPECT_EQ(std::get<0>(ys).to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  expect_same_values(std::get<1>(ys), cumsum(xs * xs, 0), 1e-6, 1e-6, "stacked dict leaf");
}

TEST(ScanTest, ACarryPassedThroughIsNotOverwrittenInPlace) {
  // The loop returns x itself (zero iterations): the element-wise op after it must not write into x's
  // storage, which is the caller's argument.
  Array x = array(std::vector<float>{1, 2, 3}, {3});
  auto f = jit([](const Array& v) {
    Array same = while_loop([](const Array& c) { return sum(c, {0}) < 0.0f; }, [](const Array& c) { return c; }, v);
    return exp(same) + 1.0f;
  });
  Array y = f(x);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_NEAR(y.to_vector<float>()[0], std::exp(1.0f) + 1.0f, 1e-5);
  auto g = jit([](const Array& v) {
    auto [c, ys] = scan([](const Array& c, const Array&) { return std::pair{c, c}; }, v, zeros({2, 1}));
    return c * 2.0f + sum(ys, {0});
  });
  Array z = g(x);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{4, 8, 12}));
}

TEST(ScanTest, LengthWithoutXsZeroLengthAndMismatchedLeadingDims) {
  auto [c, ys] = scan([](const Array& c, const std::vector<Array>&) { return std::pair{c * 2.0f, c}; },
                      f32_scalar(1), std::vector<Array>{}, {.length = 4});
  EXPECT_EQ(c.item<float>(), 16.0f);
  EXPECT_EQ(ys.to_vector<float>(), (std::vector<float>{1, 2, 4, 8}));
  auto [c0, ys0] = scan([](const Array& c, const Array& x) { return std::pair{c + x, x}; }, zeros({2}), zeros({0, 2}));
  EXPECT_EQ(c0.to_vector<float>(), (std::vector<float>{0, 0}));
  EXPECT_EQ(ys0.dims(), (std::vector<int64_t>{0, 2}));
  std::string e = error_of([&] {
    scan([](const Array& c, const std::vector<Array>& x) { return std::pair{c + x[0] + x[1], c}; }, zeros({2}),
         std::vector<Array>{zeros({3, 2}), zeros({4, 2})});
  });
  EXPECT_THAT(e, HasSubstr("[scan] xs leaf [1] has leading dimension 4, expected 3"));
  e = error_of([&] { scan([](const Array& c, const std::vector<Array>&) { return std::pair{c, c}; }, zeros({2}), std::vector<Array>{}); });
  EXPECT_THAT(e, HasSubstr("the length must be given"));
  e = error_of([&] { scan([](const Array& c, const Array& x) { return std::pair{c + x, c}; }, zeros({2}), zeros({3, 2}), {.length = 5}); });
  EXPECT_THAT(e, HasSubstr("[scan] length is 5 but the xs have leading dimension 3"));
  e = error_of([&] { scan([](const Array& c, const Array& x) { return std::pair{sum(c + x, {0}), c}; }, zeros({2}), zeros({3, 2})); });
  EXPECT_THAT(e, HasSubstr("[scan] f returns carry leaf (the whole value) as f32[], the initial carry has f32[2]"));
}

TEST(ScanTest, NestedLoopsAndVmap) {
  // For each row x_t: inner fori_loop doubles the carry t+1 times... via a traced bound.
  Array xs = random_array({4, 3}, 5);
  auto f = [](const Array& xs) {
    return scan(
               [](const Array& c, const Array& x) {
                 Array inner = fori_loop(0, 3, [&](const Array&, const Array& v) { return v * 0.5f + x; }, c);
                 return std::pair{inner, sum(inner, {0})};
               },
               zeros({3}), xs)
        .second;
  };
  Array looped = jit(f)(xs);
  Array c = zeros({3});
  std::vector<Array> rows;
  for (int t = 0; t < 4; ++t) {
    for (int k = 0; k < 3; ++k) c = c * 0.5f + row(xs, t);
    rows.push_back(sum(c, {0}));
  }
  expect_same_values(looped, stack(rows, 0), 1e-6, 1e-6, "nested");
  // vmap over a batch of sequences equals the loop of single calls.
  Array batch = random_array({2, 4, 3}, 6);
  Array batched = vmap(f)(batch);
  expect_same_values(batched, stack(std::vector<Array>{f(row(batch, 0)), f(row(batch, 1))}, 0), 1e-6, 1e-6, "vmap");
}

TEST(ScanTest, TheSameScanTwiceGetsBothCotangents) {
  // Two identical scans (same body, same operands) are one sibling group in the program; the gradient
  // must count both uses, with and without jit's CSE.
  Array xs = random_array({4, 3}, 32);
  auto once = [&](const Array& h) {
    return sum(scan([](const Array& c, const Array& x) { return std::pair{tanh(c * x), c}; }, h, xs).first, {0});
  };
  auto twice = [&](const Array& h) { return once(h) + once(h); };
  Array h = random_array({3}, 33);
  expect_same_values(grad(twice)(h), 2.0f * grad(once)(h), 1e-6, 1e-7, "grad");
  expect_same_values(jit(grad(twice))(h), 2.0f * grad(once)(h), 1e-6, 1e-7, "jit(grad)");
}

TEST(ScanTest, RunsInAPartitionedJitOnShardedInputs) {
  // 4 devices, only the initial carry sharded (xs replicated): the result must equal the single-device one.
  // (control_flow_sharding_test.cc checks the partitioned structure.)
  Mesh mesh = make_mesh({4}, {"data"});
  Array xs = random_array({3, 8, 2}, 30);
  Array h0 = random_array({8, 2}, 31);
  auto f = [](const Array& h, const Array& seq) {
    return scan([](const Array& c, const Array& x) { return std::pair{tanh(c + x), c * 2.0f}; }, h, seq).first * 3.0f;
  };
  Array want = f(h0, xs);
  Array sharded = device_put(h0, NamedSharding(mesh, P("data")));
  Array got = jit(f)(sharded, xs);
  expect_same_values(got, want, 1e-6, 1e-6, "partitioned scan");
}

TEST(ControlFlowVmapTest, VectorisedLoopsEqualTheLoopOfSingleCalls) {
  // Per example: a scan over its own sequence, a while loop with its own trip count (x doubles until it
  // passes its own limit) and a cond on its own predicate; batched as one op each, not unrolled.
  auto f = [](const Array& x, const Array& seq, const Array& limit) {
    Array s = scan([](const Array& c, const Array& r) { return std::pair{c * 0.5f + r, c}; }, x, seq).first;
    Array w = while_loop([&](const Array& v) { return sum(v, {0}) < limit; }, [](const Array& v) { return v * 2.0f; },
                         abs(s) + 0.1f);
    return cond(sum(w, {0}) > 50.0f, [](const Array& v) { return v - 50.0f; }, [](const Array& v) { return -v; }, w);
  };
  Array xs = random_array({5, 3}, 40);
  Array seqs = random_array({5, 4, 3}, 41);
  Array limits = array(std::vector<float>{1, 10, 100, 1000, 3}, {5});
  Array batched = vmap(f)(xs, seqs, limits);
  std::vector<Array> rows;
  for (int64_t i = 0; i < 5; ++i) rows.push_back(f(row(xs, i), row(seqs, i), row(limits, i)));
  expect_same_values(batched, stack(rows, 0), 1e-6, 1e-6, "vmap");
  ir::Program p = trace(vmap(f), xs, seqs, limits);
  EXPECT_EQ(count_ops(p, ir::OpKind::kWhile), 1) << ir::print_program(p);  // one loop for the batch
  // The same with some arguments unbatched (in_axes None): a shared sequence and limit.
  Array shared = vmap([&](const Array& x) { return f(x, row(seqs, 0), row(limits, 2)); })(xs);
  std::vector<Array> rows2;
  for (int64_t i = 0; i < 5; ++i) rows2.push_back(f(row(xs, i), row(seqs, 0), row(limits, 2)));
  expect_same_values(shared, stack(rows2, 0), 1e-6, 1e-6, "vmap, shared operands");
  // A batched index of switch_: every branch runs, each element takes its own branch's result.
  std::vector<std::function<Array(const Array&)>> branches{[](const Array& v) { return v + 1.0f; },
                                                           [](const Array& v) { return v * 10.0f; }};
  Array idx = array(std::vector<int32_t>{0, 1, 5, -1, 1}, {5});
  Array sw = vmap([&](const Array& i, const Array& v) { return switch_<Array, Array>(i, branches, v); })(idx, xs);
  std::vector<Array> rows3;
  for (int64_t i = 0; i < 5; ++i) rows3.push_back(switch_<Array, Array>(row(idx, i), branches, row(xs, i)));
  expect_same_values(sw, stack(rows3, 0), 1e-6, 1e-6, "vmap of switch with a batched index");
}

TEST(CondTest, RunsOnlyTheChosenBranchEagerlyAndUnderJit) {
  auto f = [](const Array& p, const Array& x) {
    return cond(p, [](const Array& v) { return v * 2.0f; }, [](const Array& v) { return v - 1.0f; }, x);
  };
  Array x = array(std::vector<float>{1, 2, 3}, {3});
  EXPECT_EQ(f(Array(true), x).to_vector<float>(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(f(Array(false), x).to_vector<float>(), (std::vector<float>{0, 1, 2}));
  auto jf = jit(f);
  EXPECT_EQ(jf(Array(true), x).to_vector<float>(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(jf(Array(false), x).to_vector<float>(), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(jf.cache_size(), 1);
  // A branch that would fail at run time is not run: 1/0 in integers is defined, so use a take that
  // clamps; the visible check is that the false branch's result is not the true one's.
  EXPECT_THAT(error_of([&] { f(x, x); }), HasSubstr("[cond] the predicate must be a bool[] Array, found f32[3]"));
}

TEST(SwitchTest, ClampsTheIndexAndChecksTheBranchTypes) {
  std::vector<std::function<Array(const Array&)>> branches{
      [](const Array& v) { return v + 1.0f; }, [](const Array& v) { return v * 10.0f; },
      [](const Array& v) { return -v; }};
  Array x = f32_scalar(3);
  auto run = [&](int32_t i) { return switch_<Array, Array>(i32_scalar(i), branches, x).item<float>(); };
  EXPECT_EQ(run(0), 4.0f);
  EXPECT_EQ(run(1), 30.0f);
  EXPECT_EQ(run(2), -3.0f);
  EXPECT_EQ(run(-5), 4.0f);  // clamped as jax.lax.switch
  EXPECT_EQ(run(9), -3.0f);
  Array huge(Buffer::scalar<int64_t>(int64_t{1} << 40));
  EXPECT_EQ((switch_<Array, Array>(huge, branches, x).item<float>()), -3.0f);
  std::vector<std::function<Array(const Array&)>> bad{[](const Array& v) { return v; },
                                                       [](const Array& v) { return astype(v, DType::kInt32); }};
  EXPECT_THAT(error_of([&] { switch_<Array, Array>(i32_scalar(0), bad, x); }),
              HasSubstr("[switch] branch 1 returns result leaf (the whole value) as i32[], branch 0 has f32[]"));
  EXPECT_THAT(error_of([&] { switch_<Array, Array>(f32_scalar(0), branches, x); }),
              HasSubstr("[switch] the index must be an integer scalar Array, found f32[]"));
}

TEST(ControlFlowAutodiffTest, GradientOfAForiLoopIsTheClosedForm) {
  auto loss = [](const Array& x) { return fori_loop(0, 3, [](const Array&, const Array& v) { return v * v; }, x); };
  // x^8: d/dx = 8 x^7; d2/dx2 = 56 x^6.
  EXPECT_FLOAT_EQ(grad(loss)(f32_scalar(1.5f)).item<float>(), 8 * std::pow(1.5f, 7));
  EXPECT_FLOAT_EQ(jit(grad(loss))(f32_scalar(0.5f)).item<float>(), 8 * std::pow(0.5f, 7));
  EXPECT_NEAR(grad(grad(loss))(f32_scalar(1.25f)).item<float>(), 56 * std::pow(1.25f, 6), 1e-3);
}

// loss(w, h0, xs) = sum(h_T^2) + sum(ys) of the RNN recurrence, as a scan and unrolled.
Array rnn_loss(const Array& w, const Array& h0, const Array& xs, bool use_scan, bool reverse = false) {
  if (use_scan) {
    auto [h, ys] = scan([&](const Array& c, const Array& x) { return rnn_step(c, x, w); }, h0, xs, {.reverse = reverse});
    return sum(h * h) + sum(ys);
  }
  Array h = h0;
  Array total = f32_scalar(0);
  const int64_t n = xs.dim(0);
  for (int64_t i = 0; i < n; ++i) {
    auto [next, y] = rnn_step(h, row(xs, reverse ? n - 1 - i : i), w);
    h = next;
    total = total + sum(y);
  }
  return sum(h * h) + total;
}

TEST(ControlFlowAutodiffTest, ScanGradientsMatchTheUnrolledLoopForCarriesXsAndConstants) {
  Array w = random_array({4, 4}, 11) * 0.5;
  Array h0 = random_array({2, 4}, 12);
  Array xs = random_array({6, 2, 4}, 13);
  for (bool reverse : {false, true}) {
    auto looped = grad([&](const Array& w, const Array& h, const Array& x) { return rnn_loss(w, h, x, true, reverse); },
                       argnums<0, 1, 2>)(w, h0, xs);
    auto unrolled = grad([&](const Array& w, const Array& h, const Array& x) { return rnn_loss(w, h, x, false, reverse); },
                         argnums<0, 1, 2>)(w, h0, xs);
    expect_same_values(std::get<0>(looped), std::get<0>(unrolled), 1e-5, 1e-6, "d/dw (a closed-over constant)");
    expect_same_values(std::get<1>(looped), std::get<1>(unrolled), 1e-5, 1e-6, "d/dh0 (the initial carry)");
    expect_same_values(std::get<2>(looped), std::get<2>(unrolled), 1e-5, 1e-6, "d/dxs (the scanned array)");
  }
  // The gradient program holds one forward and one backward scan, not the unrolled iterations.
  ir::Program g = trace(grad([&](const Array& w) { return rnn_loss(w, h0, xs, true); }), w);
  EXPECT_EQ(count_ops(g, ir::OpKind::kDotGeneral), 0) << ir::print_program(g);
}

TEST(ControlFlowAutodiffTest, ForwardModeMatchesReverseModeAndTheClosedForm) {
  auto loss = [](const Array& x) { return fori_loop(0, 3, [](const Array&, const Array& v) { return v * v; }, x); };
  auto [y, y_dot] = jvp(loss, std::tuple{f32_scalar(1.5f)}, std::tuple{f32_scalar(2.0f)});
  EXPECT_FLOAT_EQ(y.item<float>(), std::pow(1.5f, 8));
  EXPECT_FLOAT_EQ(y_dot.item<float>(), 2 * 8 * std::pow(1.5f, 7));
  // The RNN loss: jacfwd (one JVP scan per basis vector, batched) equals grad (the backward scan), and
  // linearize (the JVP scan split from the primal scan) gives the same directional derivative.
  Array h0 = random_array({2, 4}, 14);
  Array xs = random_array({5, 2, 4}, 15);
  auto of_w = [&](const Array& w) { return rnn_loss(w, h0, xs, true); };
  Array w = random_array({4, 4}, 16) * 0.5;
  expect_same_values(jacfwd(of_w)(w), grad(of_w)(w), 1e-4, 1e-5, "jacfwd vs grad");
  Array dw = random_array({4, 4}, 17);
  auto [primal, f_lin] = linearize(of_w, w);
  EXPECT_NEAR(f_lin(dw).item<float>(), sum(grad(of_w)(w) * dw).item<float>(), 1e-4);
  EXPECT_NEAR(primal.item<float>(), of_w(w).item<float>(), 1e-6);
  // Hessian (forward over reverse: a JVP scan of the backward scan) equals that of the unrolled loss.
  auto small = [&](const Array& v) { return rnn_loss(reshape(v, {2, 2}), zeros({1, 2}) + 0.3f, random_array({3, 1, 2}, 18), true); };
  auto small_unrolled = [&](const Array& v) {
    return rnn_loss(reshape(v, {2, 2}), zeros({1, 2}) + 0.3f, random_array({3, 1, 2}, 18), false);
  };
  Array v = random_array({4}, 19);
  expect_same_values(hessian(small)(v), hessian(small_unrolled)(v), 1e-4, 1e-5, "hessian");
}

TEST(ControlFlowAutodiffTest, CondDifferentiatesTheChosenBranchInBothModes) {
  Array w = random_array({3}, 20);
  // true: sum(sin(x) * w); false: sum(x^3) (w closed over by one branch only: a branch constant).
  auto f = [&](const Array& x, const Array& p) {
    return cond(p, [&](const Array& v) { return sum(sin(v) * w); }, [](const Array& v) { return sum(v * v * v); }, x);
  };
  Array x = random_array({3}, 21);
  for (bool p : {true, false}) {
    Array g = grad(f)(x, Array(p));
    Array want = p ? cos(x) * w : x * x * 3.0f;
    expect_same_values(g, want, 1e-6, 1e-6, p ? "grad, true branch" : "grad, false branch");
    expect_same_values(jit(grad(f))(x, Array(p)), want, 1e-6, 1e-6, "jit(grad)");
    auto [y, y_dot] = jvp([&](const Array& v) { return f(v, Array(p)); }, std::tuple{x}, std::tuple{ones_like(x)});
    EXPECT_NEAR(y_dot.item<float>(), sum(want).item<float>(), 1e-5);
  }
  // The gradient with respect to the constant only one branch reads: zero when the other branch runs.
  auto of_w = [&](const Array& wv, const Array& p) {
    return cond(p, [&](const Array& v) { return sum(sin(v) * wv); }, [](const Array& v) { return sum(v); }, x);
  };
  expect_same_values(grad(of_w)(w, Array(true)), sin(x), 1e-6, 1e-6, "d/dw, true");
  EXPECT_EQ(grad(of_w)(w, Array(false)).to_vector<float>(), (std::vector<float>{0, 0, 0}));
}

TEST(ControlFlowAutodiffTest, WhileLoopsDifferentiateInForwardModeOnly) {
  auto wloss = [](const Array& x) {
    return while_loop([](const Array& v) { return v < 10.0f; }, [](const Array& v) { return v * 2.0f; }, x);
  };
  EXPECT_THAT(error_of([&] { grad(wloss)(f32_scalar(2)); }),
              HasSubstr("reverse-mode differentiation does not work for while loops"));
  // Forward mode works (as in JAX): 2 -> 16 in three doublings, so d/dx = 8.
  auto [y, y_dot] = jvp(wloss, std::tuple{f32_scalar(2)}, std::tuple{f32_scalar(1)});
  EXPECT_EQ(y.item<float>(), 16.0f);
  EXPECT_EQ(y_dot.item<float>(), 8.0f);
  EXPECT_EQ(jacfwd(wloss)(f32_scalar(3)).item<float>(), 4.0f);  // 3 -> 12 in two doublings
  // A closed-over constant's tangent flows through the body: v <- v * k.
  auto with_k = [](const Array& k) {
    return while_loop([](const Array& v) { return v < 100.0f; }, [&](const Array& v) { return v * k; }, f32_scalar(1));
  };
  auto [yk, yk_dot] = jvp(with_k, std::tuple{f32_scalar(3)}, std::tuple{f32_scalar(1)});
  EXPECT_EQ(yk.item<float>(), 243.0f);        // 3^5
  EXPECT_EQ(yk_dot.item<float>(), 5 * 81.0f);  // d/dk k^5 at the fixed trip count
  // A loop that does not depend on the differentiated input is fine.
  auto g = grad([](const Array& x) {
    Array n = fori_loop(0, 4, [](const Array& i, const Array& acc) { return acc + i; }, i32_scalar(0));
    return x * astype(n, DType::kFloat32);
  })(f32_scalar(1));
  EXPECT_EQ(g.item<float>(), 6.0f);
}

TEST(ControlFlowTextTest, TracedLoopsPrintAndParseBack) {
  Array w = random_array({3, 3}, 7);
  auto f = [&](const Array& h, const Array& xs, const Array& p) {
    auto [c, ys] = scan([&](const Array& c, const Array& x) { return rnn_step(c, x, w); }, h, xs);
    Array d = cond(p, [](const Array& v) { return v + 1.0f; }, [](const Array& v) { return v; }, c);
    return while_loop([](const Array& v) { return sum(v, {0, 1}) < 100.0f; }, [](const Array& v) { return v + 1.0f; },
                      d) + sum(ys, {0});
  };
  ir::Program p = trace(f, random_array({2, 3}, 8), random_array({4, 2, 3}, 9), Array(true));
  std::string text = ir::print_program(p);
  EXPECT_THAT(text, HasSubstr("= scan("));
  EXPECT_THAT(text, HasSubstr("regions=[program @f("));
  auto back = ir::parse_program(text);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << text;
  EXPECT_TRUE(ir::structurally_equal(*back, p));
  EXPECT_EQ(ir::print_program(*back), text);
}

TEST(ControlFlowTextTest, HostileNestingIsAnErrorNotAStackOverflow) {
  std::string text;
  for (int i = 0; i < 100000; ++i) text += "program @p(%0: f32[]) -> (f32[]) { %1 = scan(%0) {regions=[";
  auto r = ir::parse_program(text);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("at most 64 nested programs"));
}

TEST(ControlFlowTextTest, NestedLoopsPrintInLinearSizeAndKeepTheirSharing) {
  // Each fori_loop has two results (counter and value), so each level's body is held by two siblings.
  std::function<Array(int, const Array&)> nest = [&](int depth, const Array& x) -> Array {
    if (depth == 0) return x + 1.0f;
    return fori_loop(0, 2, [&](const Array&, const Array& v) { return nest(depth - 1, v); }, x);
  };
  ir::Program p = trace([&](const Array& x) { return nest(12, x); }, zeros({2}));
  std::string text = ir::print_program(p);
  EXPECT_LT(text.size(), 20000u);  // a full copy per sibling would be 2^12 bodies
  EXPECT_THAT(text, HasSubstr("regions=like %"));
  auto back = ir::parse_program(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ir::print_program(*back), text);
  EXPECT_EQ(jit([&](const Array& x) { return nest(12, x); })(zeros({2})).to_vector<float>(),
            (std::vector<float>{4096, 4096}));
}

}  // namespace
}  // namespace mcx
