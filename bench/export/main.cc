// bench_export: JSON lines (as bench/core) for
//  - serialize / deserialize time and artifact size of the digits MLP (64-128-10) and a 20-layer MLP
//    (64 -> 20 x 128 -> 10), both exported with a symbolic batch and their weights as inputs, and the same
//    with the weights captured as constants ("_const");
//  - Exported::call versus calling the jitted function directly, on the same inputs: first call
//    (specialise + compile vs trace + compile, caches cleared) and steady state (median/min of many calls)
//    for batch 1 (where fixed overhead dominates) and batch 64.
// Run: build/bench/export/bench_export [repeats]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "mcx/mcx.h"
#include "mcx/runtime/executable_cache.h"
#include "mcx/trace/export.h"
#include "nlohmann/json.hpp"

namespace {

using mcx::Array;
using mcx::Tree;
using Clock = std::chrono::steady_clock;

struct Timing {
  double median_ms, min_ms;
};

Timing time_ms(const std::function<void()>& fn, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    auto s = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s).count());
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front()};
}

double once_ms(const std::function<void()>& fn) {
  auto s = Clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(Clock::now() - s).count();
}

Array ramp(std::vector<int64_t> dims, double scale) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(0.1 * std::sin(scale * static_cast<double>(i)));
  return mcx::array(v, dims);
}

Tree make_params(const std::vector<int64_t>& sizes) {
  Tree::List layers;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    layers.push_back(Tree{{"w", Tree(ramp({sizes[i], sizes[i + 1]}, 0.37 + i))}, {"b", Tree(ramp({sizes[i + 1]}, 0.11 + i))}});
  }
  return Tree(layers);
}

Array mlp(const Tree& p, const Array& x) {
  Array h = x;
  const auto& layers = p.list();
  for (size_t i = 0; i < layers.size(); ++i) {
    h = mcx::matmul(h, layers[i].at("w")) + layers[i].at("b");
    if (i + 1 < layers.size()) h = mcx::relu(h);
  }
  return h;
}

double r4(double v) { return std::round(v * 1e4) / 1e4; }

void line(nlohmann::ordered_json j) { std::printf("%s\n", j.dump().c_str()); std::fflush(stdout); }

void bench_serialization(const std::string& name, const mcx::Exported& e, int repeats) {
  std::string bytes;
  Timing ser = time_ms([&] { bytes = e.serialize(); }, 2, repeats);
  Timing de = time_ms([&] { (void)mcx::Exported::deserialize(bytes); }, 2, repeats);
  line({{"name", name + "/serialize"}, {"mcx_ms", r4(ser.median_ms)}, {"mcx_min_ms", r4(ser.min_ms)},
        {"bytes", bytes.size()}, {"instructions", e.artifact().program.instrs.size()}, {"repeats", repeats}});
  line({{"name", name + "/deserialize"}, {"mcx_ms", r4(de.median_ms)}, {"mcx_min_ms", r4(de.min_ms)},
        {"bytes", bytes.size()}, {"repeats", repeats}});
}

void bench_call(const std::string& name, const std::vector<int64_t>& sizes, int64_t batch, int repeats) {
  Tree p = make_params(sizes);
  Array x = ramp({batch, sizes.front()}, 0.5);
  auto jitted = mcx::jit(mlp, {.name = name});
  mcx::Exported e = mcx::Exported::deserialize(
      mcx::export_fn(mlp, {.name = name})(p, mcx::AbstractValue{mcx::DType::kFloat32, mcx::symbolic_shape("b, " + std::to_string(sizes.front()))})
          .serialize());
  mcx::ExecutableCache::global().clear();
  double jit_first = once_ms([&] { jitted(p, x).to_host(); });
  mcx::ExecutableCache::global().clear();
  double exp_first = once_ms([&] { e.call(p, x)[0].to_host(); });
  // Steady state, interleaved in rounds so that machine noise hits both alike.
  std::vector<double> tj, te;
  for (int r = 0; r < 5; ++r) {
    Timing a = time_ms([&] { jitted(p, x).to_host(); }, 3, repeats);
    Timing b = time_ms([&] { e.call(p, x)[0].to_host(); }, 3, repeats);
    tj.push_back(a.min_ms);
    te.push_back(b.min_ms);
    tj.push_back(a.median_ms);
    te.push_back(b.median_ms);
  }
  Timing sj = time_ms([&] { jitted(p, x).to_host(); }, 3, repeats);
  Timing se = time_ms([&] { e.call(p, x)[0].to_host(); }, 3, repeats);
  line({{"name", name + "/b" + std::to_string(batch) + "/first_call"}, {"mcx_ms", r4(exp_first)}, {"peer", "jit"},
        {"peer_ms", r4(jit_first)}, {"ratio", std::round(jit_first / exp_first * 1e3) / 1e3}});
  line({{"name", name + "/b" + std::to_string(batch) + "/steady_call"}, {"mcx_ms", r4(se.median_ms)},
        {"peer", "jit"}, {"peer_ms", r4(sj.median_ms)}, {"ratio", std::round(sj.median_ms / se.median_ms * 1e3) / 1e3},
        {"mcx_min_ms", r4(se.min_ms)}, {"peer_min_ms", r4(sj.min_ms)},
        {"ratio_min", std::round(sj.min_ms / se.min_ms * 1e3) / 1e3}, {"repeats", repeats}});
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = argc > 1 ? std::atoi(argv[1]) : 200;
  const std::vector<int64_t> digits = {64, 128, 10};
  std::vector<int64_t> deep = {64};
  for (int i = 0; i < 20; ++i) deep.push_back(128);
  deep.push_back(10);
  mcx::AbstractValue xa{mcx::DType::kFloat32, mcx::symbolic_shape("b, 64")};
  for (const auto& [name, sizes] : {std::pair{std::string("digits_mlp"), digits}, std::pair{std::string("mlp20"), deep}}) {
    Tree p = make_params(sizes);
    bench_serialization(name, mcx::export_fn(mlp, {.name = name})(p, xa), repeats);
    auto captured = [p](const Array& x) { return mlp(p, x); };
    bench_serialization(name + "_const", mcx::export_fn(captured, {.name = name})(xa), std::max(10, repeats / 10));
  }
  for (int64_t batch : {1, 64}) {
    bench_call("digits_mlp", digits, batch, repeats);
    bench_call("mlp20", deep, batch, std::max(20, repeats / 4));
  }
  return 0;
}
