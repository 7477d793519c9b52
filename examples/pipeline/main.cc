// pipeline: a two-stage model split across two processes (runtime-level pipeline parallelism).
//
//   mcx-run -n 2 -- pipeline --microbatches 8
//   mcx-run -n 2 --gpus-per-process 1 -- pipeline --platform cuda
//
// Stage 1 runs on process 0's first device, stage 2 on process 1's. Each microbatch's activations go from
// stage 1 to stage 2 with mcx::device_put between the two devices' shardings, which both processes call in
// the same order; asynchronous dispatch lets process 0 compute microbatch m+1 while process 1 computes m.
// The run first times each stage alone (M microbatches each, in the same run), then the pipelined run, and
// prints "pipelined <t> ms, sequential estimate M x (stage 1 + stage 2) = <s> ms, ratio <r>"; with
// --check-overlap it exits 1 unless the pipelined run is clearly faster (ratio < 0.85). The output of the last
// stage is checked against the same model run in one process (exit 1 on a mismatch).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "mcx/distributed/distributed.h"
#include "mcx/mcx.h"
#include "mcx/multihost/multihost.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// A stage: a few dense layers with tanh (the same weights on every process: seeded).
mcx::Array stage(const mcx::Array& x, const mcx::Array& w, int layers) {
  mcx::Array h = x;
  for (int i = 0; i < layers; ++i) h = mcx::tanh(mcx::matmul(h, w) * 0.05f);
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"two-stage pipeline across two processes"};
  int microbatches = 8, batch = 128, width = 512, layers = 4;
  bool check_overlap = false;
  app.add_option("--microbatches", microbatches, "microbatches (M)")->check(CLI::Range(1, 1000));
  app.add_option("--batch", batch, "rows per microbatch")->check(CLI::Range(1, 1 << 16));
  app.add_option("--width", width, "hidden width")->check(CLI::Range(1, 1 << 14));
  app.add_option("--layers", layers, "dense layers per stage")->check(CLI::Range(1, 64));
  app.add_flag("--check-overlap", check_overlap, "exit 1 unless pipelining beats M x (stage 1 + stage 2)");
  std::string platform;
  app.add_option("--platform", platform, "run on this platform (cpu, cuda; as MCX_PLATFORMS)");
  CLI11_PARSE(app, argc, argv);
  // The platform is chosen before anything makes the devices.
  if (!platform.empty()) setenv("MCX_PLATFORMS", platform.c_str(), 1);

  try {
    mcx::distributed::initialize();
    const int me = mcx::process_index();
    if (mcx::process_count() != 2) {
      std::fprintf(stderr, "pipeline: expected 2 processes (mcx-run -n 2 -- pipeline), found %d\n",
                   mcx::process_count());
      return 2;
    }
    // One device per stage: process 0's first and process 1's first.
    mcx::Device dev[2];
    for (const mcx::Device& d : mcx::devices()) {
      if (d.local_id == 0) dev[d.process_index] = d;
    }
    const mcx::Sharding on[2] = {mcx::SingleDeviceSharding(dev[0]), mcx::SingleDeviceSharding(dev[1])};
    std::printf("pipeline: 2 processes, stage 1 on %s (process 0), stage 2 on %s (process 1), %d microbatches of "
                "[%d, %d]\n",
                dev[0].to_string().c_str(), dev[1].to_string().c_str(), microbatches, batch, width);

    // Inputs and weights from a formula: the same on every process, so each side can build its own copy.
    auto make = [](std::vector<int64_t> shape, const mcx::Sharding& s, int seed) {
      return mcx::make_array_from_callback(shape, mcx::DType::kFloat32, s, [seed](const mcx::IndexBox& box) {
        std::vector<float> v;
        const auto dims = box.shape();
        for (int64_t i = 0; i < dims[0] * dims[1]; ++i) v.push_back(static_cast<float>(((i * 7 + seed * 13) % 17) - 8) / 8.0f);
        return mcx::Buffer::from_vector<float>(v, dims);
      });
    };
    const std::vector<int64_t> act = {batch, width}, wdims = {width, width};
    const mcx::Array w[2] = {make(wdims, on[0], 0), make(wdims, on[1], 0)};  // each stage's weights on its device
    std::vector<mcx::Array> x;  // microbatch inputs on stage 1's device (no local shards on process 1)
    for (int m = 0; m < microbatches; ++m) x.push_back(make(act, on[0], m + 1));
    auto stage1 = mcx::jit([layers](const mcx::Array& a, const mcx::Array& ww) { return stage(a, ww, layers); },
                           {.name = "stage1"});
    auto stage2 = mcx::jit([layers](const mcx::Array& a, const mcx::Array& ww) { return stage(a, ww, layers); },
                           {.name = "stage2"});
    // Process 1's handle on an activation that lives on process 0's device (it has no local shards).
    auto remote = [&](const mcx::Sharding& s) { return make(act, s, 0); };

    // Warm up (compile both stages, connect the channel).
    {
      mcx::Array h = me == 0 ? stage1(x[0], w[0]) : remote(on[0]);
      mcx::Array h1 = mcx::device_put(h, on[1]);
      if (me == 1) stage2(h1, w[1]).block_until_ready();
      mcx::multihost::sync_global_devices("warm");
    }
    // Each stage alone, M microbatches (on its own process).
    auto t0 = Clock::now();
    for (int m = 0; m < microbatches; ++m) {
      if (me == 0) stage1(x[m], w[0]).block_until_ready();
      if (me == 1) stage2(make(act, on[1], m + 1), w[1]).block_until_ready();
    }
    const double alone = ms_since(t0);
    mcx::multihost::sync_global_devices("alone");
    mcx::Array alone_all = mcx::multihost::process_allgather(mcx::array(std::vector<float>{static_cast<float>(alone)}, {1}));
    const double s1 = alone_all.to_host().element_as_double(0), s2 = alone_all.to_host().element_as_double(1);

    // Pipelined: every process issues every microbatch; dispatch is asynchronous.
    t0 = Clock::now();
    std::vector<mcx::Array> y;
    for (int m = 0; m < microbatches; ++m) {
      mcx::Array h = me == 0 ? stage1(x[m], w[0]) : remote(on[0]);
      mcx::Array h1 = mcx::device_put(h, on[1]);
      if (me == 1) y.push_back(stage2(h1, w[1]));
    }
    for (const mcx::Array& a : y) a.block_until_ready();
    mcx::multihost::sync_global_devices("pipelined");
    const double pipelined = ms_since(t0);

    int status = 0;
    if (me == 1) {
      // The reference: both stages of the last microbatch in this process.
      mcx::Array xl = make(act, on[1], microbatches);
      mcx::Buffer want = stage(stage(xl, w[1], layers), w[1], layers).to_host();
      mcx::Buffer got = y.back().to_host();
      double worst = 0;
      for (int64_t i = 0; i < want.num_elements(); ++i) {
        worst = std::max(worst, std::abs(want.element_as_double(i) - got.element_as_double(i)));
      }
      const double estimate = s1 + s2;
      const double ratio = pipelined / estimate;
      std::printf("pipeline: stage 1 alone %.1f ms, stage 2 alone %.1f ms (%d microbatches each)\n", s1, s2,
                  microbatches);
      std::printf("pipeline: pipelined %.1f ms, sequential estimate M x (stage 1 + stage 2) = %.1f ms, ratio %.2f\n",
                  pipelined, estimate, ratio);
      std::printf("pipeline: last microbatch matches the single-process reference (max abs diff %.3g)\n", worst);
      if (worst > 1e-4) {
        std::printf("pipeline: FAIL the pipelined result differs from the reference\n");
        status = 1;
      }
      if (check_overlap && ratio >= 0.85) {
        std::printf("pipeline: FAIL no overlap (ratio %.2f >= 0.85)\n", ratio);
        status = 1;
      }
    }
    mcx::distributed::shutdown();
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipeline: %s\n", e.what());
    return 1;
  }
}
