// The model and training pieces shared by the digits examples (train_digits and data_parallel_digits):
// the ReLU MLP, its loss and Adam update (all written with mcx ops, so they trace into jit, grad and
// shard_map bodies), the seeded train/test split and per-epoch shuffles, and the command-line flags and
// exit conventions both programs have. Both programs use these same functions, so one seed gives them
// the same initial model, split and shuffles.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "examples/train_digits/digits_data.h"
#include "mcx/trace/pytree.h"

namespace CLI {
class App;
}  // namespace CLI

namespace digits {

inline constexpr int kNumClasses = 10;

// The MLP's layer widths: {features, hidden..., kNumClasses}.
std::vector<int64_t> layer_sizes(int64_t features, const std::vector<int64_t>& hidden);

// "64-128-10" for {64, 128, 10}.
std::string layer_sizes_string(const std::vector<int64_t>& sizes);

// {"w0": f32[in, h0], "b0": f32[h0], ...}: layer i has He-initialised weights "w<i>" (normal draws from
// the i-th of split_keys(key, layers)) and zero biases "b<i>". sizes as from layer_sizes.
mcx::Tree init_params(const mcx::Array& key, const std::vector<int64_t>& sizes);

// Logits of the ReLU MLP (no activation after the last layer) for x: f32[rows, features].
mcx::Array logits(const mcx::Tree& params, const mcx::Array& x);

// The predicted class of each row of x: argmax of the logits, i32[rows].
mcx::Array predict(const mcx::Tree& params, const mcx::Array& x);

// Mean softmax cross-entropy of the logits against integer labels y: i32[rows]. Inside a shard_map body
// this is the mean over the device's rows.
mcx::Array loss(const mcx::Tree& params, const mcx::Array& x, const mcx::Array& y);

// Adam's first and second moments, one leaf per parameter.
struct AdamState {
  mcx::Tree m, v;
};

// Zero moments shaped like params.
AdamState adam_init(const mcx::Tree& params);

// One Adam step (Kingma & Ba: beta1 0.9, beta2 0.999, eps 1e-8) on every leaf: returns the new
// parameters, m and v. t is the 1-based step count as an f32 scalar (traced, so a jitted update compiles
// once); grads, m and v have the structure of params.
std::tuple<mcx::Tree, mcx::Tree, mcx::Tree> adam_update(const mcx::Tree& params, const mcx::Tree& grads,
                                                        const mcx::Tree& m, const mcx::Tree& v,
                                                        const mcx::Array& t, double lr);

// The images of d as f32[rows, features] and its labels as i32[rows].
mcx::Array to_x(const Dataset& d);
mcx::Array to_y(const Dataset& d);

// The fraction of d's rows whose label equals predicted (i32[d.rows], e.g. from predict).
double accuracy(const mcx::Array& predicted, const Dataset& d);

// A run's data and keys, all derived from one seed: the pixels scaled to [0, 1], a random fifth of the
// rows held out as the test set, the key for init_params and the key epoch_order folds the epoch into.
struct Experiment {
  Dataset train, test;
  mcx::Array init_key;
  mcx::Array shuffle_key;
};

// Loads path (load_csv_gz) and splits it as above. Throws mcx::Error (NotFound, InvalidArgument) when
// the file cannot be read.
Experiment prepare_experiment(const std::string& path, uint64_t seed);

// The order in which epoch `epoch` (1-based) visits e.train's rows: a permutation of 0..e.train.rows.
std::vector<int32_t> epoch_order(const Experiment& e, int epoch);

// The flags both programs take.
struct TrainFlags {
  std::string data = "data/digits.csv.gz";
  int epochs = 40;
  uint64_t seed = 0;
  int threads = 0;
  int batch = 64;
  double lr = 3e-3;
  std::vector<int64_t> hidden = {128};
  double min_accuracy = 0.95;
  bool skip_if_missing = false;
};

// Adds --data, --epochs, --seed, --threads, --batch (described by batch_help), --lr, --hidden,
// --min-accuracy and --skip-if-missing to app, bound to flags (which must outlive the parse).
void add_train_flags(CLI::App& app, TrainFlags& flags, const std::string& batch_help);

// True (after saying so on stdout) when --skip-if-missing is given and the data file does not exist:
// the program should then exit 77, CTest's "skipped".
bool skip_missing_data(const TrainFlags& flags, const std::string& tool);

// The exit status of a finished run: 1 (after printing why) when test_acc is below min_accuracy or
// checks_ok is false (the caller has printed the failed check), 0 (after printing OK) otherwise.
int finish(const std::string& tool, double test_acc, double min_accuracy, bool checks_ok);

}  // namespace digits
