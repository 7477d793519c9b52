// bench_cache: what a new process pays for its first call of a jitted program, split into tracing, compiling
// and running, with the code generator's counts. bench/cache/run.sh runs it in fresh processes on a cold and
// then a warm compilation cache (MCX_COMPILATION_CACHE_DIR) and prints the ratios.
//
//   bench_cache --program mlp20|mlp100|spmd4 [--part call|compile] [--batch 64] [--distributed]
//
// --distributed: join the job mcx-run started (distributed::initialize) first, so that MCX_SHARE_COMPILED can
// share kernels between the processes; the line then also has "process" and "kernels_from_peers".
//
// Programs: mlpN = jit(value_and_grad) of an N-layer, 256-wide ReLU MLP (the loss is a mean of squares);
// spmd4 = the 20-layer step on 4 CPU devices with the batch sharded (partitioner + per-device compile).
// --part call (default): one JSON line {"program", "trace_ms" (jit lower: trace + IR passes), "compile_ms"
// (first call minus a steady call: partition, plan, kernels), "run_ms" (a steady call), "first_call_ms"
// (trace + first call), "kernels_compiled", "kernels_loaded", "codegen"}.
// --part compile: lower, then time the backend's compile of the program alone ("backend_compile_ms": planning
// and kernels, and for spmd4 partitioning, or on a warm cache reading the serialised executable back; nothing
// executed), in a process that has made no kernel yet.
#include <chrono>
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/backend/cpu/executable.h"
#include "mcx/ir/fingerprint.h"
#include "mcx/ir/passes.h"
#include "mcx/platform/platform_registry.h"
#include "mcx/platform/stored_compile.h"
#include "mcx/distributed/distributed.h"
#include "mcx/runtime/device.h"
#include "mcx/runtime/mesh.h"
#include "mcx/runtime/spmd_executable.h"
#include "mcx/trace/grad.h"
#include "mcx/trace/jit.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/pytree.h"
#include "mcx/trace/random.h"
#include "nlohmann/json.hpp"

namespace {

using mcx::Array;
using mcx::Tree;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

template <typename T>
void wait(const T& tree) {
  for (const Array& a : mcx::tree_leaves(tree)) a.block_until_ready();
}

}  // namespace

int main(int argc, char** argv) {
  std::string program = "mlp20", part = "call";
  int batch = 64;
  CLI::App app{"First-call cost of a jitted program in a fresh process (JSON line)."};
  app.add_option("--program", program, "mlp20, mlp100 or spmd4")->check(CLI::IsMember({"mlp20", "mlp100", "spmd4"}));
  app.add_option("--batch", batch, "rows of x")->check(CLI::PositiveNumber);
  app.add_option("--part", part, "call or compile")->check(CLI::IsMember({"call", "compile"}));
  bool distributed = false;
  app.add_flag("--distributed", distributed, "join the job mcx-run started");
  CLI11_PARSE(app, argc, argv);
  const bool spmd = program == "spmd4";
  const int layers = program == "mlp100" ? 100 : 20;
  if (spmd) mcx::set_cpu_device_count(4);
  try {
    if (distributed) mcx::distributed::initialize();
    const int width = 256;
    Tree params;
    auto key = mcx::random::key(7);
    for (int i = 0; i < layers; ++i) {
      params["w" + std::to_string(1000 + i)] =
          mcx::random::normal(mcx::random::fold_in(key, i), {width, width}) * (1.0 / 16);
      params["b" + std::to_string(1000 + i)] = mcx::zeros(mcx::concrete_shape({width}));
    }
    Array x = mcx::random::normal(mcx::random::fold_in(key, 99999), {batch, width});
    wait(params);
    wait(x);
    auto loss = [layers](const Tree& p, const Array& x) {
      Array h = x;
      for (int i = 0; i < layers; ++i) {
        const std::string s = std::to_string(1000 + i);
        h = mcx::relu(mcx::matmul(h, p.at("w" + s)) + p.at("b" + s));
      }
      return mcx::mean(h * h);
    };
    mcx::JitOptions options{.name = program};
    if (spmd) {
      const mcx::Mesh mesh = mcx::make_mesh({4}, {"data"});
      options.in_shardings = {mcx::NamedSharding(mesh, mcx::P()),
                              mcx::NamedSharding(mesh, mcx::P("data", mcx::None))};
    }
    auto step = mcx::jit(mcx::value_and_grad(loss), options);
    auto t0 = Clock::now();
    const mcx::ir::Program lowered = step.lower(params, x);
    const double trace_ms = ms_since(t0);
    nlohmann::ordered_json j;
    auto r3 = [](double v) { return std::round(v * 1e3) / 1e3; };
    j["program"] = program;
    j["trace_ms"] = r3(trace_ms);
    {  // What jit's IR passes (CSE, DCE) cost on this program: part of trace_ms, run in every process.
      t0 = Clock::now();
      const mcx::ir::Program again = mcx::ir::eliminate_dead_code(mcx::ir::eliminate_common_subexpressions(lowered));
      j["passes_ms"] = r3(ms_since(t0));
      t0 = Clock::now();
      const std::string key = mcx::ir::canonical_encoding(again);
      j["program_key_ms"] = r3(ms_since(t0));
    }
    if (part == "compile" && spmd) {
      // Partition + plan + kernels of the 4-device step (or the SPMD entry read back), nothing executed.
      mcx::SpmdOptions spmd_options(mcx::make_mesh({4}, {"data"}));
      spmd_options.in_specs.assign(lowered.params.size(), mcx::P());
      spmd_options.in_specs.back() = mcx::P("data", mcx::None);  // x, the last leaf
      t0 = Clock::now();
      auto exe = mcx::SpmdExecutable::compile(lowered, spmd_options);
      j["backend_compile_ms"] = r3(ms_since(t0));
      if (!exe.ok()) throw std::runtime_error(std::string(exe.status().message()));
    } else if (part == "compile") {
      t0 = Clock::now();
      // The backend's path: the executable read back from the cache when it holds one, else compiled.
      const mcx::Platform& cpu = *mcx::value_or_throw(mcx::find_platform(mcx::default_device().platform));
      auto exe = mcx::load_or_compile(cpu, lowered, mcx::ir::canonical_encoding(lowered));
      j["backend_compile_ms"] = r3(ms_since(t0));
      if (!exe.ok()) throw std::runtime_error(std::string(exe.status().message()));
    }
    if (part == "call") {
      t0 = Clock::now();
      wait(step(params, x));
      const double first_ms = ms_since(t0);
      t0 = Clock::now();
      wait(step(params, x));
      const double run_ms = ms_since(t0);
      j["compile_ms"] = r3(std::max(0.0, first_ms - run_ms));
      j["run_ms"] = r3(run_ms);
      j["first_call_ms"] = r3(trace_ms + first_ms);
    }
    const mcx::cpu::codegen::CodegenStats st = mcx::cpu::codegen::stats();
    j["kernels_compiled"] = st.kernels_compiled;
    j["kernels_loaded"] = st.kernels_loaded;
    j["executables_loaded"] = mcx::executable_store_stats().loaded;
    j["executables_load_ms"] = r3(mcx::executable_store_stats().load_ms_total);
    j["partitioned"] = mcx::spmd_compile_stats().partitioned;
    j["spmd_loaded"] = mcx::spmd_compile_stats().loaded;
    if (distributed) {
      j["process"] = mcx::process_index();
      j["kernels_from_peers"] = st.kernels_from_peers;
    }
    j["codegen"] = mcx::cpu::codegen::enabled();
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
    if (distributed) mcx::distributed::shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cache: %s\n", e.what());
    return 1;
  }
  return 0;
}
