// bench_spmd: SPMD on one process. The MLP train step of bench_core's mlp_step (784-512-512-10 ReLU MLP,
// global batch 256, softmax cross-entropy, gradients + SGD update) on 1 device against the same step on N
// virtual CPU devices of this process with the same global batch (each device gets 256/N rows):
//   1 device     mcx::jit on the default device (exactly bench_core's mlp_step)
//   jit          mcx::jit with in_shardings (parameters P(), x P("data", None), y P("data")) and
//                out_shardings P(): the partitioner inserts the gradient all-reduce
//   shard_map    the per-device step with pmean of the gradients and the loss over "data"
// Every call waits for all its results (block_until_ready on every leaf). The variants are timed
// interleaved, round by round, so that load from other processes hits them alike; medians are reported.
//
// JSON lines, in bench_core's shape ({"name", "mcx_ms", "peer", "peer_ms", "ratio", "threads", "blas",
// "mcx_min_ms", "peer_min_ms", "ratio_min", "repeats"}) where the peer is the 1-device run and, unlike
// bench_core, ratio = mcx_ms / peer_ms (the N-device time over the 1-device time: lower is better):
//   mlp_step_spmd_jit, mlp_step_spmd_shard_map   step time on N devices vs 1 device (target ratio <= 1.15)
//   compile_spmd_jit        partition + compile of the N-device step (SpmdExecutable::compile on the
//                           lowered global program) vs compile of the 1-device step
//                           (cpu::CpuExecutable::compile), medians of --compile-repeats (target <= 2)
//   first_call_spmd_jit, first_call_spmd_shard_map   the whole first call (trace, optimise, partition,
//                           compile, run), one sample per process, with the steady-state medians beside
//                           it ("mcx_steady_ms", "peer_steady_ms"); noisy: prefer compile_spmd_jit
//
//   bench_spmd [--devices 4] [--threads 2] [--repeats 30] [--warmup 5] [--compile-repeats 5]
//              [--order interleaved|blocked]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/core/bench_util.h"
#include "bench/core/mlp_model.h"
#include "mcx/backend/cpu/executable.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/mcx.h"
#include "mcx/runtime/spmd_executable.h"
#include "nlohmann/json.hpp"

namespace {

using mcx::Array;
using mcx::None;
using mcx::P;
using mcx::Tree;
using mcx::bench::Timing;

constexpr int64_t kBatch = 256;
const std::vector<int64_t> kSizes = {784, 512, 512, 10};

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

Timing summarize(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  const size_t n = t.size();
  return {n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]), t.front()};
}

template <typename T>
void wait(const T& tree) {
  for (const Array& a : mcx::tree_leaves(tree)) a.block_until_ready();
}

Array normal(uint32_t seed, std::vector<int64_t> dims, double scale = 1.0) {
  Array a = mcx::random::normal(mcx::random::fold_in(mcx::random::key(2026), seed), dims);
  return scale == 1.0 ? a : a * scale;
}

Tree init_params() {
  Tree params;
  for (size_t i = 0; i + 1 < kSizes.size(); ++i) {
    params["w" + std::to_string(i)] =
        normal(10 + static_cast<uint32_t>(i), {kSizes[i], kSizes[i + 1]}, std::sqrt(2.0 / kSizes[i]));
    params["b" + std::to_string(i)] = mcx::zeros(mcx::concrete_shape({kSizes[i + 1]}));
  }
  return params;
}

std::pair<Tree, Array> global_step(const Tree& p, const Array& x, const Array& y) {
  auto [l, g] = mcx::value_and_grad(mcx::bench::mlp_loss)(p, x, y);
  return {mcx::bench::sgd_update(p, g), l};
}

// One benchmarked variant: run() performs one step (updating its own parameters) and waits for it.
struct Variant {
  std::string name;
  std::function<void()> run;
  double first_call_ms = 0;
  std::vector<double> samples;
};

// Makes a variant from a step function and its (already placed) inputs.
template <typename Step>
Variant make_variant(std::string name, Step step, Tree params, Array x, Array y) {
  auto state = std::make_shared<Tree>(std::move(params));
  Variant v;
  v.name = std::move(name);
  v.run = [step, state, x, y] {
    auto [p, l] = step(*state, x, y);
    wait(l);
    wait(p);
    *state = std::move(p);
  };
  return v;
}

void print_line(const std::string& name, const Timing& t_n, const Timing& t_1, int devices, int threads,
                const std::string& blas, int repeats, const nlohmann::ordered_json& extra = {}) {
  auto r4 = [](double v) { return std::round(v * 1e4) / 1e4; };
  nlohmann::ordered_json j;
  j["name"] = name;
  j["mcx_ms"] = r4(t_n.median_ms);
  j["peer"] = "mcx_1_device";
  j["peer_ms"] = r4(t_1.median_ms);
  j["ratio"] = std::round(t_n.median_ms / t_1.median_ms * 1e3) / 1e3;  // N devices / 1 device: lower is better
  j["threads"] = threads;
  j["blas"] = blas;
  j["mcx_min_ms"] = r4(t_n.min_ms);
  j["peer_min_ms"] = r4(t_1.min_ms);
  j["ratio_min"] = std::round(t_n.min_ms / t_1.min_ms * 1e3) / 1e3;
  j["repeats"] = repeats;
  j["devices"] = devices;
  for (const auto& [key, value] : extra.items()) j[key] = value;
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// Times partition + compile of the lowered global step for the mesh, and compile of it for one device.
void bench_compile(const mcx::Mesh& mesh, const mcx::ir::Program& global, size_t param_leaves, int repeats,
                   int devices, int threads, const std::string& blas) {
  std::vector<double> one, spmd, partition_only;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    auto exe1 = mcx::value_or_throw(mcx::cpu::CpuExecutable::compile(global));
    one.push_back(ms_since(t0));
    mcx::SpmdOptions options(mesh);
    options.name = "bench_spmd";
    options.in_specs.assign(param_leaves, P());
    options.in_specs.push_back(P("data", None));
    options.in_specs.push_back(P("data"));
    options.out_specs.assign(global.results.size(), P());
    t0 = Clock::now();
    auto exe = mcx::value_or_throw(mcx::SpmdExecutable::compile(global, std::move(options)));
    spmd.push_back(ms_since(t0));
    partition_only.push_back(exe->partition_seconds() * 1e3);
  }
  print_line("compile_spmd_jit", summarize(spmd), summarize(one), devices, threads, blas, repeats);
  std::fprintf(stderr, "bench_spmd: partition alone: median %.3f ms of the %d-device compile\n",
               summarize(partition_only).median_ms, devices);
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 4, threads = 2, repeats = 30, warmup = 5, compile_repeats = 5;
  std::string order = "interleaved";
  CLI::App app{"mcx SPMD on one process: the MLP step on 1 vs N CPU devices (JSON lines)."};
  app.add_option("--devices", devices, "devices of the data-parallel mesh (the global batch 256 must split)")
      ->check(CLI::Range(2, 256));
  app.add_option("--threads", threads, "mcx CPU threads (shared by all devices)")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed steps per variant (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps per variant after the first call")->check(CLI::NonNegativeNumber);
  app.add_option("--compile-repeats", compile_repeats, "compiles timed per side")->check(CLI::PositiveNumber);
  app.add_option("--order", order,
                 "interleaved: one step of each variant per round (load hits all alike); blocked: all steps of "
                 "one variant, then the next, each after >= 0.3 s of warm-up (no variant runs while another "
                 "one's idle OpenBLAS workers still spin)")
      ->check(CLI::IsMember({"interleaved", "blocked"}));
  CLI11_PARSE(app, argc, argv);
  if (kBatch % devices != 0) {
    std::fprintf(stderr, "bench_spmd: --devices %d does not divide the global batch %lld\n", devices,
                 static_cast<long long>(kBatch));
    return 2;
  }
  try {
    mcx::set_cpu_device_count(devices);
    mcx::cpu::set_num_threads(threads);
    const std::string blas = mcx::bench::openblas_config();
    const mcx::Mesh mesh = mcx::make_mesh({devices}, {"data"});
    const mcx::Sharding replicated = mcx::NamedSharding(mesh, P());
    const mcx::Sharding rows = mcx::NamedSharding(mesh, P("data", None));
    const mcx::Sharding labels = mcx::NamedSharding(mesh, P("data"));

    const Tree params = init_params();
    const Array x = normal(20, {kBatch, 784});
    const Array y = mcx::remainder(mcx::random::permutation(mcx::random::key(21), kBatch), 10);  // labels 0..9
    wait(params);
    wait(x);
    wait(y);

    mcx::JitOptions one_device, sharded;
    one_device.name = "mlp_step";
    sharded.name = "mlp_step_spmd";
    sharded.in_shardings = {replicated, rows, labels};
    sharded.out_shardings = {replicated};
    auto step1 = mcx::jit(global_step, one_device);
    auto step_jit = mcx::jit(global_step, sharded);
    auto step_sm = mcx::shard_map(
        [](const Tree& p, const Array& x, const Array& y) {
          auto [l, g] = mcx::value_and_grad(mcx::bench::mlp_loss)(p, x, y);
          Tree mean_g = mcx::tree_map([](const Array& gi) { return mcx::pmean(gi, "data"); }, g);
          return std::make_pair(mcx::bench::sgd_update(p, mean_g), mcx::pmean(l, "data"));
        },
        mesh, {P(), P("data", None), P("data")}, {P()}, "mlp_step_shard_map");

    Tree params_mesh = mcx::tree_map([&](const Array& a) { return mcx::device_put(a, replicated); }, params);
    Array x_mesh = mcx::device_put(x, rows), y_mesh = mcx::device_put(y, labels);
    wait(params_mesh);
    wait(x_mesh);
    wait(y_mesh);

    std::vector<Variant> variants;
    variants.push_back(make_variant("1_device", step1, params, x, y));
    variants.push_back(make_variant("jit", step_jit, params_mesh, x_mesh, y_mesh));
    variants.push_back(make_variant("shard_map", step_sm, params_mesh, x_mesh, y_mesh));

    // First calls (trace, optimise, partition, compile), 1 device first so no cache is warm for it.
    for (Variant& v : variants) {
      std::fprintf(stderr, "bench_spmd: first call of %s\n", v.name.c_str());
      auto t0 = Clock::now();
      v.run();
      v.first_call_ms = ms_since(t0);
    }
    if (order == "blocked") {
      std::fprintf(stderr, "bench_spmd: %d steps per variant, blocked, on %d devices, %d threads\n", repeats, devices,
                   threads);
      for (Variant& v : variants) {
        auto w0 = Clock::now();
        for (int w = 0; w < warmup || ms_since(w0) < 300.0; ++w) v.run();
        for (int r = 0; r < repeats; ++r) {
          auto t0 = Clock::now();
          v.run();
          v.samples.push_back(ms_since(t0));
        }
      }
    } else {
      for (int w = 0; w < warmup; ++w) {
        for (Variant& v : variants) v.run();
      }
      std::fprintf(stderr, "bench_spmd: %d interleaved rounds on %d devices, %d threads\n", repeats, devices,
                   threads);
      for (int r = 0; r < repeats; ++r) {
        for (Variant& v : variants) {
          auto t0 = Clock::now();
          v.run();
          v.samples.push_back(ms_since(t0));
        }
      }
    }
    const Timing t1 = summarize(variants[0].samples);
    for (size_t i = 1; i < variants.size(); ++i) {
      print_line("mlp_step_spmd_" + variants[i].name, summarize(variants[i].samples), t1, devices, threads, blas,
                 repeats);
    }
    // Compile cost: partition + compile of the N-device program against compile of the 1-device one.
    std::fprintf(stderr, "bench_spmd: compile timings\n");
    bench_compile(mesh, step_jit.lower(params_mesh, x_mesh, y_mesh), mcx::tree_leaves(params).size(),
                  compile_repeats, devices, threads, blas);
    // One sample each: the first call minus a steady-state step.
    // One sample each (a second first call needs a fresh process): the whole first call, and beside it
    // the steady-state median, so the one-off cost reads as the difference.
    const auto once = [](const Variant& v) { return Timing{v.first_call_ms, v.first_call_ms}; };
    for (size_t i = 1; i < variants.size(); ++i) {
      print_line("first_call_spmd_" + variants[i].name, once(variants[i]), once(variants[0]), devices, threads, blas,
                 1,
                 {{"mcx_steady_ms", std::round(summarize(variants[i].samples).median_ms * 1e4) / 1e4},
                  {"peer_steady_ms", std::round(t1.median_ms * 1e4) / 1e4}});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_spmd: %s\n", e.what());
    return 1;
  }
  return 0;
}
