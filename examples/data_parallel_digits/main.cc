// Data-parallel training of the digits MLP over N virtual CPU devices of one process (jax.jit on a mesh).
//
// The same model, data split, shuffles and Adam optimiser as examples/train_digits, but every step runs
// on a ("data",) mesh of --devices CPU devices: the parameters and Adam moments are replicated
// (NamedSharding(mesh, P())), each minibatch is split by rows (NamedSharding(mesh, P("data", None)))
// with device_put, and one step function computes the loss, its gradient and the update.
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
//                        [--seed 0] [--threads 2] [--batch 64] [--lr 3e-3] [--hidden 128]
//
// After training it checks that every device holds the same parameters (data parallelism keeps the
// replicas equal) and, in jit mode with several devices, that the steps really ran partitioned.
// Exits 0 when the final test accuracy reaches --min-accuracy (default 0.95) and the checks pass, 1 when
// not, 2 on bad input or a runtime error, and 77 (CTest "skipped") with --skip-if-missing and no data file.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "CLI/CLI.hpp"
#include "examples/train_digits/digits_data.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/mcx.h"

namespace {

using mcx::Array;
using mcx::None;
using mcx::P;
using mcx::Tree;

constexpr int kNumClasses = 10;
constexpr const char* kTool = "data_parallel_digits";

// Layer i has weights "w<i>": f32[in, out] (He initialisation) and biases "b<i>": f32[out] (zeros). The
// keys are drawn as train_digits draws them, so the same seed gives the same initial model.
Tree init_params(const Array& key, const std::vector<int64_t>& sizes) {
  Tree params;
  std::vector<Array> keys = mcx::random::split_keys(key, static_cast<int64_t>(sizes.size()) - 1);
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    const double scale = std::sqrt(2.0 / static_cast<double>(sizes[i]));
    params["w" + std::to_string(i)] = mcx::random::normal(keys[i], {sizes[i], sizes[i + 1]}) * scale;
    params["b" + std::to_string(i)] = mcx::zeros(mcx::concrete_shape({sizes[i + 1]}));
  }
  return params;
}

// Logits of the ReLU MLP for x: f32[rows, features].
Array logits(const Tree& params, const Array& x) {
  const int layers = static_cast<int>(params.dict().size() / 2);
  Array h = x;
  for (int i = 0; i < layers; ++i) {
    const std::string s = std::to_string(i);
    h = mcx::matmul(h, params.at("w" + s)) + params.at("b" + s);
    if (i + 1 < layers) h = mcx::relu(h);
  }
  return h;
}

// Mean softmax cross-entropy against integer labels y: i32[rows]. Inside a shard_map body this is the
// mean over the device's rows; the pmean over equal-sized shards makes it the global mean.
Array loss_fn(const Tree& params, const Array& x, const Array& y) {
  return -mcx::mean(mcx::sum(mcx::log_softmax(logits(params, x)) * mcx::one_hot(y, kNumClasses), -1));
}

// Parameters and Adam moments, replicated over the mesh.
struct TrainState {
  Tree params, m, v;
};

using StepResult = std::tuple<Tree, Tree, Tree, Array>;  // params, m, v, loss

// Adam (Kingma & Ba) on every leaf; t is the 1-based step number as a traced f32 scalar.
StepResult adam(const Tree& params, const Tree& grads, const Tree& m, const Tree& v, const Array& t,
                const Array& loss, double lr) {
  constexpr double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  auto [p, def] = mcx::tree_flatten(params);
  std::vector<Array> g = mcx::tree_leaves(grads), m1 = mcx::tree_leaves(m), v1 = mcx::tree_leaves(v);
  const Array c1 = 1.0 - mcx::power(mcx::full_like(t, b1), t);
  const Array c2 = 1.0 - mcx::power(mcx::full_like(t, b2), t);
  for (size_t i = 0; i < p.size(); ++i) {
    m1[i] = b1 * m1[i] + (1.0 - b1) * g[i];
    v1[i] = b2 * v1[i] + (1.0 - b2) * g[i] * g[i];
    p[i] = p[i] - lr * (m1[i] / c1) / (mcx::sqrt(v1[i] / c2) + eps);
  }
  return {mcx::tree_unflatten<Tree>(def, p), mcx::tree_unflatten<Tree>(def, m1),
          mcx::tree_unflatten<Tree>(def, v1), loss};
}

using StepFn = std::function<StepResult(const Tree&, const Tree&, const Tree&, const Array&, const Array&,
                                        const Array&)>;

// jit mode: the global step; the partitioner derives the per-device program from the shardings.
StepFn make_jit_step(const mcx::Mesh& mesh, double lr) {
  const mcx::Sharding replicated = mcx::NamedSharding(mesh, P());
  auto step = mcx::jit(
      [lr](const Tree& p, const Tree& m, const Tree& v, const Array& t, const Array& x, const Array& y) {
        auto [l, g] = mcx::value_and_grad(loss_fn)(p, x, y);
        return adam(p, g, m, v, t, l, lr);
      },
      {.name = "dp_step",
       .in_shardings = {replicated, replicated, replicated, replicated,
                        mcx::NamedSharding(mesh, P("data", None)), mcx::NamedSharding(mesh, P("data"))},
       .out_shardings = {replicated},
       .donate_argnums = {0, 1, 2}});  // the old parameters and moments are dead after the step
  return [step](const Tree& p, const Tree& m, const Tree& v, const Array& t, const Array& x, const Array& y) {
    return step(p, m, v, t, x, y);
  };
}

// shard_map mode: the per-device step with explicit collectives (pmap-style data parallelism).
StepFn make_shard_map_step(const mcx::Mesh& mesh, double lr) {
  auto step = mcx::shard_map(
      [lr](const Tree& p, const Tree& m, const Tree& v, const Array& t, const Array& x, const Array& y) {
        auto [local_loss, local_grads] = mcx::value_and_grad(loss_fn)(p, x, y);
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

struct Config {
  std::string data = "data/digits.csv.gz";
  int devices = 4;
  std::string mode = "jit";
  int epochs = 40;
  uint64_t seed = 0;
  int threads = 0;
  int batch = 64;
  double lr = 3e-3;
  std::vector<int64_t> hidden = {128};
  double min_accuracy = 0.95;
  bool skip_if_missing = false;
};

Array to_x(const digits::Dataset& d) { return mcx::array(d.x, {d.rows, d.features}); }
Array to_y(const digits::Dataset& d) { return mcx::array(d.y, {d.rows}); }

std::vector<int32_t> host_permutation(const Array& key, int64_t n) {
  return mcx::random::permutation(key, n).to_vector<int32_t>();
}

int run(const Config& cfg) {
  if (cfg.skip_if_missing && !std::filesystem::exists(cfg.data)) {
    std::printf("%s: %s not found (run scripts/fetch-digits.sh); skipping\n", kTool, cfg.data.c_str());
    return 77;
  }
  if (cfg.batch % cfg.devices != 0) {
    throw mcx::InvalidArgument("[" + std::string(kTool) + "] --batch must be a multiple of --devices: batch " +
                               std::to_string(cfg.batch) + ", devices " + std::to_string(cfg.devices));
  }
  // Before anything touches a device: the device count is fixed at first use.
  mcx::set_cpu_device_count(cfg.devices);
  if (cfg.threads > 0) mcx::cpu::set_num_threads(cfg.threads);

  digits::Dataset all = mcx::value_or_throw(digits::load_csv_gz(cfg.data));
  digits::scale_features(all, 16.0f);  // pixels are 0..16
  Array root = mcx::random::key(cfg.seed);
  std::vector<Array> keys = mcx::random::split_keys(root, 3);  // split, init, shuffles (as train_digits)
  std::vector<int32_t> order = host_permutation(keys[0], all.rows);
  const int64_t n_test = all.rows / 5;
  digits::Dataset test = digits::gather_rows(all, order, 0, n_test);
  digits::Dataset train = digits::gather_rows(all, order, n_test, all.rows);
  const int64_t batches = train.rows / cfg.batch;  // the partial batch is dropped: one compiled shape
  if (batches == 0) throw mcx::InvalidArgument("[data_parallel_digits] --batch is larger than the training set");

  const mcx::Mesh mesh = mcx::make_mesh({cfg.devices}, {"data"});
  const mcx::Sharding replicated = mcx::NamedSharding(mesh, P());
  const mcx::Sharding rows = mcx::NamedSharding(mesh, P("data", None));
  const mcx::Sharding labels = mcx::NamedSharding(mesh, P("data"));

  std::vector<int64_t> sizes = {all.features};
  sizes.insert(sizes.end(), cfg.hidden.begin(), cfg.hidden.end());
  sizes.push_back(kNumClasses);
  auto replicate = [&](const Array& a) { return mcx::device_put(a, replicated); };
  TrainState state;
  state.params = mcx::tree_map(replicate, init_params(keys[1], sizes));
  state.m = mcx::tree_map([&](const Array& p) { return replicate(mcx::zeros_like(p)); }, state.params);
  state.v = mcx::tree_map([&](const Array& p) { return replicate(mcx::zeros_like(p)); }, state.params);

  StepFn step = cfg.mode == "jit" ? make_jit_step(mesh, cfg.lr) : make_shard_map_step(mesh, cfg.lr);
  // Evaluation: the parameters are committed to the mesh, so this runs there with the images replicated.
  mcx::JitOptions predict_options;
  predict_options.name = "predict";
  auto predict = mcx::jit([](const Tree& p, const Array& x) { return mcx::argmax(logits(p, x), 1); },
                          predict_options);
  auto accuracy = [&](const Tree& p, const digits::Dataset& d) {
    std::vector<int32_t> pred = predict(p, to_x(d)).to_vector<int32_t>();
    int64_t ok = 0;
    for (int64_t i = 0; i < d.rows; ++i) ok += pred[i] == d.y[i];
    return static_cast<double>(ok) / static_cast<double>(d.rows);
  };

  std::string arch;
  for (int64_t s : sizes) arch += (arch.empty() ? "" : "-") + std::to_string(s);
  std::printf("%s: %lld train / %lld test rows, MLP %s, Adam lr %g, global batch %d (%d per device), %d threads\n",
              kTool, static_cast<long long>(train.rows), static_cast<long long>(test.rows), arch.c_str(), cfg.lr,
              cfg.batch, cfg.batch / cfg.devices, mcx::cpu::num_threads());
  std::printf("%s: mode %s on %s; parameters %s, batch %s\n", kTool, cfg.mode.c_str(), mesh.to_string().c_str(),
              replicated.to_string().c_str(), rows.to_string().c_str());
  std::fflush(stdout);

  const mcx::RunStats stats_before = mcx::run_stats();
  const std::string prefix = std::string(kTool) + "[" + cfg.mode + " x" + std::to_string(cfg.devices) + "]";
  double test_acc = 0;
  int64_t step_count = 0;
  for (int epoch = 1; epoch <= cfg.epochs; ++epoch) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> perm =
        host_permutation(mcx::random::fold_in(keys[2], static_cast<uint32_t>(epoch)), train.rows);
    std::vector<Array> losses;  // read once per epoch, so steps are dispatched without waiting
    losses.reserve(batches);
    for (int64_t b = 0; b < batches; ++b) {
      digits::Dataset mb = digits::gather_rows(train, perm, b * cfg.batch, (b + 1) * cfg.batch);
      Array x = mcx::device_put(to_x(mb), rows);
      Array y = mcx::device_put(to_y(mb), labels);
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
  const double spread = max_replica_difference(state.params);
  std::printf("%s: parameter replicas on %zu devices differ by at most %.3g\n", kTool,
              mcx::tree_leaves(state.params).front().addressable_shards().size(), spread);
  if (spread > 1e-5) {
    std::printf("%s: FAILED: the replicas diverged (> 1e-5)\n", kTool);
    ok = false;
  }
  const mcx::RunStats stats = mcx::run_stats();
  std::printf("%s: %lld partitioned runs, %lld partitioned compiles\n", kTool,
              static_cast<long long>(stats.spmd_runs - stats_before.spmd_runs),
              static_cast<long long>(stats.spmd_compiles - stats_before.spmd_compiles));
  if (cfg.mode == "jit" && cfg.devices > 1 && stats.spmd_runs - stats_before.spmd_runs < step_count) {
    std::printf("%s: FAILED: expected every one of the %lld steps to run partitioned\n", kTool,
                static_cast<long long>(step_count));
    ok = false;
  }
  if (test_acc < cfg.min_accuracy) {
    std::printf("%s: FAILED: final test accuracy %.4f < %.4f\n", kTool, test_acc, cfg.min_accuracy);
    return 1;
  }
  if (!ok) return 1;
  std::printf("%s: OK: final test accuracy %.4f >= %.4f\n", kTool, test_acc, cfg.min_accuracy);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Trains the digits MLP data-parallel over N CPU devices of one process (jit or shard_map)."};
  app.add_option("--data", cfg.data, "digits.csv.gz (scripts/fetch-digits.sh writes data/digits.csv.gz)");
  app.add_option("--devices", cfg.devices, "virtual CPU devices in the (\"data\",) mesh")->check(CLI::PositiveNumber);
  app.add_option("--mode", cfg.mode, "jit (partitioner inserts the all-reduce) or shard_map (explicit pmean)")
      ->check(CLI::IsMember({"jit", "shard_map"}));
  app.add_option("--epochs", cfg.epochs, "passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--seed", cfg.seed, "PRNG seed: split, initialisation and shuffles");
  app.add_option("--threads", cfg.threads, "CPU threads (0: MCX_CPU_THREADS or all cores)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--batch", cfg.batch, "global minibatch size (a multiple of --devices)")->check(CLI::PositiveNumber);
  app.add_option("--lr", cfg.lr, "Adam learning rate")->check(CLI::PositiveNumber);
  app.add_option("--hidden", cfg.hidden, "hidden layer sizes, e.g. --hidden 256 128");
  app.add_option("--min-accuracy", cfg.min_accuracy, "exit 1 when the final test accuracy is below this");
  app.add_flag("--skip-if-missing", cfg.skip_if_missing, "exit 77 (skipped) when --data does not exist");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(cfg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", kTool, e.what());
    return 2;
  }
}
