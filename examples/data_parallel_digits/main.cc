// Data-parallel training of the digits MLP over the CPU devices of one or several processes (jax.jit on a
// mesh).
//
// The same model, data split, shuffles and Adam optimiser as examples/train_digits (both use
// examples/train_digits/digits_model.h), but every step runs on a ("data",) mesh of --devices CPU
// devices: the parameters and Adam moments are replicated (NamedSharding(mesh, P())), each minibatch is
// split by rows (NamedSharding(mesh, P("data", None))) with device_put, and one step function computes the
// loss, its gradient and the update.
//
//   --mode jit        (default) the step is mcx::jit with in_shardings/out_shardings: the partitioner
//                     turns the global program into a per-device one and inserts the gradient all-reduce.
//   --mode shard_map  the step is written per device: grad of the local loss inside a shard_map body,
//                     then pmean of the gradients and of the loss over "data" (explicit collectives).
//
// The global batch is --batch whatever the device count (each device gets batch/devices rows), so a run
// with --devices 1 and one with --devices 4 take the same steps and reach the same accuracy.
//
//   data_parallel_digits --data data/digits.csv.gz [--devices 4] [--mode jit|shard_map] [--epochs 40]
//                        [--seed 0] [--threads 2] [--batch 64] [--lr 3e-3] [--hidden 128] [--verbose]
//
// Across processes (one controller per process, multi-controller JAX style):
//
//   mcx-run -n 2 --cpu-devices 2 -- data_parallel_digits --data data/digits.csv.gz
//   mpirun -n 2 data_parallel_digits --data data/digits.csv.gz --devices 2
//
// A launcher's environment (mcx-run, mpirun, Slurm) is detected and mcx::distributed::initialize() joins the
// job; --devices is then the devices per process and the mesh spans every process's devices. Each process
// reads the same global batch and keeps the rows of its own devices; the gradient all-reduce crosses
// processes through the data plane. It prints the layout ("2 processes x 2 devices, mesh {data: 4}").
//
// After training it checks that every device holds the same parameters (data parallelism keeps the
// replicas equal; across processes with mcx::multihost::assert_equal, bitwise) and, in jit mode with several
// devices, that the steps really ran partitioned.
// Exits 0 when the final test accuracy reaches --min-accuracy (default 0.95) and the checks pass, 1 when
// not, 2 on bad input or a runtime error, and 77 (CTest "skipped") with --skip-if-missing and no data file.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "CLI/CLI.hpp"
#include "examples/train_digits/digits_data.h"
#include "examples/train_digits/digits_model.h"
#include "examples/train_digits/digits_parallel.h"
#include "examples/train_digits/start_devices.h"
#include "mcx/runtime/cpu_backend.h"
#include "mcx/distributed/cluster.h"
#include "mcx/distributed/distributed.h"
#include "mcx/mcx.h"
#include "mcx/multihost/multihost.h"

namespace {

using mcx::Array;
using mcx::None;
using mcx::P;
using mcx::Tree;

constexpr const char* kTool = "data_parallel_digits";

// Parameters and Adam moments, replicated over the mesh.
struct TrainState {
  Tree params, m, v;
};

using digits::StepFn;
using digits::StepResult;

// digits::adam_update, with the step's loss passed through as a fourth output.
StepResult adam(const Tree& params, const Tree& grads, const Tree& m, const Tree& v, const Array& t,
                const Array& loss, double lr) {
  auto [p, m1, v1] = digits::adam_update(params, grads, m, v, t, lr);
  return {p, m1, v1, loss};
}

// shard_map mode: the per-device step with explicit collectives (pmap-style data parallelism).
StepFn make_shard_map_step(const mcx::Mesh& mesh, double lr) {
  auto step = mcx::shard_map(
      [lr](const Tree& p, const Tree& m, const Tree& v, const Array& t, const Array& x, const Array& y) {
        // The loss is the mean over this device's rows; pmean over equal-sized shards gives the global mean.
        auto [local_loss, local_grads] = mcx::value_and_grad(digits::loss)(p, x, y);
        Tree grads = mcx::tree_map([](const Array& g) { return mcx::pmean(g, "data"); }, local_grads);
        return adam(p, grads, m, v, t, mcx::pmean(local_loss, "data"), lr);
      },
      mesh, {P(), P(), P(), P(), P("data", None), P("data")}, {P()}, "dp_step");
  return [step](const Tree& p, const Tree& m, const Tree& v, const Array& t, const Array& x, const Array& y) {
    return step(p, m, v, t, x, y);
  };
}

// The largest difference between any device's copy of a replicated leaf and the first device's copy.
double max_replica_difference(const Tree& tree) {
  double worst = 0;
  for (const Array& leaf : mcx::tree_leaves(tree)) {
    std::vector<mcx::ArrayShard> shards = leaf.addressable_shards();
    const std::vector<float> first = shards.front().data.to_vector<float>();
    for (size_t k = 1; k < shards.size(); ++k) {
      const std::vector<float> other = shards[k].data.to_vector<float>();
      for (size_t i = 0; i < first.size(); ++i) worst = std::max(worst, std::fabs(double(first[i]) - other[i]));
    }
  }
  return worst;
}

// FNV-1a over the bytes of the trained parameters (the first replica of each leaf): equal fingerprints mean
// bitwise-equal parameters, so runs with different layouts can be compared (with MCX_DETERMINISTIC_REDUCTIONS=1,
// 2 processes x 2 devices end bitwise equal to 1 process x 4 devices).
uint64_t parameters_fingerprint(const Tree& tree) {
  uint64_t h = 1469598103934665603ull;
  for (const Array& leaf : mcx::tree_leaves(tree)) {
    const std::vector<float> values = leaf.addressable_shards().front().data.to_vector<float>();
    const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
    for (size_t i = 0; i < values.size() * sizeof(float); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return h;
}

struct Config : digits::TrainFlags {
  int devices = 4;  // per process
  std::string mode = "jit";
  bool verbose = false;
};

int run(const Config& cfg) {
  if (digits::skip_missing_data(cfg, kTool)) return 77;
  // Before anything touches a device: the device count is fixed at first use, and initialize() must come first.
  const bool distributed = digits::start_devices(cfg.devices, cfg.threads);
  const int global_devices = mcx::device_count();
  if (cfg.batch % global_devices != 0) {
    throw mcx::InvalidArgument("[" + std::string(kTool) + "] --batch must be a multiple of the device count: batch " +
                               std::to_string(cfg.batch) + ", devices " + std::to_string(global_devices));
  }

  const digits::Experiment ex = digits::prepare_experiment(cfg.data, cfg.seed);  // as train_digits
  const digits::Dataset& train = ex.train;
  const digits::Dataset& test = ex.test;
  const int64_t batches = train.rows / cfg.batch;  // the partial batch is dropped: one compiled shape
  if (batches == 0) throw mcx::InvalidArgument("[data_parallel_digits] --batch is larger than the training set");

  const mcx::Mesh mesh = mcx::make_mesh({global_devices}, {"data"});
  const mcx::Sharding replicated = mcx::NamedSharding(mesh, P());
  const mcx::Sharding rows = mcx::NamedSharding(mesh, P("data", None));
  const mcx::Sharding labels = mcx::NamedSharding(mesh, P("data"));

  const std::vector<int64_t> sizes = digits::layer_sizes(train.features, cfg.hidden);
  auto replicate = [&](const Array& a) { return mcx::device_put(a, replicated); };
  TrainState state;
  state.params = mcx::tree_map(replicate, digits::init_params(ex.init_key, sizes));
  const digits::AdamState moments = digits::adam_init(state.params);
  state.m = mcx::tree_map(replicate, moments.m);
  state.v = mcx::tree_map(replicate, moments.v);

  // jit: the partitioner derives the per-device program; the old parameters and moments are donated.
  StepFn step = cfg.mode == "jit" ? digits::jit_data_parallel_step(mesh, cfg.lr, /*donate=*/true)
                                  : make_shard_map_step(mesh, cfg.lr);
  // Evaluation: the parameters are committed to the mesh, so this runs there with the images replicated.
  mcx::JitOptions predict_options;
  predict_options.name = "predict";
  auto predict = mcx::jit(digits::predict, predict_options);
  auto accuracy = [&](const Tree& p, const digits::Dataset& d) {
    return digits::accuracy(predict(p, digits::to_x(d)), d);
  };

  std::printf("%s: %lld train / %lld test rows, MLP %s, Adam lr %g, global batch %d (%d per device), %d threads\n",
              kTool, static_cast<long long>(train.rows), static_cast<long long>(test.rows),
              digits::layer_sizes_string(sizes).c_str(), cfg.lr,
              cfg.batch, cfg.batch / global_devices, mcx::num_cpu_threads());
  std::printf("%s: %d process%s x %d devices per process, mesh %s (process %d)\n", kTool, mcx::process_count(),
              mcx::process_count() == 1 ? "" : "es", mcx::local_device_count(), mesh.to_string().c_str(),
              mcx::process_index());
  std::printf("%s: mode %s on %s; parameters %s, batch %s\n", kTool, cfg.mode.c_str(), mesh.to_string().c_str(),
              replicated.to_string().c_str(), rows.to_string().c_str());
  std::fflush(stdout);

  const mcx::RunStats stats_before = mcx::run_stats();
  const std::string prefix = std::string(kTool) + "[" + cfg.mode + " x" + std::to_string(global_devices) + "]";
  double test_acc = 0;
  int64_t step_count = 0;
  for (int epoch = 1; epoch <= cfg.epochs; ++epoch) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> perm = digits::epoch_order(ex, epoch);
    std::vector<Array> losses;  // read once per epoch, so steps are dispatched without waiting
    losses.reserve(batches);
    for (int64_t b = 0; b < batches; ++b) {
      digits::Dataset mb = digits::gather_rows(train, perm, b * cfg.batch, (b + 1) * cfg.batch);
      Array x = mcx::device_put(digits::to_x(mb), rows);
      Array y = mcx::device_put(digits::to_y(mb), labels);
      if (cfg.verbose && step_count == 0 && mcx::process_index() == 0) {  // where the first batch and a weight live
        std::printf("%s: batch images %s:\n%s%s: first weight %s:\n%s", kTool, x.sharding().to_string().c_str(),
                    mcx::visualize_array_sharding(x).c_str(), kTool,
                    mcx::tree_leaves(state.params).front().sharding().to_string().c_str(),
                    mcx::visualize_array_sharding(mcx::tree_leaves(state.params).front()).c_str());
      }
      ++step_count;
      Array loss;
      std::tie(state.params, state.m, state.v, loss) =
          step(state.params, state.m, state.v, mcx::array(static_cast<float>(step_count)), x, y);
      losses.push_back(loss);
    }
    double loss_sum = 0;
    for (const Array& l : losses) loss_sum += l.item<double>();
    const double train_acc = accuracy(state.params, train);
    test_acc = accuracy(state.params, test);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s epoch %3d  loss %.4f  train acc %.4f  test acc %.4f  %.3f s\n", prefix.c_str(), epoch,
                loss_sum / static_cast<double>(batches), train_acc, test_acc, secs);
    std::fflush(stdout);
  }

  bool ok = true;
  const mcx::Sharding& final_sharding = mcx::tree_leaves(state.params).front().sharding();
  if (!final_sharding.equivalent(replicated, mcx::tree_leaves(state.params).front().dims())) {
    std::printf("%s: FAILED: parameters ended with %s, expected %s\n", kTool, final_sharding.to_string().c_str(),
                replicated.to_string().c_str());
    ok = false;
  }
  std::printf("%s: parameters fingerprint %016llx\n", kTool,
              static_cast<unsigned long long>(parameters_fingerprint(state.params)));
  const double spread = max_replica_difference(state.params);
  std::printf("%s: parameter replicas on %zu devices differ by at most %.3g\n", kTool,
              mcx::tree_leaves(state.params).front().addressable_shards().size(), spread);
  if (spread > 1e-5) {
    std::printf("%s: FAILED: the replicas diverged (> 1e-5)\n", kTool);
    ok = false;
  }
  if (distributed) {
    // Across processes: the replicas must be bitwise identical (the data plane's reductions are).
    try {
      mcx::multihost::assert_equal(state.params, "parameter replicas across processes");
      std::printf("%s: parameter replicas are bitwise identical across %d processes (assert_equal)\n", kTool,
                  mcx::process_count());
    } catch (const mcx::Error& e) {
      std::printf("%s: FAILED: %s\n", kTool, e.what());
      ok = false;
    }
  }
  const mcx::RunStats stats = mcx::run_stats();
  std::printf("%s: %lld partitioned runs, %lld partitioned compiles\n", kTool,
              static_cast<long long>(stats.spmd_runs - stats_before.spmd_runs),
              static_cast<long long>(stats.spmd_compiles - stats_before.spmd_compiles));
  if (cfg.mode == "jit" && global_devices > 1 && stats.spmd_runs - stats_before.spmd_runs < step_count) {
    std::printf("%s: FAILED: expected every one of the %lld steps to run partitioned\n", kTool,
                static_cast<long long>(step_count));
    ok = false;
  }
  const int status = digits::finish(kTool, test_acc, cfg.min_accuracy, ok);
  if (distributed) mcx::distributed::shutdown();
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Trains the digits MLP data-parallel over the CPU devices of one or several processes."};
  digits::add_train_flags(app, cfg, "global minibatch size (a multiple of --devices)");
  app.add_option("--devices", cfg.devices,
                 "virtual CPU devices per process (under mcx-run, MCX_CPU_DEVICE_COUNT from --cpu-devices wins)")
      ->check(CLI::PositiveNumber);
  app.add_option("--mode", cfg.mode, "jit (partitioner inserts the all-reduce) or shard_map (explicit pmean)")
      ->check(CLI::IsMember({"jit", "shard_map"}));
  app.add_flag("--verbose", cfg.verbose, "also draw where the first batch and a weight live (visualize_array_sharding)");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(cfg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", kTool, e.what());
    return 2;
  }
}
