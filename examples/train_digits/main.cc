// Trains a multilayer perceptron on the UCI optical-digits data (8x8 images, 10 classes) with mcx:
// parameters are a pytree (mcx::Tree), the loss and its gradient are one compiled program
// (jit(value_and_grad(loss))), the Adam update is another jitted function written with mcx ops, and the
// train/test split and the per-epoch shuffles come from mcx::random keys. The model, loss, optimiser and
// split live in digits_model.h, shared with examples/data_parallel_digits.
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
#include <cstdio>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "CLI/CLI.hpp"
#include "examples/train_digits/digits_data.h"
#include "examples/train_digits/digits_model.h"
#include "mcx/runtime/cpu_backend.h"
#include "mcx/core/error.h"
#include "mcx/core/npy.h"
#include "mcx/trace/export.h"
#include "mcx/trace/grad.h"
#include "mcx/trace/jit.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/pytree.h"

namespace {

using mcx::Array;
using mcx::Tree;

// JitOptions naming the program, every other option at its default.
mcx::JitOptions named(const std::string& name) {
  mcx::JitOptions options;
  options.name = name;
  return options;
}

struct Config : digits::TrainFlags {
  std::string export_path;   // write the trained predictor here (empty: do not export)
  std::string samples_path;  // write the held-out images here as .npy (empty: do not)
};

// Exports digits::predict (argmax of the logits) with the trained weights captured as constants and the batch size left
// symbolic, so one artifact classifies any number of images.
void export_predictor(const Tree& params, const digits::Dataset& test, const Config& cfg) {
  mcx::Exported exported =
      mcx::export_fn([params](const Array& x) { return digits::predict(params, x); },
                     {.name = "digits_predict"})(
          mcx::AbstractValue{mcx::DType::kFloat32, mcx::symbolic_shape("b, " + std::to_string(test.features))});
  const std::string bytes = exported.serialize();
  std::ofstream out(cfg.export_path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw mcx::Unavailable("[train_digits] cannot write " + cfg.export_path);
  std::printf("train_digits: exported the predictor (f32[b,%lld] -> i32[b]) to %s, %zu bytes\n",
              static_cast<long long>(test.features), cfg.export_path.c_str(), bytes.size());
  if (!cfg.samples_path.empty()) {
    mcx::throw_if_error(mcx::write_npy(cfg.samples_path, digits::to_x(test).to_host()));
    std::printf("train_digits: wrote %lld held-out images to %s\n", static_cast<long long>(test.rows),
                cfg.samples_path.c_str());
  }
}

int run(const Config& cfg) {
  if (cfg.threads > 0) mcx::set_num_cpu_threads(cfg.threads);
  if (digits::skip_missing_data(cfg, "train_digits")) return 77;
  const digits::Experiment ex = digits::prepare_experiment(cfg.data, cfg.seed);
  const digits::Dataset& train = ex.train;
  const digits::Dataset& test = ex.test;
  int64_t batches = train.rows / cfg.batch;  // the last partial batch is dropped: one compiled shape
  if (batches == 0) throw mcx::InvalidArgument("[train_digits] --batch is larger than the training set");

  const std::vector<int64_t> sizes = digits::layer_sizes(train.features, cfg.hidden);
  Tree params = digits::init_params(ex.init_key, sizes);
  digits::AdamState opt = digits::adam_init(params);

  auto loss_and_grad = mcx::jit(mcx::value_and_grad(digits::loss), named("loss_and_grad"));
  auto update = mcx::jit(digits::adam_update, named("adam"));
  auto predict = mcx::jit(digits::predict, named("predict"));
  auto accuracy = [&](const Tree& p, const digits::Dataset& d) {
    return digits::accuracy(predict(p, digits::to_x(d)), d);
  };

  std::printf("train_digits: %lld train / %lld test rows, MLP %s, Adam lr %g, batch %d, %d threads\n",
              static_cast<long long>(train.rows), static_cast<long long>(test.rows),
              digits::layer_sizes_string(sizes).c_str(), cfg.lr, cfg.batch, mcx::num_cpu_threads());
  double test_acc = 0;
  int64_t step = 0;
  for (int epoch = 1; epoch <= cfg.epochs; ++epoch) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> perm = digits::epoch_order(ex, epoch);
    double loss_sum = 0;
    for (int64_t b = 0; b < batches; ++b) {
      digits::Dataset mb = digits::gather_rows(train, perm, b * cfg.batch, (b + 1) * cfg.batch);
      auto [l, grads] = loss_and_grad(params, digits::to_x(mb), digits::to_y(mb));
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
  return digits::finish("train_digits", test_acc, cfg.min_accuracy, /*checks_ok=*/true);
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Trains an MLP on the UCI digits data with mcx (jit + value_and_grad + Adam)."};
  digits::add_train_flags(app, cfg, "minibatch size");
  app.add_option("--export", cfg.export_path, "write the trained predictor as an mcx artifact (symbolic batch)");
  app.add_option("--export-samples", cfg.samples_path, "with --export: write the held-out images as .npy");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(cfg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_digits: %s\n", e.what());
    return 2;
  }
}
