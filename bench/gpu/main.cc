// bench_gpu: mcx on a GPU (the cuda platform) against JAX (jit) and PyTorch on the same GPU, in one run; the
// peers run in bench/gpu/gpu_peers.py. Prints one JSON line per (case, peer) as bench_core does:
//   {"name", "mcx_ms", "peer", "peer_ms", "ratio" (peer_ms / mcx_ms, > 1: mcx faster), ...}
// and for exp_mul_add the bandwidth reached, against the device-to-device copy bandwidth the peers measure.
// Cases (shapes shared with gpu_peers.py):
//   exp_mul_add  exp(a) * b + 1, a, b f32[2^28]
//   gemm_bf16    bf16[8192,8192] @ bf16[8192,8192]
//   gemm_f32     f32[8192,8192] @ f32[8192,8192] (TF32, the default precision of mcx and of JAX)
//   softmax      softmax over the last axis of f32[32768,4096]
//   layer_norm   (x - mean) / sqrt(var + 1e-5) * gamma + beta over the last axis of f32[32768,4096]
//   mlp_step     784-512-512-10 ReLU MLP, batch 4096, softmax cross-entropy, gradients + SGD update
// Inputs are made on the host and placed on the GPU with device_put; each call is timed to completion
// (block_until_ready). A case the GPU cannot run yet prints its error and the run goes on.
//
//   MCX_PLATFORMS=cpu,cuda bench_gpu [--repeats 20] [--warmup 3] [--cases gemm_bf16,softmax] [--no-python]
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/core/bench_util.h"
#include "bench/core/mlp_model.h"
#include "mcx/mcx.h"
#include "nlohmann/json.hpp"

#ifndef MCX_BENCH_GPU_PEERS_SCRIPT
#define MCX_BENCH_GPU_PEERS_SCRIPT "bench/gpu/gpu_peers.py"
#endif

namespace {

using mcx::Array;
using mcx::Tree;

const std::vector<std::string> kAllCases = {"exp_mul_add", "gemm_bf16", "gemm_f32", "softmax", "layer_norm", "mlp_step"};

const mcx::Device& gpu() { return mcx::local_devices("cuda").at(0); }

// Values uniform in [-scale, scale) made on the host (a fast generator: the CPU's normal sampler takes minutes
// for the largest inputs on a small machine) and placed on the GPU.
Array on_gpu(uint32_t seed, std::vector<int64_t> dims, double scale = 1.0, mcx::DType dtype = mcx::DType::kFloat32) {
  mcx::Buffer host = mcx::Buffer::uninitialized(mcx::DType::kFloat32, dims);
  float* p = host.mutable_data<float>();
  uint64_t state = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (int64_t i = 0; i < host.num_elements(); ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    p[i] = static_cast<float>((static_cast<double>(state >> 11) * 0x1.0p-53 * 2.0 - 1.0) * scale);
  }
  Array a(std::move(host));
  if (dtype != mcx::DType::kFloat32) a = mcx::astype(a, dtype);
  return mcx::device_put(a, gpu());
}

void wait(const Array& a) { a.block_until_ready(); }

std::function<void()> mcx_case(const std::string& name) {
  if (name == "exp_mul_add") {
    Array a = on_gpu(1, {int64_t{1} << 28}, 0.5), b = on_gpu(2, {int64_t{1} << 28});
    auto f = mcx::jit([](const Array& a, const Array& b) { return mcx::exp(a) * b + 1.0f; }, {.name = "exp_mul_add"});
    return [=] { wait(f(a, b)); };
  }
  if (name == "gemm_bf16" || name == "gemm_f32") {
    const mcx::DType t = name == "gemm_bf16" ? mcx::DType::kBFloat16 : mcx::DType::kFloat32;
    Array a = on_gpu(3, {8192, 8192}, 1.0, t), b = on_gpu(4, {8192, 8192}, 1.0 / 90, t);
    auto f = mcx::jit([](const Array& a, const Array& b) { return mcx::matmul(a, b); }, {.name = name});
    return [=] { wait(f(a, b)); };
  }
  if (name == "softmax") {
    Array x = on_gpu(5, {32768, 4096});
    auto f = mcx::jit([](const Array& x) { return mcx::softmax(x, -1); }, {.name = "softmax"});
    return [=] { wait(f(x)); };
  }
  if (name == "layer_norm") {
    Array x = on_gpu(6, {32768, 4096}), g = on_gpu(7, {4096}), b = on_gpu(8, {4096});
    auto f = mcx::jit(
        [](const Array& x, const Array& g, const Array& b) {
          Array d = x - mcx::mean(x, -1, true);
          return d / mcx::sqrt(mcx::mean(d * d, -1, true) + 1e-5f) * g + b;
        },
        {.name = "layer_norm"});
    return [=] { wait(f(x, g, b)); };
  }
  // mlp_step
  const std::vector<int64_t> sizes = {784, 512, 512, 10};
  Tree params;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    params["w" + std::to_string(i)] = on_gpu(10 + static_cast<uint32_t>(i), {sizes[i], sizes[i + 1]}, std::sqrt(2.0 / sizes[i]));
    params["b" + std::to_string(i)] = mcx::device_put(mcx::zeros(mcx::concrete_shape({sizes[i + 1]})), gpu());
  }
  Array x = on_gpu(20, {4096, 784});
  Array y = mcx::device_put(mcx::remainder(mcx::random::permutation(mcx::random::key(21), 4096), 10), gpu());  // labels 0..9
  auto step = mcx::bench::mlp_sgd_step();
  auto state = std::make_shared<Tree>(params);
  return [=] {
    auto [p, l] = step(*state, x, y);
    wait(l);
    *state = std::move(p);
  };
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 20, warmup = 3;
  std::string cases_arg = absl::StrJoin(kAllCases, ",");
  bool no_python = false;
  std::string python = "python3";
  CLI::App app{"mcx on a GPU against JAX and PyTorch on the same GPU"};
  app.add_option("--repeats", repeats);
  app.add_option("--warmup", warmup);
  app.add_option("--cases", cases_arg);
  app.add_option("--python", python);
  app.add_flag("--no-python", no_python);
  CLI11_PARSE(app, argc, argv);
  const std::vector<std::string> cases = absl::StrSplit(cases_arg, ',');

  std::map<std::string, mcx::bench::Timing> mcx_times;
  for (const std::string& name : cases) {
    try {
      std::function<void()> run = mcx_case(name);
      mcx_times[name] = mcx::bench::time_ms(run, warmup, repeats);
    } catch (const std::exception& e) {
      std::printf("%s\n", nlohmann::json{{"name", name}, {"peer", "mcx"}, {"error", e.what()}}.dump().c_str());
      std::fflush(stdout);
    }
  }
  mcx::bench::PeerResults peers;
  if (!no_python) peers = mcx::bench::run_python_peers(python, MCX_BENCH_GPU_PEERS_SCRIPT, 0, repeats, warmup, cases, 900);
  for (const std::string& name : cases) {
    auto it = mcx_times.find(name);
    if (it == mcx_times.end()) continue;
    const double mcx_ms = it->second.median_ms;
    nlohmann::json base = {{"name", name}, {"mcx_ms", mcx_ms}, {"mcx_min_ms", it->second.min_ms}, {"repeats", repeats}};
    if (name == "exp_mul_add") base["mcx_gb_per_s"] = 3.0 * 4.0 * static_cast<double>(int64_t{1} << 28) / (mcx_ms * 1e6);
    if (peers[name].empty()) std::printf("%s\n", base.dump().c_str());
    for (const mcx::bench::PeerResult& p : peers[name]) {
      nlohmann::json j = base;
      j["peer"] = p.peer;
      j["peer_ms"] = p.timing.median_ms;
      j["ratio"] = p.timing.median_ms / mcx_ms;
      std::printf("%s\n", j.dump().c_str());
    }
  }
  for (const mcx::bench::PeerResult& p : peers["copy_bandwidth"]) {
    std::printf("%s\n", nlohmann::json{{"name", "copy_bandwidth"}, {"peer", p.peer}, {"peer_ms", p.timing.median_ms},
                                       {"gb_per_s", 2.0 * 4.0 * static_cast<double>(int64_t{1} << 28) / (p.timing.median_ms * 1e6)}}
                                .dump()
                                .c_str());
  }
  return 0;
}
