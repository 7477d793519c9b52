// Fashion-MNIST with the mcx/data loader: an MLP (784-512-512-10) or a CNN (--model cnn: two 3x3 convolutions
// with max pooling, dense 128), trained data-parallel with Adam over the CPU devices of one or several
// processes. The loader reads the gzipped IDX files (scripts/fetch-fashion-mnist.sh), shuffles with one seed (the
// same global batches on any number of processes), normalises the pixels in its worker threads and places each
// process's rows straight onto its devices as a global array split over "data".
//
//   train_fashion_mnist --devices 1                              # 10 epochs of the MLP, 1 process x 1 device
//   mcx-run -n 2 --cpu-devices 2 --recoverable -- train_fashion_mnist --model cnn --epochs 5
//       --checkpoint-dir ckpt --kill-process 1 --at-step 300 --export model.mcx       (one command line)
//   train_fashion_mnist --steps 30 --min-accuracy 0.6            # a smoke run
//
// Every step is one mcx::with_live_devices scope: it completes on every live process or raises on every one.
// When a process dies (an outside kill -9, or --kill-process P --at-step S) the survivors of a recoverable job
// (mcx-run --recoverable) retry the step on a mesh over the devices still live: they hold the same state, so
// nothing moves between them; the loader is rebuilt on the new mesh at the position of the steps taken, so no
// example of the epoch is lost or read twice (the global batch stays the same and must split over the live
// devices). --checkpoint-dir saves the parameters, the Adam moments and the loader's position at every epoch's end
// (asynchronously, overlapping the next epoch; after a failure only the survivors take part) and at a preemption
// sync point (a SIGTERM to any process; mcx-run forwards its own); --resume continues from the newest one.
// --export writes the trained classifier as an artifact with a symbolic batch (classifier_export.h), which
// examples/serve_model and `mcx-export run` serve.
//
// Prints the layout, per-epoch progress (loss, held-out accuracy, examples/s, time the step waited for data) and
// a summary. Exits 0 when the final held-out accuracy >= --min-accuracy, 1 when not, 2 on errors, 77 with
// --skip-if-missing when the data is absent.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "CLI/CLI.hpp"
#include "nlohmann/json.hpp"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "examples/fault_tolerant_training/train_state.h"
#include "examples/train_digits/digits_model.h"
#include "examples/train_digits/digits_parallel.h"
#include "examples/train_digits/start_devices.h"
#include "examples/train_fashion_mnist/classifier_export.h"
#include "examples/train_fashion_mnist/cnn_model.h"
#include "examples/train_fashion_mnist/fashion_data.h"
#include "mcx/cache/install.h"
#include "mcx/runtime/cpu_backend.h"
#include "mcx/checkpoint/checkpoint_manager.h"
#include "mcx/data/loader.h"
#include "mcx/data/loader_state.h"
#include "mcx/distributed/distributed.h"
#include "mcx/mcx.h"
#include "mcx/multihost/live_devices.h"
#include "mcx/multihost/multihost.h"
#include "mcx/multihost/preemption.h"

namespace {

using fault_tolerant::TrainState;
using mcx::Array;
using mcx::P;
using mcx::Tree;
namespace data = mcx::data;

constexpr const char* kTool = "train_fashion_mnist";
constexpr absl::Duration kScopeTimeout = absl::Seconds(120);

struct Config {
  bool verbose = false;
  std::string data = "data/fashion-mnist";
  std::string model = "mlp";  // mlp | cnn
  int epochs = 10;
  int64_t steps = 0;  // > 0: stop after this many steps (smoke runs)
  int batch = 128;
  double lr = 1e-3;
  uint64_t seed = 0;
  int devices = 2;
  int threads = 0;
  double min_accuracy = 0.88;
  bool skip_if_missing = false;
  std::string checkpoint_dir;  // empty: no checkpoints
  bool resume = false;
  int kill_process = -1;  // failure injection: this process kills itself (SIGKILL) ...
  int64_t at_step = -1;   // ... when it starts this (1-based) step (only its first incarnation) ...
  std::string kill_during = "step";  // ... or right after starting the save of that step, or after its restore
  int64_t save_every = 0;  // > 0: also checkpoint every this many steps
  std::string export_path;
  std::string schedule = "cosine";  // cosine (to 0 over --epochs) | constant
  int measure_allreduce = 0;  // > 0: time this many all-reduces of a gradient-sized tree at the end
  std::string compile_cache;  // persistent compilation cache directory (empty: MCX_COMPILATION_CACHE_DIR)
};

// The model being trained: its parameters, loss and prediction.
struct Model {
  std::string description;
  Tree params;
  digits::LossFn loss;
  fashion::PredictFn predict;
};

Model make_model(const std::string& name, uint64_t seed) {
  if (name == "cnn") {
    return {"CNN " + fashion::cnn_description(), fashion::cnn_init_params(mcx::random::key(seed)), fashion::cnn_loss,
            fashion::cnn_predict};
  }
  const std::vector<int64_t> sizes = {784, 512, 512, digits::kNumClasses};
  return {"MLP 784-512-512-10", digits::init_params(mcx::random::key(seed), sizes), digits::loss, digits::predict};
}

// Where the job computes now: the agreed live devices, a mesh over them, the step compiled for it and the
// loader placing batches onto it.
struct Placement {
  mcx::LiveDevices live;
  mcx::Mesh mesh;
  digits::StepFn step;
  std::unique_ptr<data::DataLoader> train;
};

// The iterator state of the training loader after `steps` steps: the order is the same on any number of
// processes, so the position follows from the step count alone.
data::LoaderState loader_state_at(int64_t steps, int64_t per_epoch, const Config& cfg, int64_t examples) {
  return data::LoaderState{cfg.seed, steps / per_epoch, (steps % per_epoch) * cfg.batch, examples};
}

// correct(params, x, y, mask): how many of the real rows (mask 1) the model classifies right (an f32 scalar).
using CountFn = std::function<Array(const Tree&, const Array&, const Array&, const Array&)>;

// Held-out accuracy over the mesh: every one of the 10,000 test images, in batches of (at most) 1000 split over
// "data"; the last batch is padded to the batch size and its padding masked out, so no image is left out
// whatever the device count.
std::pair<double, int64_t> evaluate(const fashion::FashionSplit& test_data, const CountFn& correct,
                                    const mcx::Mesh& mesh, const Tree& params) {
  const int64_t n = mesh.size();
  data::DataLoader test(fashion::fashion_fields(test_data, mesh),
                        {.global_batch = 1000 - 1000 % n, .shuffle = false, .remainder = data::Remainder::kPad,
                         .num_epochs = 1, .name = "test"});
  double right = 0;
  int64_t total = 0;
  while (auto batch = test.next()) {
    right += correct(params, batch->fields[0], batch->fields[1], *batch->mask).item<double>();
    total += batch->real_examples;
  }
  return {right / static_cast<double>(total), total};
}

// Failure injection: SIGKILL to this process when it is --kill-process.
void kill_self_if(const Config& cfg, const std::string& when) {
  if (mcx::process_index() != cfg.kill_process) return;
  std::printf("%s: process %d kills itself %s (--kill-process)\n", kTool, mcx::process_index(), when.c_str());
  std::fflush(stdout);
  std::raise(SIGKILL);
}

int run(const Config& cfg) {
  if (!std::filesystem::exists(fashion::images_file(cfg.data, "train"))) {
    std::printf("%s: %s not found (bash scripts/fetch-fashion-mnist.sh fetches it)\n", kTool,
                fashion::images_file(cfg.data, "train").c_str());
    return cfg.skip_if_missing ? 77 : 2;
  }
  const auto t_start = std::chrono::steady_clock::now();
  const bool distributed = digits::start_devices(cfg.devices, cfg.threads, /*recoverable=*/true);
  if (!cfg.compile_cache.empty()) {
    mcx::cache::CacheOptions cache_options;
    cache_options.directory = cfg.compile_cache;
    cache_options.process_index = mcx::process_index();
    mcx::value_or_throw(mcx::cache::install_compilation_cache(cache_options));
  }
  const char* restart_count = std::getenv("MCX_RESTART_COUNT");
  if (restart_count != nullptr && std::string(restart_count) != "0") {
    throw mcx::FailedPrecondition("[train_fashion_mnist] this job carries on on the survivors of a failure; it does not "
                                  "take a restarted process back (run mcx-run with --recoverable, not --max-restarts)");
  }
  const Model model = make_model(cfg.model, cfg.seed);
  const fashion::FashionSplit train_data = fashion::open_split(cfg.data, "train");
  const fashion::FashionSplit test_data = fashion::open_split(cfg.data, "t10k");
  mcx::JitOptions count_options;
  count_options.name = "count_correct";
  const CountFn correct = mcx::jit(
      [&model](const Tree& p, const Array& x, const Array& y, const Array& mask) {
        return mcx::sum(mcx::astype(mcx::equal(model.predict(p, x), y), mcx::DType::kFloat32) * mask);
      },
      count_options);
  const int64_t examples = train_data.labels->size();
  const int64_t per_epoch = examples / cfg.batch;
  const int64_t total_steps = cfg.steps > 0 ? std::min<int64_t>(cfg.steps, per_epoch * cfg.epochs) : per_epoch * cfg.epochs;

  TrainState state;
  state.params = model.params;
  const digits::AdamState moments = digits::adam_init(state.params);
  state.m = moments.m;
  state.v = moments.v;
  std::unique_ptr<mcx::checkpoint::CheckpointManager> ckpt;
  if (!cfg.checkpoint_dir.empty()) {
    ckpt = std::make_unique<mcx::checkpoint::CheckpointManager>(cfg.checkpoint_dir,
                                                                 mcx::checkpoint::CheckpointOptions{.max_to_keep = 2, .timeout = kScopeTimeout});
  }
  // FNV-1a over the (epoch, position) of every committed step's batch, carried in the checkpoints: equal for two
  // runs that trained on the same batches in the same order, whatever failed or resumed in between (the tests
  // compare it).
  uint64_t order_digest = 1469598103934665603ull;
  auto mix = [](uint64_t h, int64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((static_cast<uint64_t>(v) >> (8 * i)) & 0xff)) * 1099511628211ull;
    return h;
  };
  auto metadata_at = [&](int64_t steps) {
    return absl::StrFormat(R"({"loader": "%s", "order_digest": "%016x"})",
                           loader_state_at(steps, per_epoch, cfg, examples).to_string(), order_digest);
  };
  const mcx::Mesh all = mcx::make_mesh({mcx::device_count()}, {"data"});
  if (cfg.resume && ckpt != nullptr) {
    if (std::optional<int64_t> step = ckpt->latest_step()) {
      const Tree like = fault_tolerant::onto(fault_tolerant::as_tree(state), all);
      const Tree restored = ckpt->restore(*step, like);
      state = fault_tolerant::from_tree(restored, *step);
      const std::string metadata = ckpt->info(*step).metadata_json;
      const std::string expected = loader_state_at(*step, per_epoch, cfg, examples).to_string();
      const nlohmann::json meta = nlohmann::json::parse(metadata, nullptr, /*allow_exceptions=*/false);
      if (!meta.is_object() || meta.value("loader", "") != expected || !meta.contains("order_digest") ||
          !meta["order_digest"].is_string()) {
        throw mcx::InvalidArgument("[train_fashion_mnist] checkpoint step " + std::to_string(*step) + " in " +
                                   cfg.checkpoint_dir + ": expected the loader state '" + expected +
                                   "' and an order digest, found " + metadata + " (saved with another --batch or --seed?)");
      }
      order_digest = std::stoull(meta["order_digest"].get<std::string>(), nullptr, 16);
      std::printf("%s: resuming from %s step %lld (epoch %lld, loader %s)\n", kTool, cfg.checkpoint_dir.c_str(),
                  static_cast<long long>(*step), static_cast<long long>(*step / per_epoch + 1), expected.c_str());
    } else {
      std::printf("%s: --resume: no checkpoint in %s; starting from step 0\n", kTool, cfg.checkpoint_dir.c_str());
    }
  }
  if (cfg.kill_during == "restore") kill_self_if(cfg, "after restoring its checkpoint");
  std::printf("%s: %d process%s x %d devices per process (process %d), %lld train examples, %s, Adam lr %g (%s), "
              "global batch %d, %lld steps per epoch, %lld steps\n",
              kTool, mcx::process_count(), mcx::process_count() == 1 ? "" : "es", mcx::local_device_count(),
              mcx::process_index(), static_cast<long long>(examples), model.description.c_str(), cfg.lr,
              cfg.schedule.c_str(), cfg.batch,
              static_cast<long long>(per_epoch), static_cast<long long>(total_steps));
  std::fflush(stdout);

  std::optional<Placement> where;
  bool placed_once = false;
  // The processes lost so far: those of the job missing from a live set this process agreed on, whether the
  // failure surfaced in a step (a ProcessFailure) or happened before this process noticed it (before the first
  // step, during a restore or a save).
  std::vector<int> lost;
  std::vector<int> live_before(static_cast<size_t>(mcx::process_count()));
  for (int p = 0; p < mcx::process_count(); ++p) live_before[static_cast<size_t>(p)] = p;
  // Rebuilds the placement when the live set changed: the committed state (identical on every survivor) moves
  // onto the new mesh without communication, and the loader restarts at the position of the steps taken.
  auto place = [&](const mcx::LiveDevices& live) {
    if (where && where->live.generation == live.generation) return;
    const int n = static_cast<int>(live.devices.size());
    if (cfg.batch % n != 0) {
      throw mcx::InvalidArgument("[train_fashion_mnist] expected a --batch that splits over the " + std::to_string(n) +
                                 " live devices, found " + std::to_string(cfg.batch));
    }
    Placement p{live, mcx::make_mesh({n}, {"data"}, live.devices), nullptr, nullptr};
    p.step = digits::jit_data_parallel_step(p.mesh, cfg.lr, /*donate=*/false, "fashion_step", model.loss,
                                            cfg.schedule == "cosine" ? per_epoch * cfg.epochs : 0);
    p.train = std::make_unique<data::DataLoader>(
        fashion::fashion_fields(train_data, p.mesh),
        data::LoaderOptions{.global_batch = cfg.batch, .seed = cfg.seed, .num_epochs = cfg.epochs, .name = "train"});
    p.train->restore(loader_state_at(state.steps, per_epoch, cfg, examples));
    state.params = fault_tolerant::onto(state.params, p.mesh);
    state.m = fault_tolerant::onto(state.m, p.mesh);
    state.v = fault_tolerant::onto(state.v, p.mesh);
    for (int p : live_before) {
      if (std::find(live.processes.begin(), live.processes.end(), p) != live.processes.end()) continue;
      lost.push_back(p);
      std::printf("%s: process %d is not in the live set (generation %llu): the job carries on without it\n", kTool,
                  p, static_cast<unsigned long long>(live.generation));
    }
    live_before = live.processes;
    // The checkpoint manager follows the live set by itself: the next save is taken by these processes.
    if (placed_once || live.processes.size() < static_cast<size_t>(mcx::process_count())) {
      std::printf("%s: live processes {%s} (generation %llu): %d devices; the loader resumes at step %lld (%s)\n",
                  kTool, absl::StrJoin(live.processes, ",").c_str(), static_cast<unsigned long long>(live.generation), n,
                  static_cast<long long>(state.steps + 1), p.train->state().to_string().c_str());
      std::fflush(stdout);
    }
    where = std::move(p);
    placed_once = true;
  };
  // Runs body(placement) as one with_live_devices scope, retried on the survivors after a process failure.
  auto in_scope = [&](const auto& body) {
    for (;;) {
      try {
        return mcx::with_live_devices(
            mcx::devices(),
            [&](const mcx::LiveDevices& live) {
              place(live);
              return body(*where);
            },
            kScopeTimeout);
      } catch (const mcx::ProcessFailure& e) {
        std::printf("%s: process %d is gone (%s); retrying step %lld on the live processes\n", kTool, e.process(),
                    e.what(), static_cast<long long>(state.steps + 1));
        std::fflush(stdout);
        where.reset();
      }
    }
  };

  // The outcome of the save in flight (its error is reported, never rethrown: a failed save leaves the previous
  // checkpoint and the job goes on), then a new asynchronous save of the state.
  int64_t saving_step = -1;
  auto collect_save = [&] {
    try {
      ckpt->wait();
      if (saving_step >= 0) {
        std::printf("%s: checkpoint of step %lld committed\n", kTool, static_cast<long long>(saving_step));
      }
    } catch (const mcx::Error& e) {  // e.g. a process died during it
      std::printf("%s: checkpoint of step %lld not saved: %s\n", kTool, static_cast<long long>(saving_step), e.what());
    }
    saving_step = -1;
    std::fflush(stdout);
  };
  auto save_checkpoint = [&] {
    collect_save();
    try {
      ckpt->save_async(state.steps, fault_tolerant::as_tree(state), metadata_at(state.steps));
      saving_step = state.steps;
    } catch (const mcx::Error& e) {
      std::printf("%s: checkpoint of step %lld not saved: %s\n", kTool, static_cast<long long>(state.steps), e.what());
    }
    if (cfg.kill_during == "save" && state.steps == cfg.at_step) {
      kill_self_if(cfg, "while saving the checkpoint of step " + std::to_string(cfg.at_step));
    }
  };

  struct StepOutcome {
    TrainState state;
    double loss = 0;
    double data_wait = 0, program = 0;  // seconds waiting for the batch; running the step program
    int64_t epoch = 0, position = 0;    // where the step's batch starts in the global order
  };
  // Per epoch: the step's time split into waiting for data, the step program (compute and its all-reduces) and
  // the rest of the scope (the live-set agreement on exit, placing t).
  double loss_sum = 0, data_wait = 0, program = 0, scope = 0, acc = 0, last_epoch_secs = 0;
  int64_t tested = 0, epoch_steps = 0;
  bool reported_compile = false;
  auto t_epoch = std::chrono::steady_clock::now();
  auto seconds_since = [](auto t0) { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  auto test_now = [&] {
    std::tie(acc, tested) = in_scope([&](const Placement& p) { return evaluate(test_data, correct, p.mesh, state.params); });
  };
  while (state.steps < total_steps) {
    if (cfg.kill_during == "step" && state.steps + 1 == cfg.at_step) kill_self_if(cfg, "at step " + std::to_string(cfg.at_step));
    const auto t_scope = std::chrono::steady_clock::now();
    StepOutcome next = in_scope([&](const Placement& p) {
      const auto t0 = std::chrono::steady_clock::now();
      std::optional<data::Batch> batch = p.train->next();
      const double waited = seconds_since(t0);
      const auto t1 = std::chrono::steady_clock::now();
      if (!batch) throw mcx::Internal("[train_fashion_mnist] the loader ended before step " + std::to_string(state.steps + 1));
      if (cfg.verbose && !reported_compile && mcx::process_index() == 0) {  // where the first batch lives
        // Drawn from the sharding alone (no computation: the other processes are not taking part): the batch
        // dimension, as the images' sharding splits it.
        const mcx::Sharding& images = batch->fields[0].sharding();
        const std::vector<int64_t> rows = {batch->fields[0].dims()[0]};
        std::printf("train_fashion_mnist: batch images %s, rows:\n%s", images.to_string().c_str(),
                    mcx::visualize_sharding(rows, mcx::NamedSharding(images.mesh(), mcx::PartitionSpec({images.spec().dims()[0]})))
                        .c_str());
      }
      const Array t = mcx::device_put(mcx::array(static_cast<float>(state.steps + 1)), mcx::NamedSharding(p.mesh, P()));
      auto [params, m, v, loss] = p.step(state.params, state.m, state.v, t, batch->fields[0], batch->fields[1]);
      const double l = loss.item<double>();  // waits for the step inside the scope
      return StepOutcome{TrainState{params, m, v, state.steps + 1}, l, waited, seconds_since(t1), batch->epoch,
                         batch->position};
    });
    scope += seconds_since(t_scope);
    program += next.program;
    state = std::move(next.state);  // the scope completed on every live process: commit
    order_digest = mix(mix(order_digest, next.epoch), next.position);
    loss_sum += next.loss;
    data_wait += next.data_wait;
    ++epoch_steps;
    if (!reported_compile) {
      // The warm start: how much of the first step was making kernels, and whether the cache supplied them.
      reported_compile = true;
      const mcx::CompileStatistics cs = mcx::compile_statistics();
      std::printf("%s: first step done %.2f s after start; kernels: %lld compiled (%.0f ms), %lld loaded from the "
                  "compilation cache (%.0f ms); executables: %lld read back (%.0f ms), %lld partitioned programs "
                  "read back, %lld partitioned%s\n",
                  kTool, seconds_since(t_start), static_cast<long long>(cs.kernels_compiled), cs.kernel_compile_ms,
                  static_cast<long long>(cs.kernels_loaded), cs.kernel_load_ms,
                  static_cast<long long>(cs.executables_loaded), cs.executable_load_ms,
                  static_cast<long long>(cs.programs_loaded), static_cast<long long>(cs.programs_partitioned),
                  mcx::cache::installed_compilation_cache() ? "" : " (no cache: --compile-cache DIR)");
      std::fflush(stdout);
    }
    const bool epoch_end = state.steps % per_epoch == 0;
    if (mcx::multihost::reached_preemption_sync_point(state.steps)) {
      if (ckpt != nullptr) {
        collect_save();
        ckpt->save(state.steps, fault_tolerant::as_tree(state), metadata_at(state.steps));
      }
      std::printf("%s: preempted: stopping at step %lld%s\n", kTool, static_cast<long long>(state.steps),
                  ckpt != nullptr ? (", checkpoint saved in " + cfg.checkpoint_dir).c_str() : " (no --checkpoint-dir)");
      std::fflush(stdout);
      if (distributed) digits::leave_job(0);
      return 0;
    }
    if (ckpt != nullptr && cfg.save_every > 0 && state.steps % cfg.save_every == 0 && !epoch_end &&
        state.steps < total_steps) {
      save_checkpoint();
      continue;
    }
    if (!epoch_end && state.steps < total_steps) continue;
    const double secs = seconds_since(t_epoch);
    test_now();
    last_epoch_secs = secs;
    const double ms = 1000.0 / static_cast<double>(epoch_steps);
    std::printf("%s epoch %lld%s  loss %.4f  test acc %.4f  %.0f examples/s  waited for data %.2f s (%.1f%%)  "
                "%.1f s  %zu devices  step %.1f ms = data %.2f + program %.1f + agreement %.2f\n",
                kTool, static_cast<long long>((state.steps - 1) / per_epoch + 1), epoch_end ? "" : " (partial)",
                loss_sum / static_cast<double>(epoch_steps), acc, static_cast<double>(epoch_steps * cfg.batch) / secs,
                data_wait, 100.0 * data_wait / secs, secs, where->live.devices.size(), scope * ms, data_wait * ms,
                program * ms, (scope - data_wait - program) * ms);
    std::fflush(stdout);
    if (ckpt != nullptr) save_checkpoint();  // each epoch's end, and where the run stops
    loss_sum = data_wait = program = scope = 0;
    epoch_steps = 0;
    t_epoch = std::chrono::steady_clock::now();
  }
  if (tested == 0) test_now();  // resumed at the end: nothing trained, still report the accuracy
  if (ckpt != nullptr) collect_save();
  if (cfg.measure_allreduce > 0) {
    // The step's collectives alone: each parameter leaf summed over the mesh, as the gradient all-reduce does.
    const double secs = in_scope([&](const Placement& p) {
      auto psum_leaf = mcx::shard_map([](const Array& leaf) { return mcx::psum(leaf, "data"); }, p.mesh, {P()}, {P()},
                                      "allreduce_probe");
      auto once = [&] {
        for (const Array& leaf : mcx::tree_leaves(state.params)) psum_leaf(leaf).block_until_ready();
      };
      once();  // compile
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < cfg.measure_allreduce; ++i) once();
      return seconds_since(t0) / cfg.measure_allreduce;
    });
    std::printf("%s: all-reduce of the %zu gradient leaves over %zu devices: %.2f ms per step\n", kTool,
                mcx::tree_leaves(state.params).size(), where->live.devices.size(), secs * 1000.0);
  }
  size_t artifact_bytes = 0;
  if (!cfg.export_path.empty() && mcx::process_index() == where->live.processes.front()) {
    artifact_bytes = fashion::export_classifier(state.params, model.predict, cfg.export_path);
    std::printf("%s: exported the classifier (u8[b,28,28] -> i32[b]) to %s, %zu bytes\n", kTool,
                cfg.export_path.c_str(), artifact_bytes);
  }
  std::printf("%s: summary: test acc %.4f on %lld held-out images; %lld steps; last epoch %.1f s; %lld process "
              "failure%s survived%s%s; batch order digest %016llx; parameters digest %016llx\n",
              kTool, acc, static_cast<long long>(tested), static_cast<long long>(state.steps), last_epoch_secs,
              static_cast<long long>(lost.size()), lost.size() == 1 ? "" : "s",
              lost.empty() ? "" : " (lost {", lost.empty() ? "" : (absl::StrJoin(lost, ",") + "})").c_str(),
              static_cast<unsigned long long>(order_digest),
              static_cast<unsigned long long>(fault_tolerant::digest(state.params)));
  const int status = digits::finish(kTool, acc, cfg.min_accuracy, true);
  std::fflush(stdout);
  if (distributed) digits::leave_job(status);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Trains an MLP or a CNN on Fashion-MNIST, data parallel, fed by the mcx/data loader."};
  app.add_option("--data", cfg.data, "directory of the four gzipped IDX files");
  app.add_option("--model", cfg.model, "mlp (784-512-512-10) or cnn (two 3x3 convolutions, max pooling, dense 128)")
      ->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--epochs", cfg.epochs, "epochs")->check(CLI::PositiveNumber);
  app.add_option("--steps", cfg.steps, "stop after this many steps in all (0: run every epoch)");
  app.add_option("--batch", cfg.batch, "global batch size (a multiple of the live device count)")->check(CLI::PositiveNumber);
  app.add_option("--lr", cfg.lr, "Adam learning rate");
  app.add_option("--schedule", cfg.schedule, "learning rate: cosine (from --lr down to 0 over --epochs) or constant")
      ->check(CLI::IsMember({"cosine", "constant"}));
  app.add_option("--seed", cfg.seed, "seed of the initial model and of the loader's order");
  app.add_option("--devices", cfg.devices, "virtual CPU devices per process (mcx-run's --cpu-devices wins)");
  app.add_option("--threads", cfg.threads, "CPU kernel threads (0: default)");
  app.add_option("--min-accuracy", cfg.min_accuracy, "exit 1 below this held-out accuracy");
  app.add_flag("--skip-if-missing", cfg.skip_if_missing, "exit 77 (skipped) when the data is absent");
  app.add_flag("--verbose", cfg.verbose, "also draw where the first batch lives (visualize_array_sharding)");
  app.add_option("--checkpoint-dir", cfg.checkpoint_dir,
                 "save a checkpoint (state + loader position) at each epoch's end and on preemption");
  app.add_flag("--resume", cfg.resume, "continue from the newest checkpoint in --checkpoint-dir, when there is one");
  app.add_option("--kill-process", cfg.kill_process, "failure injection: this process kills itself (SIGKILL) ...");
  app.add_option("--at-step", cfg.at_step, "... when it starts this (1-based) step ...");
  app.add_option("--kill-during", cfg.kill_during,
                 "... (step) or right after it started saving the checkpoint of step --at-step (save), or right after "
                 "its --resume restored the checkpoint (restore)")
      ->check(CLI::IsMember({"step", "save", "restore"}));
  app.add_option("--save-every", cfg.save_every, "also save a checkpoint every this many steps (with --checkpoint-dir)");
  app.add_option("--measure-allreduce", cfg.measure_allreduce,
                 "at the end, time this many all-reduces of the gradient leaves (the step's collectives alone)");
  app.add_option("--export", cfg.export_path, "write the trained classifier as an mcx artifact (symbolic batch)");
  app.add_option("--compile-cache", cfg.compile_cache,
                 "persistent compilation cache directory: executables and generated kernels are written there, and "
                 "a later run reads them back instead of compiling (default: MCX_COMPILATION_CACHE_DIR, if set)");
  std::string platform;
  app.add_option("--platform", platform, "run on this platform (cpu, cuda; as MCX_PLATFORMS, which it sets)");
  CLI11_PARSE(app, argc, argv);
  // The platform is chosen before anything makes the devices.
  if (!platform.empty()) setenv("MCX_PLATFORMS", platform.c_str(), 1);
  try {
    return run(cfg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", kTool, e.what());
    std::fflush(stderr);
    return 2;
  }
}
