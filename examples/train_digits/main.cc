// Trains a multilayer perceptron on the UCI optical-digits data (8x8 images, 10 classes) with mcx:
// parameters are a pytree (mcx::Tree), the loss and its gradient are one compiled program
// (jit(value_and_grad(loss))), the Adam update is another jitted function written with mcx ops, and the
// train/test split and the per-epoch shuffles come from mcx::random keys.
//
//   train_digits --data data/digits.csv.gz [--epochs 40] [--seed 0] [--threads 2]
//                [--export model.mcx [--export-samples test_x.npy]]
//
// --export writes the trained prediction function (argmax of the logits) as a serialized mcx::Exported
// with a symbolic batch dimension "b": `mcx-export run model.mcx --in test_x.npy --out-dir out` then
// classifies any number of images (--export-samples writes the held-out images, f32[n,64], to try it).
//
// Exits 0 when the final test accuracy reaches --min-accuracy (default 0.95), 1 when it does not, 2 on
// bad input, and 77 (the CTest "skipped" code) when --skip-if-missing is given and the data file is absent.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "CLI/CLI.hpp"
#include "examples/train_digits/digits_data.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/core/error.h"
#include "mcx/core/npy.h"
#include "mcx/trace/export.h"
#include "mcx/trace/grad.h"
#include "mcx/trace/jit.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/pytree.h"
#include "mcx/trace/random.h"

namespace {

using mcx::Array;
using mcx::Tree;

constexpr int kNumClasses = 10;

// {"w0": f32[in, h0], "b0": f32[h0], ...}: He-initialised weights, zero biases.
Tree init_params(const Array& key, const std::vector<int64_t>& sizes) {
  Tree params;
  std::vector<Array> keys = mcx::random::split_keys(key, static_cast<int64_t>(sizes.size()) - 1);
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    double scale = std::sqrt(2.0 / static_cast<double>(sizes[i]));
    params["w" + std::to_string(i)] = mcx::random::normal(keys[i], {sizes[i], sizes[i + 1]}) * scale;
    params["b" + std::to_string(i)] = mcx::zeros(mcx::concrete_shape({sizes[i + 1]}));
  }
  return params;
}

int num_layers(const Tree& params) { return static_cast<int>(params.dict().size() / 2); }

// Logits of the ReLU MLP for a batch x: f32[batch, 64].
Array mlp(const Tree& params, const Array& x) {
  int layers = num_layers(params);
  Array h = x;
  for (int i = 0; i < layers; ++i) {
    const std::string s = std::to_string(i);
    h = mcx::matmul(h, params.at("w" + s)) + params.at("b" + s);
    if (i + 1 < layers) h = mcx::relu(h);
  }
  return h;
}

// Mean softmax cross-entropy of the logits against integer labels y: i32[batch].
Array loss(const Tree& params, const Array& x, const Array& y) {
  Array logp = mcx::log_softmax(mlp(params, x));
  return -mcx::mean(mcx::sum(logp * mcx::one_hot(y, kNumClasses), -1));
}

struct AdamState {
  Tree m, v;
};

// One Adam step (Kingma & Ba) on every leaf; t is the 1-based step count as an f32 scalar (traced, so the
// jitted update compiles once).
std::tuple<Tree, Tree, Tree> adam_update(const Tree& params, const Tree& grads, const Tree& m, const Tree& v,
                                         const Array& t, double lr) {
  constexpr double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  auto [p_leaves, def] = mcx::tree_flatten(params);
  std::vector<Array> g_leaves = mcx::tree_leaves(grads), m_leaves = mcx::tree_leaves(m),
                     v_leaves = mcx::tree_leaves(v);
  Array c1 = 1.0 - mcx::power(mcx::full_like(t, b1), t);  // bias corrections 1 - beta^t
  Array c2 = 1.0 - mcx::power(mcx::full_like(t, b2), t);
  for (size_t i = 0; i < p_leaves.size(); ++i) {
    const Array& g = g_leaves[i];
    m_leaves[i] = b1 * m_leaves[i] + (1.0 - b1) * g;
    v_leaves[i] = b2 * v_leaves[i] + (1.0 - b2) * g * g;
    p_leaves[i] = p_leaves[i] - lr * (m_leaves[i] / c1) / (mcx::sqrt(v_leaves[i] / c2) + eps);
  }
  return {mcx::tree_unflatten<Tree>(def, p_leaves), mcx::tree_unflatten<Tree>(def, m_leaves),
          mcx::tree_unflatten<Tree>(def, v_leaves)};
}

Array to_x(const digits::Dataset& d) { return mcx::array(d.x, {d.rows, d.features}); }
Array to_y(const digits::Dataset& d) { return mcx::array(d.y, {d.rows}); }

std::vector<int32_t> host_permutation(const Array& key, int64_t n) {
  return mcx::random::permutation(key, n).to_vector<int32_t>();
}

struct Config {
  std::string data = "data/digits.csv.gz";
  int epochs = 40;
  uint64_t seed = 0;
  int threads = 0;
  int batch = 64;
  double lr = 3e-3;
  std::vector<int64_t> hidden = {128};
  double min_accuracy = 0.95;
  bool skip_if_missing = false;
  std::string export_path;   // write the trained predictor here (empty: do not export)
  std::string samples_path;  // write the held-out images here as .npy (empty: do not)
};

// Exports argmax(mlp(params, x)) with the trained weights captured as constants and the batch size left
// symbolic, so one artifact classifies any number of images.
void export_predictor(const Tree& params, const digits::Dataset& test, const Config& cfg) {
  mcx::Exported exported =
      mcx::export_fn([params](const Array& x) { return mcx::argmax(mlp(params, x), 1); },
                     {.name = "digits_predict"})(
          mcx::AbstractValue{mcx::DType::kFloat32, mcx::symbolic_shape("b, " + std::to_string(test.features))});
  const std::string bytes = exported.serialize();
  std::ofstream out(cfg.export_path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw mcx::Unavailable("[train_digits] cannot write " + cfg.export_path);
  std::printf("train_digits: exported the predictor (f32[b,%lld] -> i32[b]) to %s, %zu bytes\n",
              static_cast<long long>(test.features), cfg.export_path.c_str(), bytes.size());
  if (!cfg.samples_path.empty()) {
    mcx::throw_if_error(mcx::write_npy(cfg.samples_path, to_x(test).to_host()));
    std::printf("train_digits: wrote %lld held-out images to %s\n", static_cast<long long>(test.rows),
                cfg.samples_path.c_str());
  }
}

int run(const Config& cfg) {
  if (cfg.threads > 0) mcx::cpu::set_num_threads(cfg.threads);
  if (cfg.skip_if_missing && !std::filesystem::exists(cfg.data)) {
    std::printf("train_digits: %s not found (run scripts/fetch-digits.sh); skipping\n", cfg.data.c_str());
    return 77;
  }
  digits::Dataset all = mcx::value_or_throw(digits::load_csv_gz(cfg.data));
  digits::scale_features(all, 16.0f);  // pixels are 0..16

  Array root = mcx::random::key(cfg.seed);
  std::vector<Array> keys = mcx::random::split_keys(root, 3);  // split, init, shuffles
  std::vector<int32_t> order = host_permutation(keys[0], all.rows);
  int64_t n_test = all.rows / 5;
  digits::Dataset test = digits::gather_rows(all, order, 0, n_test);
  digits::Dataset train = digits::gather_rows(all, order, n_test, all.rows);
  int64_t batches = train.rows / cfg.batch;  // the last partial batch is dropped: one compiled shape
  if (batches == 0) throw mcx::InvalidArgument("[train_digits] --batch is larger than the training set");

  std::vector<int64_t> sizes = {all.features};
  sizes.insert(sizes.end(), cfg.hidden.begin(), cfg.hidden.end());
  sizes.push_back(kNumClasses);
  Tree params = init_params(keys[1], sizes);
  AdamState opt{mcx::tree_map([](const Array& p) { return mcx::zeros_like(p); }, params),
                mcx::tree_map([](const Array& p) { return mcx::zeros_like(p); }, params)};

  auto loss_and_grad = mcx::jit(mcx::value_and_grad(loss), {.name = "loss_and_grad"});
  auto update = mcx::jit(adam_update, {.name = "adam"});
  auto predict = mcx::jit([](const Tree& p, const Array& x) { return mcx::argmax(mlp(p, x), 1); },
                          {.name = "predict"});
  auto accuracy = [&](const Tree& p, const digits::Dataset& d) {
    std::vector<int32_t> pred = predict(p, to_x(d)).to_vector<int32_t>();
    int64_t ok = 0;
    for (int64_t i = 0; i < d.rows; ++i) ok += pred[i] == d.y[i];
    return static_cast<double>(ok) / static_cast<double>(d.rows);
  };

  std::string arch;
  for (int64_t s : sizes) arch += (arch.empty() ? "" : "-") + std::to_string(s);
  std::printf("train_digits: %lld train / %lld test rows, MLP %s, Adam lr %g, batch %d, %d threads\n",
              static_cast<long long>(train.rows), static_cast<long long>(test.rows), arch.c_str(), cfg.lr,
              cfg.batch, mcx::cpu::num_threads());
  double test_acc = 0;
  int64_t step = 0;
  for (int epoch = 1; epoch <= cfg.epochs; ++epoch) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> perm = host_permutation(mcx::random::fold_in(keys[2], static_cast<uint32_t>(epoch)),
                                                 train.rows);
    double loss_sum = 0;
    for (int64_t b = 0; b < batches; ++b) {
      digits::Dataset mb = digits::gather_rows(train, perm, b * cfg.batch, (b + 1) * cfg.batch);
      auto [l, grads] = loss_and_grad(params, to_x(mb), to_y(mb));
      ++step;
      std::tie(params, opt.m, opt.v) =
          update(params, grads, opt.m, opt.v, mcx::array(static_cast<float>(step)), cfg.lr);
      loss_sum += l.item<double>();
    }
    double train_acc = accuracy(params, train);
    test_acc = accuracy(params, test);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("epoch %3d  loss %.4f  train acc %.4f  test acc %.4f  %.3f s\n", epoch,
                loss_sum / static_cast<double>(batches), train_acc, test_acc, secs);
    std::fflush(stdout);
  }
  if (!cfg.export_path.empty()) export_predictor(params, test, cfg);
  if (test_acc < cfg.min_accuracy) {
    std::printf("train_digits: FAILED: final test accuracy %.4f < %.4f\n", test_acc, cfg.min_accuracy);
    return 1;
  }
  std::printf("train_digits: OK: final test accuracy %.4f >= %.4f\n", test_acc, cfg.min_accuracy);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Trains an MLP on the UCI digits data with mcx (jit + value_and_grad + Adam)."};
  app.add_option("--data", cfg.data, "digits.csv.gz (scripts/fetch-digits.sh writes data/digits.csv.gz)");
  app.add_option("--epochs", cfg.epochs, "passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--seed", cfg.seed, "PRNG seed: split, initialisation and shuffles");
  app.add_option("--threads", cfg.threads, "CPU threads (0: MCX_CPU_THREADS or all cores)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--batch", cfg.batch, "minibatch size")->check(CLI::PositiveNumber);
  app.add_option("--lr", cfg.lr, "Adam learning rate")->check(CLI::PositiveNumber);
  app.add_option("--hidden", cfg.hidden, "hidden layer sizes, e.g. --hidden 256 128");
  app.add_option("--min-accuracy", cfg.min_accuracy, "exit 1 when the final test accuracy is below this");
  app.add_option("--export", cfg.export_path, "write the trained predictor as an mcx artifact (symbolic batch)");
  app.add_option("--export-samples", cfg.samples_path, "with --export: write the held-out images as .npy");
  app.add_flag("--skip-if-missing", cfg.skip_if_missing, "exit 77 (skipped) when --data does not exist");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(cfg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_digits: %s\n", e.what());
    return 2;
  }
}
