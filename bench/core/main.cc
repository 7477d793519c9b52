// bench_core: the core compute cases in mcx (jitted), and in the same run the peers on the same work:
// numpy and PyTorch (bench/peers/core_peers.py under /usr/bin/python3) and OpenBLAS cblas_sgemm called
// directly for the GEMM. Prints one JSON line per (case, peer):
//   {"name", "mcx_ms", "peer", "peer_ms", "ratio" (peer_ms / mcx_ms, > 1: mcx faster), "threads", "blas",
//    "mcx_min_ms", "peer_min_ms", "ratio_min" (of the fastest runs), "repeats"}
// Times are medians over --repeats runs after --warmup runs. Cases (shapes shared with core_peers.py):
//   elementwise  exp(a) * b + 1, a, b f32[1048576]
//   dense_tanh   tanh(x @ W + b), x f32[1024,256], W f32[256,1024], b f32[1024] (1M outputs)
//   gemm         f32[1024,1024] @ f32[1024,1024]
//   softmax      softmax over the last axis of f32[4096,1024]
//   attention_softmax  softmax(scores + mask) over the last axis, scores f32[8,8,128,128], a causal mask
//                f32[128,128] (0 or -1e9) broadcast over batch and heads
//   layer_norm   (x - mean) / sqrt(var + 1e-5) * gamma + beta over the last axis of f32[32,128,512]
//   mlp_step     784-512-512-10 ReLU MLP, batch 256, softmax cross-entropy, gradients + SGD update
//   conv2d       3x3 convolution, 32 -> 64 channels, SAME padding, on f32[64,28,28,32] (mcx: NHWC/HWIO;
//                PyTorch: its NCHW default, and channels_last as peer "torch_channels_last")
//   conv2d_grad  the same convolution forward and backward: sum(conv(x, w)) and its gradients for x and w
//   per_example_grads  the gradient of each example's loss, 784-256-10 ReLU MLP, batch 128: mcx
//                vmap(grad(loss)) under jit; PyTorch functorch.vmap(functorch.grad(loss)) (no numpy peer)
//   eager_dispatch  100 eager (not jitted) ops in a chain, x = x * 0.5 + 1 fifty times on f32[16]: the cost
//                of dispatching one small op (mcx: a cached executable launched on the device's stream)
//
// In a build with the LLVM code generator each case also runs with it switched off, as peer
// "mcx_interpreter" (ratio > 1: the generated kernels are faster than the interpreter's).
//
//   bench_core [--threads 2] [--repeats 30] [--warmup 5] [--cases gemm,softmax] [--no-python] [--no-interpreter]
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/core/bench_util.h"
#include "bench/core/mlp_model.h"
#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/trace/grad.h"
#include "mcx/trace/jit.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/pytree.h"
#include "mcx/trace/random.h"
#include "mcx/trace/vmap.h"
#include "nlohmann/json.hpp"

#ifndef MCX_BENCH_PEERS_SCRIPT
#define MCX_BENCH_PEERS_SCRIPT "bench/peers/core_peers.py"
#endif

namespace {

using mcx::Array;
using mcx::Tree;
using mcx::bench::Timing;

const std::vector<std::string> kAllCases = {"elementwise", "dense_tanh",        "gemm",       "softmax",
                                            "attention_softmax", "layer_norm", "mlp_step", "conv2d",
                                            "conv2d_grad", "per_example_grads", "eager_dispatch"};

Array normal(uint32_t seed, std::vector<int64_t> dims, double scale = 1.0) {
  Array a = mcx::random::normal(mcx::random::fold_in(mcx::random::key(2026), seed), dims);
  return scale == 1.0 ? a : a * scale;
}

// Blocks until every leaf is computed (execution is synchronous today; to_host keeps that true if it
// becomes asynchronous).
template <typename T>
void wait(const T& tree) {
  for (const Array& a : mcx::tree_leaves(tree)) (void)a.to_host();
}

// ---- the mcx side of each case: returns a function that runs it once ------------------------------
std::function<void()> mcx_case(const std::string& name) {
  if (name == "elementwise") {
    Array a = normal(1, {1 << 20}), b = normal(2, {1 << 20});
    auto f = mcx::jit([](const Array& a, const Array& b) { return mcx::exp(a) * b + 1.0f; }, {.name = "elementwise"});
    return [=] { wait(f(a, b)); };
  }
  if (name == "eager_dispatch") {
    Array x0 = normal(50, {16});
    return [=] {
      Array x = x0;
      for (int i = 0; i < 50; ++i) x = x * 0.5f + 1.0f;
      wait(x);
    };
  }
  if (name == "dense_tanh") {
    Array x = normal(3, {1024, 256}), w = normal(4, {256, 1024}, 1.0 / 16), b = normal(5, {1024});
    auto f = mcx::jit([](const Array& x, const Array& w, const Array& b) { return mcx::tanh(mcx::matmul(x, w) + b); },
                      {.name = "dense_tanh"});
    return [=] { wait(f(x, w, b)); };
  }
  if (name == "gemm") {
    Array a = normal(6, {1024, 1024}), b = normal(7, {1024, 1024});
    auto f = mcx::jit([](const Array& a, const Array& b) { return mcx::matmul(a, b); }, {.name = "gemm"});
    return [=] { wait(f(a, b)); };
  }
  if (name == "softmax") {
    Array x = normal(8, {4096, 1024});
    auto f = mcx::jit([](const Array& x) { return mcx::softmax(x, -1); }, {.name = "softmax"});
    return [=] { wait(f(x)); };
  }
  if (name == "attention_softmax") {
    Array scores = normal(40, {8, 8, 128, 128});
    std::vector<float> causal(128 * 128);
    for (int i = 0; i < 128; ++i) {
      for (int j = 0; j < 128; ++j) causal[i * 128 + j] = j <= i ? 0.0f : -1e9f;
    }
    Array mask = mcx::array(causal, {128, 128});
    auto f = mcx::jit([](const Array& s, const Array& m) { return mcx::softmax(s + m, -1); },
                      {.name = "attention_softmax"});
    return [=] { wait(f(scores, mask)); };
  }
  if (name == "layer_norm") {
    Array x = normal(41, {32, 128, 512}), gamma = normal(42, {512}), beta = normal(43, {512});
    auto f = mcx::jit(
        [](const Array& x, const Array& g, const Array& b) {
          Array d = x - mcx::mean(x, -1, true);
          return d / mcx::sqrt(mcx::mean(d * d, -1, true) + 1e-5f) * g + b;
        },
        {.name = "layer_norm"});
    return [=] { wait(f(x, gamma, beta)); };
  }
  if (name == "mlp_step") {
    const std::vector<int64_t> sizes = {784, 512, 512, 10};
    Tree params;
    for (size_t i = 0; i + 1 < sizes.size(); ++i) {
      params["w" + std::to_string(i)] =
          normal(10 + static_cast<uint32_t>(i), {sizes[i], sizes[i + 1]}, std::sqrt(2.0 / sizes[i]));
      params["b" + std::to_string(i)] = mcx::zeros(mcx::concrete_shape({sizes[i + 1]}));
    }
    Array x = normal(20, {256, 784});
    Array y = mcx::remainder(mcx::random::permutation(mcx::random::key(21), 256), 10);  // labels 0..9
    auto step = mcx::bench::mlp_sgd_step();
    // The update is applied each call, as in the peers (their parameters change in place too).
    auto state = std::make_shared<Tree>(params);
    return [=] {
      auto [p, l] = step(*state, x, y);
      wait(l);
      wait(p);
      *state = std::move(p);
    };
  }
  if (name == "conv2d" || name == "conv2d_grad") {
    Array x = normal(30, {64, 28, 28, 32}), w = normal(31, {3, 3, 32, 64}, 1.0 / 17);
    if (name == "conv2d") {
      auto f = mcx::jit([](const Array& x, const Array& w) { return mcx::conv(x, w); }, {.name = "conv2d"});
      return [=] { wait(f(x, w)); };
    }
    // value_and_grad: the forward convolution is computed too (grad alone would not need its value).
    auto loss = [](const Array& x, const Array& w) { return mcx::sum(mcx::conv(x, w)); };
    auto f = mcx::jit(mcx::value_and_grad(loss, mcx::argnums<0, 1>), {.name = "conv2d_grad"});
    return [=] {
      auto [l, g] = f(x, w);
      wait(l);
      wait(std::get<0>(g));
      wait(std::get<1>(g));
    };
  }
  if (name == "per_example_grads") {
    Tree params = Tree::Dict{{"w0", normal(40, {784, 256}, 1.0 / 28)}, {"b0", normal(41, {256}, 0.01)},
                             {"w1", normal(42, {256, 10}, 1.0 / 16)}, {"b1", normal(43, {10}, 0.01)}};
    Array x = normal(44, {128, 784});
    Array y = mcx::remainder(mcx::arange(128), 10);
    // One example: x [784], y a scalar label.
    auto loss = [](const Tree& p, const Array& xi, const Array& yi) {
      Array h = mcx::relu(mcx::matmul(xi, p.at("w0")) + p.at("b0"));
      Array logits = mcx::matmul(h, p.at("w1")) + p.at("b1");
      return -mcx::sum(mcx::log_softmax(logits) * mcx::one_hot(yi, 10));
    };
    auto f = mcx::jit(mcx::vmap(mcx::grad(loss), {.in_axes = {std::nullopt, 0, 0}}), {.name = "per_example_grads"});
    return [=] { wait(f(params, x, y)); };
  }
  throw mcx::InvalidArgument("[bench_core] unknown case '" + name + "'");
}

// OpenBLAS sgemm on 1024^3, the GEMM peer called directly.
std::function<void()> openblas_gemm() {
  const int n = 1024;
  auto a = std::make_shared<std::vector<float>>(static_cast<size_t>(n) * n);
  auto b = std::make_shared<std::vector<float>>(static_cast<size_t>(n) * n);
  auto c = std::make_shared<std::vector<float>>(static_cast<size_t>(n) * n);
  for (size_t i = 0; i < a->size(); ++i) {
    (*a)[i] = static_cast<float>(std::sin(0.001 * i));
    (*b)[i] = static_cast<float>(std::cos(0.002 * i));
  }
  return [=] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a->data(), n, b->data(), n, 0.0f,
                c->data(), n);
  };
}

void print_line(const std::string& name, const Timing& mcx_t, const std::string& peer, const Timing* peer_t,
                int threads, const std::string& blas, int repeats) {
  nlohmann::ordered_json j;
  j["name"] = name;
  j["mcx_ms"] = std::round(mcx_t.median_ms * 1e4) / 1e4;
  j["peer"] = peer.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(peer);
  if (peer_t != nullptr) {
    j["peer_ms"] = std::round(peer_t->median_ms * 1e4) / 1e4;
    j["ratio"] = std::round(peer_t->median_ms / mcx_t.median_ms * 1e3) / 1e3;
  } else {
    j["peer_ms"] = nullptr;
    j["ratio"] = nullptr;
  }
  j["threads"] = threads;
  j["blas"] = blas;
  j["mcx_min_ms"] = std::round(mcx_t.min_ms * 1e4) / 1e4;
  j["peer_min_ms"] = peer_t != nullptr ? nlohmann::ordered_json(std::round(peer_t->min_ms * 1e4) / 1e4)
                                       : nlohmann::ordered_json();
  // The ratio of the fastest runs: less sensitive than the medians to other load on a shared machine.
  j["ratio_min"] = peer_t != nullptr ? nlohmann::ordered_json(std::round(peer_t->min_ms / mcx_t.min_ms * 1e3) / 1e3)
                                     : nlohmann::ordered_json();
  j["repeats"] = repeats;
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, repeats = 30, warmup = 5, peer_timeout_s = 300;
  std::vector<std::string> cases = kAllCases;
  std::string python = "/usr/bin/python3", script = MCX_BENCH_PEERS_SCRIPT;
  bool no_python = false;
  bool no_interpreter = false;
  CLI::App app{"mcx core benchmarks against numpy, PyTorch and OpenBLAS (JSON lines)."};
  app.add_option("--threads", threads, "threads for mcx, OpenBLAS, numpy and PyTorch")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed runs per case (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed runs first (includes tracing and compiling)");
  app.add_option("--cases", cases, "comma-separated subset of the cases")->delimiter(',');
  app.add_option("--python", python, "interpreter with Debian's numpy and torch");
  app.add_option("--peers-script", script, "path of bench/peers/core_peers.py");
  app.add_option("--peer-timeout", peer_timeout_s, "seconds the Python peers may take in total");
  app.add_flag("--no-python", no_python, "skip the numpy/PyTorch peers");
  app.add_flag("--no-interpreter", no_interpreter, "skip the interpreter runs (e.g. to profile generated code)");
  CLI11_PARSE(app, argc, argv);
  for (const auto& c : cases) {
    if (std::find(kAllCases.begin(), kAllCases.end(), c) == kAllCases.end()) {
      std::fprintf(stderr, "bench_core: unknown case '%s'\n", c.c_str());
      return 2;
    }
  }

  mcx::cpu::set_num_threads(threads);
  openblas_set_num_threads(threads);
  std::string blas = mcx::bench::openblas_config();

  // Peers first, in a child process, so they do not share cores with the mcx runs.
  mcx::bench::PeerResults peers;
  if (!no_python) {
    std::fprintf(stderr, "bench_core: running numpy/PyTorch peers (%s)\n", script.c_str());
    peers = mcx::bench::run_python_peers(python, script, threads, repeats, warmup, cases, peer_timeout_s);
  }
  try {
    for (const auto& name : cases) {
      std::fprintf(stderr, "bench_core: %s\n", name.c_str());
      bool any = false;
      Timing m;
      if (mcx::cpu::codegen::enabled() && !no_interpreter) {
        // Generated code and the interpreter alternate run by run. Executables keep the setting they were
        // compiled with and the executable cache keys on it, so each closure sets it before its call.
        auto generated = [run = mcx_case(name)] {
          mcx::cpu::codegen::set_enabled(true);
          run();
        };
        auto interpreted = [run = mcx_case(name)] {
          mcx::cpu::codegen::set_enabled(false);
          run();
        };
        auto [g, interp] = mcx::bench::time_interleaved_ms(generated, interpreted, warmup, repeats);
        mcx::cpu::codegen::set_enabled(true);
        m = g;
        print_line(name, m, "mcx_interpreter", &interp, threads, blas, repeats);
        any = true;
      } else {
        m = mcx::bench::time_ms(mcx_case(name), warmup, repeats);
      }
      if (name == "gemm") {
        Timing o = mcx::bench::time_ms(openblas_gemm(), warmup, repeats);
        print_line(name, m, "openblas", &o, threads, blas, repeats);
        any = true;
      }
      auto it = peers.find(name);
      if (it != peers.end()) {
        for (const auto& r : it->second) {
          print_line(name, m, r.peer, &r.timing, threads, r.blas, repeats);
          any = true;
        }
      }
      if (!any) print_line(name, m, "", nullptr, threads, blas, repeats);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_core: %s\n", e.what());
    return 1;
  }
  return 0;
}
