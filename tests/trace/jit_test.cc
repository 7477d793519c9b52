#include <atomic>
#include <thread>

#include "gmock/gmock.h"
#include "mcx/ir/text.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::error_of;
using testing_util::expect_allclose;

enum class Act { kRelu, kTanh };

TEST(JitTest, CacheHitsAndMissesByShapeDtypeAndStaticArgs) {
  std::atomic<int> traces{0};
  auto f = jit(
      [&](const Array& x, double scale, Act act, const std::string& tag) {
        ++traces;
        Array y = act == Act::kRelu ? relu(x) : tanh(x);
        return tag == "neg" ? -y * scale : y * scale;
      },
      {.name = "f"});
  Array x = array<float>({-1, 2}, {2});
  expect_allclose(f(x, 2.0, Act::kRelu, "pos"), {0, 4});
  expect_allclose(f(x, 2.0, Act::kRelu, "pos"), {0, 4});
  EXPECT_EQ(traces.load(), 1);
  EXPECT_EQ(f.cache_stats().hits, 1);
  expect_allclose(f(array<float>({3, -3}, {2}), 2.0, Act::kRelu, "pos"), {6, 0});  // same signature
  EXPECT_EQ(traces.load(), 1);
  expect_allclose(f(x, 3.0, Act::kRelu, "pos"), {0, 6});  // static double changed
  expect_allclose(f(x, 3.0, Act::kTanh, "pos"), {3 * std::tanh(-1.0), 3 * std::tanh(2.0)});  // enum
  expect_allclose(f(x, 3.0, Act::kTanh, "neg"), {-3 * std::tanh(-1.0), -3 * std::tanh(2.0)});  // string
  EXPECT_EQ(traces.load(), 4);
  f(array<float>({1, 2, 3}, {3}), 3.0, Act::kTanh, "neg");  // shape
  f(array<double>({1, 2}, {2}), 3.0, Act::kTanh, "neg");    // dtype
  EXPECT_EQ(traces.load(), 6);
  EXPECT_EQ(f.cache_size(), 6);
  EXPECT_EQ(f.cache_stats().misses, 6);
  auto copy = f;  // copies share the cache
  copy(x, 2.0, Act::kRelu, "pos");
  EXPECT_EQ(traces.load(), 6);
  f.clear_cache();
  EXPECT_EQ(f.cache_size(), 0);
}

TEST(JitTest, PytreeArgumentsAndResults) {
  auto f = jit([](const Tree& p, const std::vector<Array>& xs) {
    Array s = p.at("w").array() * xs[0] + p.at("b").array();
    return std::make_tuple(s, Tree(Tree::Dict{{"double", s * 2.0}, {"xs", Tree::List{xs[1]}}}));
  });
  Tree p = Tree::Dict{{"w", array<float>({2}, {1})}, {"b", array<float>({1}, {1})}};
  auto [s, t] = f(p, std::vector<Array>{array<float>({3}, {1}), array({5})});
  expect_allclose(s, {7});
  expect_allclose(t.at("double"), {14});
  expect_allclose(t.at("xs").at(0), {5});
  EXPECT_EQ(t.at("xs").at(0).array().dtype(), DType::kInt32);
  // A different tree structure is a new signature.
  Tree p2 = Tree::Dict{{"w", array<float>({2}, {1})}, {"b", array<float>({1}, {1})}, {"unused", Array(1.0f)}};
  f(p2, std::vector<Array>{array<float>({3}, {1}), array({5})});
  EXPECT_EQ(f.cache_size(), 2);
}

TEST(JitTest, CapturedConcreteArraysBecomeConstants) {
  Array w = array<float>({1, 2, 3}, {3});
  auto f = jit([&](const Array& x) { return sum(w * x); });
  expect_allclose(f(ones({3})), {6});
  ir::Program p = f.lower(ones({3}));
  EXPECT_EQ(p.num_params(), 1);
  EXPECT_THAT(ir::print_program(p), HasSubstr("constant()"));
}

TEST(JitTest, WeakTypesSurviveJit) {
  auto f = jit([](const Array& x) { return x * 2; });
  EXPECT_TRUE(f(Array(3)).weak_type());
  EXPECT_EQ((f(Array(3)) + array<uint8_t>({1}, {1})).dtype(), DType::kUInt8);
}

TEST(JitTest, ConcretizationErrorInIf) {
  auto f = jit(
      [](const Array& x) {
        if (x.item<float>() > 0) return x;  // reads a traced value
        return -x;
      },
      {.name = "loss"});
  std::string msg = error_of([&] { f(Array(1.0f)); });
  EXPECT_THAT(msg, HasSubstr("[item] abstract tracer value encountered where a concrete value is expected: "
                             "f32[] traced in jit of 'loss'"));
  EXPECT_THAT(msg, HasSubstr("mcx::where"));
  auto g = jit([](const Array& x) { return (x > 0) ? x : -x; }, {.name = "g"});
  EXPECT_THROW(g(Array(1.0f)), ConcretizationError);
  EXPECT_THAT(error_of([&] { g(Array(1.0f)); }), HasSubstr("[bool] abstract tracer value"));
  // Eagerly the same code works.
  EXPECT_EQ(((Array(1.0f) > 0) ? Array(1.0f) : Array(2.0f)).item<float>(), 1.0f);
}

TEST(JitTest, ShapeErrorsNameTheTracedFunction) {
  auto mm = jit([](const Array& a, const Array& b) { return matmul(a, b); }, {.name = "mm"});
  const std::string msg = error_of([&] { mm(zeros({2, 3}, DType::kFloat32), zeros({4, 5}, DType::kFloat32)); });
  EXPECT_THAT(msg, HasSubstr("(traced in jit of 'mm' on args[0]: f32[2,3], args[1]: f32[4,5])"));
  EXPECT_THAT(msg, HasSubstr("3"));
  // Nested traces: the innermost names itself, once (a jit called inside a trace is inlined into it).
  auto outer = jit([&](const Array& a, const Array& b) { return grad([&](const Array& x) { return sum(mm(x, b)); })(a); },
                   {.name = "outer"});
  const std::string nested = error_of([&] { outer(zeros({2, 3}, DType::kFloat32), zeros({4, 5}, DType::kFloat32)); });
  EXPECT_THAT(nested, HasSubstr("(traced in grad of "));
  EXPECT_THAT(nested, Not(HasSubstr("(traced in jit of 'outer'")));
  // Eager errors stay as they were.
  EXPECT_THAT(error_of([&] { matmul(zeros({2, 3}, DType::kFloat32), zeros({4, 5}, DType::kFloat32)); }),
              Not(HasSubstr("traced in")));
}

TEST(JitTest, LeakedTracerIsReported) {
  Array leaked;
  auto f = jit(
      [&](const Array& x) {
        leaked = x * 2.0;
        return x;
      },
      {.name = "leaky"});
  f(ones({2}));
  EXPECT_TRUE(leaked.is_tracer());
  std::string msg = error_of([&] { (void)(leaked + 1.0); });
  EXPECT_THAT(msg, HasSubstr("escaped tracer"));
  EXPECT_THAT(msg, HasSubstr("jit of 'leaky'"));
  EXPECT_THAT(error_of([&] { (void)leaked.to_host(); }), HasSubstr("escaped tracer"));
  EXPECT_THAT(error_of([&] { (void)jit([](const Array& a) { return a; })(leaked); }), HasSubstr("escaped tracer"));
}

TEST(JitTest, NestedJitIsInlined) {
  auto inner = jit([](const Array& x) { return exp(x) + 1.0; }, {.name = "inner"});
  auto outer = jit([&](const Array& x) { return inner(x) * inner(x * 2.0); }, {.name = "outer"});
  Array x = array<float>({0.5, -0.25}, {2});
  expect_allclose(outer(x), {(std::exp(0.5) + 1) * (std::exp(1.0) + 1), (std::exp(-0.25) + 1) * (std::exp(-0.5) + 1)});
  EXPECT_EQ(inner.cache_size(), 0) << "calls inside a trace are inlined, not compiled separately";
  std::string text = ir::print_program(outer.lower(x));
  EXPECT_THAT(text, HasSubstr("exp("));
}

TEST(JitTest, OptimizedProgramHasNoDuplicatesOrDeadCode) {
  auto f = jit([](const Array& x) {
    Array unused = sin(x);
    (void)unused;
    return exp(x) + exp(x);
  });
  ir::Program p = f.lower(ones({4}));
  int exps = 0, sins = 0;
  for (const ir::Instr& in : p.instrs) {
    exps += in.kind == ir::OpKind::kExp;
    sins += in.kind == ir::OpKind::kSin;
  }
  EXPECT_EQ(exps, 1);
  EXPECT_EQ(sins, 0);
}

TEST(JitTest, ConcurrentCallsFromFourThreads) {
  auto f = jit([](const Array& x, const Array& w) { return tanh(matmul(x, w)) * 0.5; }, {.name = "layer"});
  Array w = array<float>({0.1, -0.2, 0.3, 0.4, 0.5, -0.6}, {3, 2});
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        int rows = 1 + (i + t) % 3;  // three signatures, traced concurrently
        std::vector<float> xv(rows * 3, static_cast<float>(t + 1));
        Array y = f(array(xv, {rows, 3}), w);
        std::vector<float> got = y.to_vector<float>();
        float e0 = 0.5f * std::tanh((t + 1) * (0.1f + 0.3f + 0.5f));
        if (got.size() != static_cast<size_t>(rows * 2) || std::fabs(got[0] - e0) > 1e-5) ++failures;
        // Eager ops and grads concurrently too.
        Array g = grad([](const Array& a) { return sum(a * a); })(array(xv, {rows, 3}));
        if (std::fabs(g.to_vector<float>()[0] - 2.0f * (t + 1)) > 1e-5) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(f.cache_size(), 3);
}

TEST(JitTest, TraceWithSymbolicShapesPrintsProgram) {
  auto mlp = [](const Array& x, const Array& w) { return sum(relu(matmul(x, w)), 1); };
  AbstractValue x{DType::kFloat32, symbolic_shape("b, 784")};
  AbstractValue w{DType::kFloat32, symbolic_shape("784, 10")};
  ir::Program p = trace(mlp, x, w);
  std::string text = ir::print_program(p);
  EXPECT_THAT(text, HasSubstr("f32[b,784]"));
  EXPECT_THAT(text, HasSubstr("f32[b,10]"));
  EXPECT_EQ(p.result_types()[0].to_string(), "f32[b]");
  // With a scope, and a mean over the symbolic dim (staged count).
  SymbolicScope scope = value_or_throw(SymbolicScope::create({"b >= 16"}));
  ir::Program q = trace([](const Array& a) { return mean(a, 0); }, scope, x);
  EXPECT_EQ(q.result_types()[0].to_string(), "f32[784]");
  EXPECT_THAT(ir::print_program(q), HasSubstr("b >= 16"));
  // Shape errors while tracing symbolic shapes name the op and the symbolic dims.
  EXPECT_THAT(error_of([&] { (void)trace([](const Array& a) { return a + ones({3}); }, x); }),
              HasSubstr("[add] shapes [b,784] and [3] cannot be broadcast: dimension 1 is 784 vs 3"));
}

// eval_shape: result types and structure (symbolic dims kept) without computing; shape errors name the op and
// the eval_shape trace.
TEST(JitTest, EvalShapeGivesTypesAndStructureWithoutComputing) {
  auto layer = [](const Tree& p, const Array& x) {
    Array h = matmul(x, p.at("w")) + p.at("b");
    return std::make_tuple(h, argmax(h, 1), Tree{{"mean", mean(h)}});
  };
  Tree params{{"w", zeros(concrete_shape({784, 10}))}, {"b", zeros(concrete_shape({10}))}};
  AbstractValue x{DType::kFloat32, symbolic_shape("b, 784")};
  ShapeResult r = eval_shape(layer, params, x);
  ASSERT_EQ(r.leaves.size(), 3u);
  EXPECT_EQ(r.to_string(), "(f32[b,10], i32[b], f32[])");
  EXPECT_EQ(r.tree.kind(), TreeDef::Kind::kTuple);
  EXPECT_EQ(r.tree.children()[2].keys(), std::vector<std::string>{"mean"});
  EXPECT_EQ(eval_shape([](const Array& a) { return a * 2; }, ones({2, 3})).to_string(), "f32[2,3]");
  EXPECT_THAT(error_of([&] { (void)eval_shape([](const Array& a) { return a + ones({3}); }, x); }),
              HasSubstr("[add] shapes [b,784] and [3] cannot be broadcast: dimension 1 is 784 vs 3 (traced in "
                        "eval_shape of 'main' on args[0]: f32[b,784])"));
  // Pytree arguments are named by their paths.
  EXPECT_THAT(error_of([&] { (void)eval_shape([](const Tree& p, const Array& a) { return matmul(a, p.at("w")) + p.at("b"); },
                                              params, ones({2, 5})); }),
              HasSubstr("on args[0]['b']: f32[10], args[0]['w']: f32[784,10], args[1]: f32[2,5])"));
}

}  // namespace
}  // namespace mcx
