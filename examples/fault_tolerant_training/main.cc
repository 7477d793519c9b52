// fault_tolerant_training: the digits MLP trained data-parallel over the processes of a recoverable job, which
// carries on when a process dies (JAX's "fault tolerant distributed JAX" example without rejoin, on CPU):
//
//   build/bin/mcx-run -n 3 --cpu-devices 1 --recoverable -- build/examples/fault_tolerant_training/fault_tolerant_training
//
// and kill any process (process 0 too) from outside, or inject it with --kill-process P --at-step S. Every step
// runs on a mesh over the devices that mcx::live_devices agreed are live. When a step fails because a process
// died (mcx::ProcessFailure), the survivors agree on the new live set, rebuild the mesh and the step over it,
// put their own copy of the parameters and optimizer state (bitwise identical on every survivor) onto it and
// retry the same step, so no step is lost or taken twice. At the end each survivor prints the held-out accuracy
// and a digest of its parameters (the test compares them across survivors).
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "examples/train_digits/digits_data.h"
#include "examples/train_digits/digits_model.h"
#include "examples/train_digits/digits_parallel.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/core/hash.h"
#include "mcx/distributed/cluster.h"
#include "mcx/distributed/distributed.h"
#include "mcx/mcx.h"
#include "mcx/multihost/live_devices.h"

namespace {

using mcx::Array;
using mcx::Tree;

constexpr const char* kTool = "fault_tolerant_training";

struct Config : digits::TrainFlags {
  int kill_process = -1;   // failure injection: this process kills itself (SIGKILL) ...
  int64_t at_step = -1;    // ... when it starts this (1-based) step
};

struct TrainState {
  Tree params, m, v;
};

// Where the job computes now: the agreed live devices and the step compiled for them.
struct LiveMesh {
  mcx::LiveDevices live;
  mcx::Mesh mesh;
  digits::StepFn step;
};

LiveMesh agree_on_live_mesh(double lr) {
  mcx::LiveDevices live = mcx::live_devices(mcx::devices(), absl::Seconds(60));
  mcx::Mesh mesh = mcx::make_mesh({static_cast<int64_t>(live.devices.size())}, {"data"}, live.devices);
  digits::StepFn step = digits::jit_data_parallel_step(mesh, lr, /*donate=*/false, "ft_step");
  return LiveMesh{std::move(live), mesh, std::move(step)};
}

// This process's copy of every leaf (all replicas are bitwise identical), replicated over `mesh`.
Tree onto(const Tree& tree, const mcx::Mesh& mesh) {
  const mcx::Sharding replicated = mcx::NamedSharding(mesh, mcx::P());
  return mcx::tree_map(
      [&](const Array& leaf) {
        const Array local = leaf.addressable_shards().front().data;
        const mcx::Buffer host = local.to_host();
        return mcx::make_array_from_callback(leaf.dims(), leaf.dtype(), replicated,
                                             [&](const mcx::IndexBox&) { return host; });
      },
      tree);
}

uint64_t digest(const Tree& tree) {
  std::string bytes;
  for (const Array& leaf : mcx::tree_leaves(tree)) {
    const mcx::Buffer b = leaf.addressable_shards().front().data.to_host();
    bytes.append(static_cast<const char*>(b.data()), static_cast<size_t>(b.nbytes()));
  }
  return mcx::fnv1a64(bytes);
}

int run(const Config& cfg) {
  if (digits::skip_missing_data(cfg, kTool)) return 77;
  const bool distributed = mcx::distributed::launched_as_job(mcx::distributed::process_env());
  if (distributed) {
    mcx::distributed::InitializeOptions init;
    init.recoverable = true;  // when this process hosts the service; under mcx-run, pass --recoverable
    init.on_failure = [](const mcx::distributed::TaskFailure& f) {
      std::printf("%s: the coordination service reports: %s\n", kTool, f.message.c_str());
      std::fflush(stdout);
    };
    mcx::distributed::initialize(init);
  }
  if (cfg.threads > 0) mcx::cpu::set_num_threads(cfg.threads);

  const digits::Experiment ex = digits::prepare_experiment(cfg.data, cfg.seed);
  const int64_t batches = ex.train.rows / cfg.batch;
  if (batches == 0) throw mcx::InvalidArgument("[fault_tolerant_training] --batch is larger than the training set");
  const std::vector<int64_t> sizes = digits::layer_sizes(ex.train.features, cfg.hidden);

  LiveMesh where = agree_on_live_mesh(cfg.lr);
  TrainState state;
  {
    const mcx::Sharding replicated = mcx::NamedSharding(where.mesh, mcx::P());
    auto replicate = [&](const Array& a) { return mcx::device_put(a, replicated); };
    state.params = mcx::tree_map(replicate, digits::init_params(ex.init_key, sizes));
    const digits::AdamState moments = digits::adam_init(state.params);
    state.m = mcx::tree_map(replicate, moments.m);
    state.v = mcx::tree_map(replicate, moments.v);
  }
  std::printf("%s: process %d of %d, MLP %s, global batch %d, %lld steps per epoch, live devices %zu (generation "
              "%llu)\n",
              kTool, mcx::process_index(), mcx::process_count(), digits::layer_sizes_string(sizes).c_str(), cfg.batch,
              static_cast<long long>(batches), where.live.devices.size(),
              static_cast<unsigned long long>(where.live.generation));
  std::fflush(stdout);

  int64_t step_count = 0, retries = 0;
  double test_acc = 0;
  mcx::JitOptions predict_options;
  predict_options.name = "predict";
  auto predict = mcx::jit(digits::predict, predict_options);
  for (int epoch = 1; epoch <= cfg.epochs; ++epoch) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> perm = digits::epoch_order(ex, epoch);
    double loss_sum = 0;
    for (int64_t b = 0; b < batches;) {
      if (mcx::process_index() == cfg.kill_process && step_count + 1 == cfg.at_step) {
        std::printf("%s: process %d kills itself at step %lld (--kill-process)\n", kTool, mcx::process_index(),
                    static_cast<long long>(cfg.at_step));
        std::fflush(stdout);
        std::raise(SIGKILL);
      }
      try {
        if (cfg.batch % static_cast<int>(where.live.devices.size()) != 0) {
          throw mcx::InvalidArgument("[fault_tolerant_training] --batch " + std::to_string(cfg.batch) +
                                     " does not split over the " + std::to_string(where.live.devices.size()) +
                                     " live devices");
        }
        const digits::Dataset mb = digits::gather_rows(ex.train, perm, b * cfg.batch, (b + 1) * cfg.batch);
        const Array x = mcx::device_put(digits::to_x(mb), mcx::NamedSharding(where.mesh, mcx::P("data", mcx::None)));
        const Array y = mcx::device_put(digits::to_y(mb), mcx::NamedSharding(where.mesh, mcx::P("data")));
        const Array t = mcx::device_put(mcx::array(static_cast<float>(step_count + 1)),
                                        mcx::NamedSharding(where.mesh, mcx::P()));
        auto [p, m, v, loss] = where.step(state.params, state.m, state.v, t, x, y);
        loss_sum += loss.item<double>();  // waits for the step: a failure surfaces here, before the state moves on
        state = TrainState{p, m, v};
        ++step_count;
        ++b;
      } catch (const mcx::ProcessFailure& e) {
        ++retries;
        std::printf("%s: step %lld failed: process %d is gone (%s); agreeing on the live devices and retrying\n",
                    kTool, static_cast<long long>(step_count + 1), e.process(), e.what());
        std::fflush(stdout);
        where = agree_on_live_mesh(cfg.lr);
        state = TrainState{onto(state.params, where.mesh), onto(state.m, where.mesh), onto(state.v, where.mesh)};
        std::printf("%s: carrying on with processes {", kTool);
        for (size_t i = 0; i < where.live.processes.size(); ++i) {
          std::printf("%s%d", i ? "," : "", where.live.processes[i]);
        }
        std::printf("} (%zu devices, generation %llu)\n", where.live.devices.size(),
                    static_cast<unsigned long long>(where.live.generation));
        std::fflush(stdout);
      }
    }
    test_acc = digits::accuracy(predict(state.params, digits::to_x(ex.test)), ex.test);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s epoch %3d  loss %.4f  test acc %.4f  %zu devices  %.3f s\n", kTool, epoch,
                loss_sum / static_cast<double>(batches), test_acc, where.live.devices.size(), secs);
    std::fflush(stdout);
  }
  std::printf("%s: %lld steps, %lld retried after a failure, final live processes %zu; parameters digest %016llx\n",
              kTool, static_cast<long long>(step_count), static_cast<long long>(retries), where.live.processes.size(),
              static_cast<unsigned long long>(digest(state.params)));
  const int status = digits::finish(kTool, test_acc, cfg.min_accuracy, true);
  std::fflush(stdout);
  // Leave without the shutdown of a full job: the processes that died never reach it (recoverable mode has no
  // shutdown barrier, but a dead peer's groups and connections need not be torn down in order).
  if (distributed) std::_Exit(status);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  cfg.batch = 48;     // splits over 1, 2, 3, 4, 6 or 8 devices: the job keeps its global batch after a failure
  cfg.epochs = 60;    // about 15 s or more on 3 processes: time to kill one from outside
  cfg.min_accuracy = 0.93;
  CLI::App app{"Trains the digits MLP data-parallel over a recoverable job that survives a killed process."};
  digits::add_train_flags(app, cfg, "global minibatch size (a multiple of every live device count)");
  app.add_option("--kill-process", cfg.kill_process, "failure injection: this process kills itself ...");
  app.add_option("--at-step", cfg.at_step, "... when it starts this (1-based) step");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(cfg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", kTool, e.what());
    std::fflush(stderr);
    return 2;
  }
}
