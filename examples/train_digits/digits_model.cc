#include "examples/train_digits/digits_model.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "CLI/CLI.hpp"
#include "mcx/core/error.h"
#include "mcx/trace/array.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/random.h"

namespace digits {

using mcx::Array;
using mcx::Tree;

namespace {

std::vector<int32_t> host_permutation(const Array& key, int64_t n) {
  return mcx::random::permutation(key, n).to_vector<int32_t>();
}

}  // namespace

std::vector<int64_t> layer_sizes(int64_t features, const std::vector<int64_t>& hidden) {
  std::vector<int64_t> sizes = {features};
  sizes.insert(sizes.end(), hidden.begin(), hidden.end());
  sizes.push_back(kNumClasses);
  return sizes;
}

std::string layer_sizes_string(const std::vector<int64_t>& sizes) {
  std::string out;
  for (int64_t s : sizes) out += (out.empty() ? "" : "-") + std::to_string(s);
  return out;
}

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

Array predict(const Tree& params, const Array& x) { return mcx::argmax(logits(params, x), 1); }

Array loss(const Tree& params, const Array& x, const Array& y) {
  return -mcx::mean(mcx::sum(mcx::log_softmax(logits(params, x)) * mcx::one_hot(y, kNumClasses), -1));
}

AdamState adam_init(const Tree& params) {
  return {mcx::tree_map([](const Array& p) { return mcx::zeros_like(p); }, params),
          mcx::tree_map([](const Array& p) { return mcx::zeros_like(p); }, params)};
}

std::tuple<Tree, Tree, Tree> adam_update(const Tree& params, const Tree& grads, const Tree& m, const Tree& v,
                                         const Array& t, double lr) {
  constexpr double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  auto [p, def] = mcx::tree_flatten(params);
  std::vector<Array> g = mcx::tree_leaves(grads), m1 = mcx::tree_leaves(m), v1 = mcx::tree_leaves(v);
  const Array c1 = 1.0 - mcx::power(mcx::full_like(t, b1), t);  // bias corrections 1 - beta^t
  const Array c2 = 1.0 - mcx::power(mcx::full_like(t, b2), t);
  for (size_t i = 0; i < p.size(); ++i) {
    m1[i] = b1 * m1[i] + (1.0 - b1) * g[i];
    v1[i] = b2 * v1[i] + (1.0 - b2) * g[i] * g[i];
    p[i] = p[i] - lr * (m1[i] / c1) / (mcx::sqrt(v1[i] / c2) + eps);
  }
  return {mcx::tree_unflatten<Tree>(def, p), mcx::tree_unflatten<Tree>(def, m1),
          mcx::tree_unflatten<Tree>(def, v1)};
}

Array to_x(const Dataset& d) { return mcx::array(d.x, {d.rows, d.features}); }
Array to_y(const Dataset& d) { return mcx::array(d.y, {d.rows}); }

double accuracy(const Array& predicted, const Dataset& d) {
  const std::vector<int32_t> pred = predicted.to_vector<int32_t>();
  if (static_cast<int64_t>(pred.size()) != d.rows) {
    throw mcx::InvalidArgument("[digits::accuracy] expected " + std::to_string(d.rows) +
                               " predictions, found " + std::to_string(pred.size()));
  }
  int64_t ok = 0;
  for (int64_t i = 0; i < d.rows; ++i) ok += pred[i] == d.y[i];
  return static_cast<double>(ok) / static_cast<double>(d.rows);
}

Experiment prepare_experiment(const std::string& path, uint64_t seed) {
  Dataset all = mcx::value_or_throw(load_csv_gz(path));
  scale_features(all, 16.0f);  // pixels are 0..16
  std::vector<Array> keys = mcx::random::split_keys(mcx::random::key(seed), 3);  // split, init, shuffles
  const std::vector<int32_t> order = host_permutation(keys[0], all.rows);
  const int64_t n_test = all.rows / 5;
  Experiment e;
  e.test = gather_rows(all, order, 0, n_test);
  e.train = gather_rows(all, order, n_test, all.rows);
  e.init_key = keys[1];
  e.shuffle_key = keys[2];
  return e;
}

std::vector<int32_t> epoch_order(const Experiment& e, int epoch) {
  return host_permutation(mcx::random::fold_in(e.shuffle_key, static_cast<uint32_t>(epoch)), e.train.rows);
}

void add_train_flags(CLI::App& app, TrainFlags& flags, const std::string& batch_help) {
  app.add_option("--data", flags.data, "digits.csv.gz (scripts/fetch-digits.sh writes data/digits.csv.gz)");
  app.add_option("--epochs", flags.epochs, "passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--seed", flags.seed, "PRNG seed: split, initialisation and shuffles");
  app.add_option("--threads", flags.threads, "CPU threads (0: MCX_CPU_THREADS or all cores)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--batch", flags.batch, batch_help)->check(CLI::PositiveNumber);
  app.add_option("--lr", flags.lr, "Adam learning rate")->check(CLI::PositiveNumber);
  app.add_option("--hidden", flags.hidden, "hidden layer sizes, e.g. --hidden 256 128");
  app.add_option("--min-accuracy", flags.min_accuracy, "exit 1 when the final test accuracy is below this");
  app.add_flag("--skip-if-missing", flags.skip_if_missing, "exit 77 (skipped) when --data does not exist");
}

bool skip_missing_data(const TrainFlags& flags, const std::string& tool) {
  if (!flags.skip_if_missing || std::filesystem::exists(flags.data)) return false;
  std::printf("%s: %s not found (run scripts/fetch-digits.sh); skipping\n", tool.c_str(), flags.data.c_str());
  return true;
}

int finish(const std::string& tool, double test_acc, double min_accuracy, bool checks_ok) {
  if (test_acc < min_accuracy) {
    std::printf("%s: FAILED: final test accuracy %.4f < %.4f\n", tool.c_str(), test_acc, min_accuracy);
    return 1;
  }
  if (!checks_ok) return 1;
  std::printf("%s: OK: final test accuracy %.4f >= %.4f\n", tool.c_str(), test_acc, min_accuracy);
  return 0;
}

}  // namespace digits
