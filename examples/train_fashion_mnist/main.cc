// Fashion-MNIST with the mcx/data loader: a data-parallel MLP (784-512-512-10, Adam) over the CPU devices of
// one or several processes. The loader reads the gzipped IDX files (scripts/fetch-fashion-mnist.sh), shuffles
// with one seed (the same global batches on any number of processes), normalises the pixels in its worker
// threads and places each process's rows straight onto its devices as a global array split over "data".
//
//   train_fashion_mnist --devices 1                       # data/fashion-mnist, 10 epochs, 1 process x 1 device
//   mcx-run -n 2 --cpu-devices 2 -- train_fashion_mnist   # 2 processes x 2 devices, mesh {data: 4}
//   train_fashion_mnist --steps 30 --min-accuracy 0.6     # a smoke run
//
// Prints the layout, per-epoch progress (loss, examples/s, time the step waited for data) and the final
// "test acc" on the 10,000 held-out images. Exits 0 when test acc >= --min-accuracy (default 0.88), 1 when
// not, 2 on errors, 77 with --skip-if-missing when the data is absent.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "CLI/CLI.hpp"
#include "examples/train_digits/digits_model.h"
#include "examples/train_digits/digits_parallel.h"
#include "examples/train_digits/start_devices.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/data/idx_source.h"
#include "mcx/data/loader.h"
#include "mcx/distributed/cluster.h"
#include "mcx/distributed/distributed.h"
#include "mcx/mcx.h"
#include "mcx/multihost/multihost.h"

namespace {

using mcx::Array;
using mcx::None;
using mcx::P;
using mcx::Tree;
namespace data = mcx::data;

constexpr const char* kTool = "train_fashion_mnist";
constexpr float kMean = 0.2860f, kStd = 0.3530f;  // of the training pixels in [0, 1]

struct Config {
  std::string data = "data/fashion-mnist";
  int epochs = 10;
  int64_t steps = 0;  // > 0: stop after this many steps (smoke runs)
  int batch = 128;
  double lr = 1e-3;
  uint64_t seed = 0;
  int devices = 2;
  int threads = 0;
  double min_accuracy = 0.88;
  bool skip_if_missing = false;
};

// Images as f32[batch, 784] (normalised in the loader's workers), labels as i32[batch].
std::vector<data::Field> fields(const std::string& dir, const std::string& prefix, const mcx::Mesh& mesh) {
  data::SourcePtr images = data::open_idx(dir + "/" + prefix + "-images-idx3-ubyte.gz");
  data::SourcePtr labels = data::open_idx(dir + "/" + prefix + "-labels-idx1-ubyte.gz");
  auto flatten_u8_to_i32 = data::map_example(
      "u8_to_i32", [](const data::ExampleSpec& s) -> absl::StatusOr<data::ExampleSpec> { return data::ExampleSpec{mcx::DType::kInt32, s.dims}; },
      [](const data::ExampleSpec&, std::span<const std::byte> in, std::span<std::byte> out, uint64_t) {
        reinterpret_cast<int32_t*>(out.data())[0] = static_cast<int32_t>(in[0]);
      });
  auto flatten = data::map_example(
      "flatten", [](const data::ExampleSpec& s) -> absl::StatusOr<data::ExampleSpec> { return data::ExampleSpec{s.dtype, {s.num_elements()}}; },
      [](const data::ExampleSpec&, std::span<const std::byte> in, std::span<std::byte> out, uint64_t) {
        std::memcpy(out.data(), in.data(), out.size());
      });
  return {{"image", images, mcx::NamedSharding(mesh, P("data", None)), {data::normalize(kMean, kStd), flatten}},
          {"label", labels, mcx::NamedSharding(mesh, P("data")), {flatten_u8_to_i32}}};
}

int run(const Config& cfg) {
  if (!std::filesystem::exists(cfg.data + "/train-images-idx3-ubyte.gz")) {
    std::printf("%s: %s/train-images-idx3-ubyte.gz not found (bash scripts/fetch-fashion-mnist.sh fetches it)\n", kTool,
                cfg.data.c_str());
    return cfg.skip_if_missing ? 77 : 2;
  }
  const bool distributed = digits::start_devices(cfg.devices, cfg.threads);
  const int global_devices = mcx::device_count();
  const mcx::Mesh mesh = mcx::make_mesh({global_devices}, {"data"});
  const mcx::Sharding replicated = mcx::NamedSharding(mesh, P());

  data::DataLoader train(fields(cfg.data, "train", mesh),
                         {.global_batch = cfg.batch, .seed = cfg.seed, .num_epochs = cfg.epochs, .name = "train"});
  const int64_t per_epoch = train.sampler().batches_per_epoch();
  std::printf("%s: %d process%s x %d devices per process, mesh %s (process %d)\n", kTool, mcx::process_count(),
              mcx::process_count() == 1 ? "" : "es", mcx::local_device_count(), mesh.to_string().c_str(), mcx::process_index());
  std::printf("%s: %lld train examples, MLP 784-512-512-10, Adam lr %g, global batch %d, %lld steps per epoch; this "
              "process reads %lld rows of each batch\n",
              kTool, static_cast<long long>(train.sampler().num_examples()), cfg.lr, cfg.batch,
              static_cast<long long>(per_epoch), static_cast<long long>(train.plan().local_rows));
  std::fflush(stdout);

  const std::vector<int64_t> sizes = {784, 512, 512, digits::kNumClasses};
  auto replicate = [&](const Array& a) { return mcx::device_put(a, replicated); };
  Tree params = mcx::tree_map(replicate, digits::init_params(mcx::random::key(cfg.seed), sizes));
  const digits::AdamState moments = digits::adam_init(params);
  Tree m = mcx::tree_map(replicate, moments.m), v = mcx::tree_map(replicate, moments.v);
  digits::StepFn step = digits::jit_data_parallel_step(mesh, cfg.lr, /*donate=*/true);

  int64_t step_count = 0;
  int64_t epoch = 0;
  auto t_epoch = std::chrono::steady_clock::now();
  absl::Duration waited_before;
  std::vector<Array> losses;
  auto report = [&](bool final_partial) {
    double loss_sum = 0;
    for (const Array& l : losses) loss_sum += l.item<double>();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_epoch).count();
    const double waited = absl::ToDoubleSeconds(train.stats().wait - waited_before);
    std::printf("%s epoch %lld%s  loss %.4f  %.0f examples/s  waited for data %.3f s (%.1f%%)  %.2f s\n", kTool,
                static_cast<long long>(epoch + 1), final_partial ? " (partial)" : "",
                loss_sum / std::max<size_t>(losses.size(), 1), losses.size() * cfg.batch / secs, waited,
                100.0 * waited / secs, secs);
    std::fflush(stdout);
    losses.clear();
    waited_before = train.stats().wait;
    t_epoch = std::chrono::steady_clock::now();
  };
  while (auto batch = train.next()) {
    if (batch->epoch != epoch) {
      report(false);
      epoch = batch->epoch;
    }
    ++step_count;
    Array loss;
    std::tie(params, m, v, loss) = step(params, m, v, mcx::array(static_cast<float>(step_count)), batch->fields[0], batch->fields[1]);
    losses.push_back(loss);
    if (cfg.steps > 0 && step_count >= cfg.steps) break;
  }
  if (!losses.empty()) report(cfg.steps > 0);

  // Held-out accuracy: the test set through a loader too (no shuffle, batches of 1000 over the mesh).
  data::DataLoader test(fields(cfg.data, "t10k", mesh),
                        {.global_batch = 1000, .shuffle = false, .num_epochs = 1, .name = "test"});
  mcx::JitOptions predict_options;
  predict_options.name = "correct";
  auto correct = mcx::jit([](const Tree& p, const Array& x, const Array& y) {
    return mcx::sum(mcx::astype(mcx::equal(digits::predict(p, x), y), mcx::DType::kFloat32));
  }, predict_options);
  double right = 0, total = 0;
  while (auto batch = test.next()) {
    right += correct(params, batch->fields[0], batch->fields[1]).item<double>();
    total += static_cast<double>(batch->real_examples);
  }
  const double acc = right / total;
  std::printf("%s: %lld steps; test acc %.4f on %.0f held-out images\n", kTool, static_cast<long long>(step_count), acc, total);
  if (distributed) mcx::multihost::assert_equal(params, "parameter replicas across processes");
  const int status = digits::finish(kTool, acc, cfg.min_accuracy, true);
  if (distributed) mcx::distributed::shutdown();
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Trains an MLP on Fashion-MNIST, data parallel, fed by the mcx/data loader."};
  app.add_option("--data", cfg.data, "directory of the four gzipped IDX files");
  app.add_option("--epochs", cfg.epochs, "epochs")->check(CLI::PositiveNumber);
  app.add_option("--steps", cfg.steps, "stop after this many steps (0: run every epoch)");
  app.add_option("--batch", cfg.batch, "global batch size (a multiple of the device count)")->check(CLI::PositiveNumber);
  app.add_option("--lr", cfg.lr, "Adam learning rate");
  app.add_option("--seed", cfg.seed, "seed of the initial model and of the loader's order");
  app.add_option("--devices", cfg.devices, "virtual CPU devices per process (mcx-run's --cpu-devices wins)");
  app.add_option("--threads", cfg.threads, "CPU kernel threads (0: default)");
  app.add_option("--min-accuracy", cfg.min_accuracy, "exit 1 below this test accuracy");
  app.add_flag("--skip-if-missing", cfg.skip_if_missing, "exit 77 (skipped) when the data is absent");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(cfg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", kTool, e.what());
    return 2;
  }
}
