// bench_mlp_step: one data-parallel training step of the 784-512-512-10 ReLU MLP (softmax cross-entropy, Adam;
// the digits examples' model code) at a global batch of 256, jit-partitioned over a mesh of every device of the
// job, parameters replicated and the batch split over the devices. Run alone with --devices D (one process,
// D devices) or under mcx-run (one process per host of the job; mcx-run -n 2 --cpu-devices 1 -- ...), so that
// the two layouts of the same global device count can be compared (bench/collectives/run.sh does).
// Process 0 prints one JSON line:
//   {"name":"mlp_step","processes":P,"devices_per_process":D,"step_ms":..,"compute_ms":..,"all_reduce_ms":..,
//    "other_ms":..}
// where the time goes (the step is digits::jit_data_parallel_step, without donation): compute_ms is the same step on one device with one device's share of the batch (no
// communication), all_reduce_ms the gradients' all-reduce alone (one all-reduce per parameter leaf, the sizes
// the partitioned step reduces, through the same communicator), other_ms the rest (dispatch, the launch
// check, waiting for the slowest device). Times are medians of 5 batches of 10 steps.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <cstdlib>
#include <functional>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "CLI/CLI.hpp"
#include "examples/train_digits/digits_model.h"
#include "examples/train_digits/digits_parallel.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/distributed/cluster.h"
#include "mcx/distributed/distributed.h"
#include "mcx/mcx.h"
#include "mcx/runtime/communicator_cache.h"

namespace {

using mcx::Array;
using mcx::None;
using mcx::P;
using mcx::Tree;
using Clock = std::chrono::steady_clock;

constexpr int kBatches = 5, kStepsPerBatch = 10;

double median_ms(const std::function<void()>& batch, int per_batch) {
  batch();  // warm-up (compiles, connects, fills the caches)
  std::vector<double> t;
  for (int b = 0; b < kBatches; ++b) {
    const auto s = Clock::now();
    batch();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s).count() / per_batch);
  }
  std::sort(t.begin(), t.end());
  return t[kBatches / 2];
}

// Milliseconds per step of `step` on `mesh` at a global batch of `batch` rows.
double time_steps(const mcx::Mesh& mesh, int64_t batch, const std::vector<int64_t>& sizes) {
  const mcx::Sharding replicated = mcx::NamedSharding(mesh, P());
  auto replicate = [&](const Array& a) { return mcx::device_put(a, replicated); };
  const Tree params = mcx::tree_map(replicate, digits::init_params(mcx::random::key(0), sizes));
  const digits::AdamState moments = digits::adam_init(params);
  const Tree m = mcx::tree_map(replicate, moments.m), v = mcx::tree_map(replicate, moments.v);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::vector<float> xs(static_cast<size_t>(batch * sizes.front()));
  std::vector<int32_t> ys(static_cast<size_t>(batch));
  for (float& f : xs) f = pixel(rng);
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<int32_t>(i % digits::kNumClasses);
  const Array x = mcx::device_put(mcx::array(xs, {batch, sizes.front()}), mcx::NamedSharding(mesh, P("data", None)));
  const Array y = mcx::device_put(mcx::array(ys, {batch}), mcx::NamedSharding(mesh, P("data")));
  const Array t = mcx::device_put(mcx::array(1.0f), replicated);
  digits::StepFn step = digits::jit_data_parallel_step(mesh, 1e-3, /*donate=*/false, "mlp_step");
  return median_ms([&] {
    Array loss;
    for (int i = 0; i < kStepsPerBatch; ++i) std::tie(std::ignore, std::ignore, std::ignore, loss) = step(params, m, v, t, x, y);
    loss.block_until_ready();
  }, kStepsPerBatch);
}

// The gradients' all-reduce alone: one all-reduce per parameter leaf over every device of the job, each local
// device on its own thread (as their streams run it).
double time_all_reduce(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> leaves;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    leaves.push_back(sizes[i] * sizes[i + 1]);
    leaves.push_back(sizes[i + 1]);
  }
  const std::vector<mcx::Device> group = mcx::devices();
  const absl::Time far = absl::Now() + absl::Hours(1);
  std::vector<std::shared_ptr<mcx::Communicator>> comms;
  for (const mcx::Device& d : mcx::local_devices()) comms.push_back(mcx::value_or_throw(mcx::group_communicator(group, d, far)));
  std::vector<std::vector<float>> bufs(comms.size());
  int64_t total = 0;
  for (int64_t n : leaves) total += n;
  for (auto& b : bufs) b.assign(static_cast<size_t>(total), 1.0f);
  return median_ms([&] {
    std::vector<std::thread> threads;
    for (size_t k = 0; k < comms.size(); ++k) {
      threads.emplace_back([&, k] {
        for (int i = 0; i < kStepsPerBatch; ++i) {
          int64_t at = 0;
          for (int64_t n : leaves) {
            float* p = bufs[k].data() + at;
            mcx::throw_if_error(comms[k]->all_reduce(p, p, n, mcx::DType::kFloat32, mcx::ReduceOp::kSum, far));
            at += n;
          }
        }
      });
    }
    for (auto& th : threads) th.join();
  }, kStepsPerBatch);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"one data-parallel step of the 784-512-512-10 MLP, and where its time goes"};
  int devices = 2, threads = 1;
  int64_t batch = 256;
  app.add_option("--devices", devices, "CPU devices of this process when run alone (under mcx-run: --cpu-devices)");
  app.add_option("--threads", threads, "CPU threads per process");
  app.add_option("--batch", batch, "global batch");
  CLI11_PARSE(app, argc, argv);
  try {
    if (mcx::distributed::launched_as_job(mcx::distributed::process_env())) {
      mcx::distributed::initialize();
    } else {
      mcx::set_cpu_device_count(devices);
    }
    mcx::cpu::set_num_threads(threads);
    const std::vector<int64_t> sizes = {784, 512, 512, 10};
    const int global = mcx::device_count();
    if (batch % global != 0) {
      std::fprintf(stderr, "bench_mlp_step: --batch %lld is not a multiple of the %d devices\n",
                   static_cast<long long>(batch), global);
      return 2;
    }
    const double step_ms = time_steps(mcx::make_mesh({global}, {"data"}), batch, sizes);
    const double all_reduce_ms = time_all_reduce(sizes);
    // One device's share of the work, alone on this process's first device.
    const mcx::Mesh one = mcx::make_mesh({1}, {"data"}, {mcx::local_devices()[0]});
    const double compute_ms = time_steps(one, batch / global, sizes);
    if (mcx::process_index() == 0) {
      std::printf("{\"name\":\"mlp_step\",\"processes\":%d,\"devices_per_process\":%d,\"step_ms\":%.3f,"
                  "\"compute_ms\":%.3f,\"all_reduce_ms\":%.3f,\"other_ms\":%.3f}\n",
                  mcx::process_count(), mcx::local_device_count(), step_ms, compute_ms, all_reduce_ms,
                  step_ms - compute_ms - all_reduce_ms);
      std::fflush(stdout);
    }
    if (mcx::distributed::is_initialized()) mcx::distributed::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_mlp_step: %s\n", e.what());
    return 1;
  }
}
