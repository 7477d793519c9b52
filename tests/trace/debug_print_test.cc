// debug_print: lines printed when the computation runs (eagerly, under jit at every call, in program order),
// under grad/jvp/linearize/vjp (the primal values, once), vmap (the batched values), on a mesh (once, the
// global values) and in a shard_map body (every device its own); kept by the passes; format errors.
#include <mutex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/ir/passes.h"
#include "mcx/mcx.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using testing_util::error_of;

// Captures the lines printed while it lives.
class CapturedLines {
 public:
  CapturedLines() {
    previous_ = set_debug_print_sink([this](std::string_view line) { lines_.emplace_back(line); });
  }
  ~CapturedLines() { set_debug_print_sink(previous_); }
  // The lines so far, after every pending computation has run.
  std::vector<std::string> lines(const Array& wait_for) {
    wait_for.block_until_ready();
    return take();
  }
  std::vector<std::string> take() {
    set_debug_print_sink([this](std::string_view line) { lines_.emplace_back(line); });  // a barrier on the lock
    std::vector<std::string> out = std::move(lines_);
    lines_.clear();
    return out;
  }

 private:
  DebugPrintSink previous_;
  std::vector<std::string> lines_;  // written under the sink's lock
};

Array vec(std::vector<float> v) { return Array(Buffer::from_vector<float>(v, {static_cast<int64_t>(v.size())})); }

TEST(DebugPrint, EagerAndJitPrintTheValuesAtEveryCallInProgramOrder) {
  CapturedLines out;
  Array x = vec({1, 2, 3});
  debug_print("x = {}", x);
  EXPECT_THAT(out.lines(x + 0.0f), ElementsAre("x = [1, 2, 3]"));
  int traces = 0;
  auto f = jit([&](const Array& a) {
    ++traces;
    Array y = a * 2.0f;
    debug_print("first {}", y);
    debug_print("then {} and {{literal}} {}", sum(y), slice(a, {0}, {1}));
    debug_print("first {}", y);  // the same print twice is not merged
    return y;
  });
  Array r = f(x);
  EXPECT_THAT(out.lines(r), ElementsAre("first [2, 4, 6]", "then 12 and {literal} [1]", "first [2, 4, 6]"));
  r = f(vec({0, 1, 0}));
  EXPECT_THAT(out.lines(r), ElementsAre("first [0, 2, 0]", "then 2 and {literal} [0]", "first [0, 2, 0]"));
  EXPECT_EQ(traces, 1) << "printed at run time, not while tracing";
}

TEST(DebugPrint, TheOnlyEffectOfAFunctionIsKept) {
  CapturedLines out;
  auto f = jit([](const Array& a) {
    debug_print("unused {}", exp(a));  // its value reaches no result
    return a;
  });
  Array r = f(Array(0.0f));
  EXPECT_THAT(out.lines(r), ElementsAre("unused 1"));
  const ir::Program p = trace([](const Array& a) {
    debug_print("{}", a);
    return a;
  }, Array(1.0f));
  EXPECT_EQ(ir::eliminate_common_subexpressions(p).instrs.size(), 1u);
  EXPECT_EQ(ir::drop_side_effects(p).instrs.size(), 0u);
}

TEST(DebugPrint, AutodiffPrintsThePrimalValuesOnce) {
  CapturedLines out;
  auto f = [](const Array& a) {
    debug_print("a = {}", a);
    return sum(a * a);
  };
  Array x = vec({1, 2});
  Array g = grad(f)(x);
  EXPECT_THAT(out.lines(g), ElementsAre("a = [1, 2]"));
  g = jit(grad(f))(x);
  EXPECT_THAT(out.lines(g), ElementsAre("a = [1, 2]"));
  auto [y, t] = jvp(f, std::tuple{x}, std::tuple{vec({1, 0})});
  EXPECT_THAT(out.lines(t), ElementsAre("a = [1, 2]"));
  auto [value, lin] = linearize(f, x);
  EXPECT_THAT(out.lines(value), ElementsAre("a = [1, 2]"));
  Array tangent = lin(vec({0, 1}));
  EXPECT_THAT(out.lines(tangent), ElementsAre()) << "the linear part prints nothing";
  auto [v2, pullback] = vjp(f, x);
  EXPECT_THAT(out.lines(v2), ElementsAre("a = [1, 2]"));
  Array ct = pullback(Array(1.0f));
  EXPECT_THAT(out.lines(ct), ElementsAre()) << "the pullback does not print the forward again";
}

TEST(DebugPrint, VmapPrintsTheBatchedValuesOnce) {
  CapturedLines out;
  auto f = vmap([](const Array& a, const Array& s) {
    debug_print("row {} scale {}", a, s);
    return a * s;
  }, {.in_axes = {0, std::nullopt}});
  Array r = f(Array(Buffer::from_vector<float>({1, 2, 3, 4}, {2, 2})), Array(10.0f));
  EXPECT_THAT(out.lines(r), ElementsAre("row [[1, 2], [3, 4]] scale 10"));
}

TEST(DebugPrint, OnAMeshOnceAndInAShardMapBodyOnEveryDevice) {
  CapturedLines out;
  Mesh mesh = make_mesh({4}, {"data"});
  Array x = device_put(vec({0, 1, 2, 3, 4, 5, 6, 7}), NamedSharding(mesh, P("data")));
  auto f = jit([](const Array& a) {
    debug_print("global {}", a);
    return a + 1.0f;
  });
  Array r = f(x);
  EXPECT_THAT(out.lines(r), ElementsAre("global [0, 1, 2, 3, 4, 5, 6, 7]"));
  auto local = shard_map([](const Array& a) {
    debug_print("device {} has {}", axis_index("data"), a);
    return a;
  }, mesh, {P("data")}, {P("data")});
  Array l = local(x);
  EXPECT_THAT(out.lines(l), UnorderedElementsAre("device 0 has [0, 1]", "device 1 has [2, 3]", "device 2 has [4, 5]",
                                                 "device 3 has [6, 7]"));
  Array j = jit([&](const Array& a) { return local(a * 10.0f); })(x);
  EXPECT_THAT(out.lines(j), UnorderedElementsAre("device 0 has [0, 10]", "device 1 has [20, 30]",
                                                 "device 2 has [40, 50]", "device 3 has [60, 70]"));
}

TEST(DebugPrint, InsideLoopsEveryIterationPrints) {
  CapturedLines out;
  Array r = jit([](const Array& a) {
    return fori_loop(0, 3, [](const Array& i, const Array& c) {
      debug_print("step {} carry {}", i, c);
      return c * 2.0f;
    }, a);
  })(Array(1.0f));
  EXPECT_THAT(out.lines(r), ElementsAre("step 0 carry 1", "step 1 carry 2", "step 2 carry 4"));
}

// A loop's body prints once per iteration under every transformation: the backward and tangent bodies
// (which recompute the forward body) print nothing; a loop whose only effect is printing is kept.
TEST(DebugPrint, LoopsPrintOncePerIterationUnderAutodiff) {
  CapturedLines out;
  auto f = [](const Array& a) {
    return fori_loop(0, 2, [](const Array& /*i*/, const Array& c) {
      debug_print("carry {}", c);
      return c * c;
    }, a);
  };
  const std::vector<std::string> twice = {"carry 3", "carry 9"};
  Array g = grad(f)(Array(3.0f));
  EXPECT_EQ(out.lines(g), twice) << "grad";
  g = jit(grad(f))(Array(3.0f));
  EXPECT_EQ(out.lines(g), twice) << "jit(grad)";
  auto [y, t] = jvp(f, std::tuple{Array(3.0f)}, std::tuple{Array(1.0f)});
  EXPECT_EQ(out.lines(t), twice) << "jvp";
  auto [value, lin] = linearize(f, Array(3.0f));
  EXPECT_EQ(out.lines(value), twice) << "linearize";
  EXPECT_EQ(out.lines(lin(Array(1.0f))), std::vector<std::string>{}) << "the linear part";
  auto sm = shard_map([](const Array& a) {
    debug_print("local {}", a);
    return a * a;
  }, make_mesh({1}, {"d"}), {P()}, {P()});
  g = grad([&](const Array& a) { return sum(sm(a)); })(vec({2}));
  EXPECT_EQ(out.lines(g), std::vector<std::string>{"local [2]"}) << "shard_map";
  // A loop kept only for what it prints.
  Array r = jit([](const Array& a) {
    (void)fori_loop(0, 2, [](const Array& i, const Array& c) {
      debug_print("only {}", i);
      return c;
    }, a);
    return a;
  })(Array(1.0f));
  EXPECT_THAT(out.lines(r), ElementsAre("only 0", "only 1"));
}

TEST(DebugPrint, FormatErrorsAreClear) {
  Array x = Array(1.0f);
  EXPECT_THAT(error_of([&] { debug_print("{} and {}", x); }),
              HasSubstr("[debug_print] the format has 2 placeholders '{}', found 1 value"));
  EXPECT_THAT(error_of([&] { debug_print("oops {", x); }), HasSubstr("single '{' at position 5"));
  EXPECT_THAT(error_of([&] { jit([](const Array& a) { debug_print("}", a); return a; })(x); }),
              HasSubstr("single '}' at position 0"));
}

}  // namespace
}  // namespace mcx
