// fault_tolerant_training: the digits MLP trained data-parallel over the processes of a recoverable job, which
// carries on when a process dies and takes a restarted process back (JAX's two "fault tolerant distributed JAX"
// examples, on CPU):
//
//   build/bin/mcx-run -n 3 --cpu-devices 1 --recoverable -- build/examples/fault_tolerant_training/fault_tolerant_training
//   build/bin/mcx-run -n 3 --cpu-devices 1 --max-restarts 1 -- build/examples/fault_tolerant_training/fault_tolerant_training
//
// and kill any process (process 0 too) from outside, or inject it with --kill-process P --at-step S. Every step
// is one mcx::with_live_devices scope: it completes on every live process or raises on every one, so the
// survivors never disagree on which steps happened. A scope runs on a mesh over the devices agreed live; when
// it raises mcx::ProcessFailure the state is left as it was and the same step is retried on the new live set.
// When the live set changes (a process lost, or a restarted one back), the first scope on it agrees on the
// newest step among its members, and the lowest live process at that step sends its parameters and optimizer
// state to every member (any live process can be the sender, process 0 is not special), so a restarted process
// continues from the others' step. At the end each process prints the held-out accuracy and a digest of its
// parameters (the tests compare them across processes).
//
// Preemption: a SIGTERM to any process (mcx-run forwards its own), or --preempt-at-step, makes every live process
// stop at the same step (mcx::multihost::reached_preemption_sync_point) and checkpoints the state into --state-dir
// (mcx::checkpoint over the live processes: the lowest one writes the replicated state and commits), then every
// process exits 0. --resume continues from it, to the same parameters bit for bit as a
// run that was never interrupted.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "examples/train_digits/digits_data.h"
#include "examples/train_digits/digits_model.h"
#include "examples/train_digits/digits_parallel.h"
#include "examples/train_digits/start_devices.h"
#include "mcx/runtime/cpu_backend.h"
#include "mcx/checkpoint/checkpoint_manager.h"
#include "mcx/distributed/cluster.h"
#include "mcx/distributed/distributed.h"
#include "mcx/mcx.h"
#include "mcx/multihost/live_devices.h"
#include "mcx/multihost/preemption.h"
#include "examples/fault_tolerant_training/train_state.h"

namespace {

using mcx::Array;
using mcx::Tree;

constexpr const char* kTool = "fault_tolerant_training";

struct Config : digits::TrainFlags {
  int kill_process = -1;   // failure injection: this process kills itself (SIGKILL) ...
  int64_t at_step = -1;    // ... when it starts this (1-based) step (only its first incarnation)
  int64_t preempt_at_step = -1;  // preemption injection: the last process announces one after this step
  std::string state_dir = "checkpoints/fault_tolerant_training";  // saved at a preemption sync point
  bool resume = false;     // start from the state saved in state_dir (when there is one)
};

using fault_tolerant::TrainState;
using fault_tolerant::onto;

// Where the job computes now: the agreed live devices and the step compiled for a mesh over them.
struct LiveMesh {
  mcx::LiveDevices live;
  mcx::Mesh mesh;
  digits::StepFn step;
};

LiveMesh mesh_over(const mcx::LiveDevices& live, double lr) {
  mcx::Mesh mesh = mcx::make_mesh({static_cast<int64_t>(live.devices.size())}, {"data"}, live.devices);
  digits::StepFn step = digits::jit_data_parallel_step(mesh, lr, /*donate=*/false, "ft_step");
  return LiveMesh{live, mesh, std::move(step)};
}

// A per-device f32 array over the mesh's "data" axis: row r holds value(devices[r]).
Array per_device(const LiveMesh& where, const std::function<double(const mcx::Device&)>& value) {
  const int64_t n = static_cast<int64_t>(where.live.devices.size());
  return mcx::make_array_from_callback({n}, mcx::DType::kFloat32, mcx::NamedSharding(where.mesh, mcx::P("data")),
                                       [&](const mcx::IndexBox& box) {
                                         std::vector<float> v;
                                         for (int64_t r = box.start[0]; r < box.limit[0]; ++r) {
                                           v.push_back(static_cast<float>(value(where.live.devices[r])));
                                         }
                                         return mcx::Buffer::from_vector<float>(v, box.shape());
                                       });
}

struct Synced {
  TrainState state;
  int sender = -1;  // the process whose state every member now has; -1 when all were at the same step
};

// Brings every member of the live mesh to one training state. The members agree on the newest step among them
// (an all-gather of each device's step count); if they all hold it, nothing moves. Otherwise the lowest live
// process at that step sends its parameters and moments: a psum over the mesh in which only the sender's first
// device contributes its copy (the sum is that copy, bitwise, on every member).
Synced sync_state(const LiveMesh& where, const TrainState& mine) {
  auto gather = mcx::shard_map([](const Array& v) { return mcx::all_gather(v, "data", 0, /*tiled=*/true); },
                               where.mesh, {mcx::P("data")}, {mcx::P()}, "ft_gather_steps");
  const std::vector<float> steps = gather(per_device(where, [&](const mcx::Device&) {
                                            return static_cast<double>(mine.steps);  // exact below 2^24 steps
                                          }))
                                       .addressable_shards()
                                       .front()
                                       .data.to_vector<float>();
  const float newest = *std::max_element(steps.begin(), steps.end());
  size_t first = 0;
  while (steps[first] != newest) ++first;  // devices are in process order: the lowest process at the newest step
  Synced out{TrainState{onto(mine.params, where.mesh), onto(mine.m, where.mesh), onto(mine.v, where.mesh),
                        static_cast<int64_t>(newest)},
             -1};
  if (std::all_of(steps.begin(), steps.end(), [&](float s) { return s == newest; })) return out;
  out.sender = where.live.devices[first].process_index;
  const int sender_device = where.live.devices[first].global_id;
  const Array mask = per_device(where, [&](const mcx::Device& d) { return d.global_id == sender_device ? 1.0 : 0.0; });
  auto from_sender = mcx::shard_map(
      [](const Array& leaf, const Array& is_sender) {
        return mcx::psum(mcx::where(is_sender > 0.0f, leaf, mcx::zeros_like(leaf)), "data");
      },
      where.mesh, {mcx::P(), mcx::P("data")}, {mcx::P()}, "ft_send_state");
  auto send = [&](const Tree& tree) { return mcx::tree_map([&](const Array& leaf) { return from_sender(leaf, mask); }, tree); };
  out.state.params = send(out.state.params);
  out.state.m = send(out.state.m);
  out.state.v = send(out.state.v);
  return out;
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
    if (mcx::process_count() > 1 && !mcx::distributed::job_is_recoverable()) {
      // Surviving a failure is this program's whole point: refuse at start instead of dying with the first
      // failed process.
      throw mcx::FailedPrecondition(
          "[fault_tolerant_training] the job's coordination service is not recoverable, so the first failed process "
          "would end every process: run it under `mcx-run --recoverable` (or `--max-restarts N`), or with "
          "`mcx-coordinator --recoverable`");
    }
  }
  if (cfg.threads > 0) mcx::set_num_cpu_threads(cfg.threads);
  const char* restart_count = std::getenv("MCX_RESTART_COUNT");
  const bool restarted = restart_count != nullptr && std::string(restart_count) != "0";

  const digits::Experiment ex = digits::prepare_experiment(cfg.data, cfg.seed);
  const int64_t batches = ex.train.rows / cfg.batch;
  if (batches == 0) throw mcx::InvalidArgument("[fault_tolerant_training] --batch is larger than the training set");
  const int64_t total_steps = batches * cfg.epochs;
  const std::vector<int64_t> sizes = digits::layer_sizes(ex.train.features, cfg.hidden);

  // Every process starts from the same initial state (the same seed); a restarted one is brought to the
  // others' step by the first scope it joins.
  TrainState state;
  state.params = digits::init_params(ex.init_key, sizes);
  const digits::AdamState moments = digits::adam_init(state.params);
  state.m = moments.m;
  state.v = moments.v;
  if (cfg.resume) {
    // A process that finds no saved state starts from step 0: the first scope sends it the newest state.
    const mcx::checkpoint::CheckpointManager saved(cfg.state_dir);
    if (const std::optional<int64_t> step = saved.latest_step()) {
      state = fault_tolerant::from_tree(saved.restore(*step, fault_tolerant::as_tree(state)), *step);
      std::printf("%s: resuming from %s at step %lld\n", kTool, cfg.state_dir.c_str(),
                  static_cast<long long>(state.steps));
    } else {
      std::printf("%s: no saved state in %s; starting from step 0\n", kTool, cfg.state_dir.c_str());
    }
  }
  std::printf("%s: process %d of %d%s, MLP %s, global batch %d, %lld steps per epoch, %lld steps\n", kTool,
              mcx::process_index(), mcx::process_count(), restarted ? " (restarted)" : "",
              digits::layer_sizes_string(sizes).c_str(), cfg.batch, static_cast<long long>(batches),
              static_cast<long long>(total_steps));
  std::fflush(stdout);

  std::optional<LiveMesh> where;
  uint64_t synced_generation = 0;  // the live set whose members are known to hold the same state
  int64_t retries = 0;
  mcx::JitOptions predict_options;
  predict_options.name = "predict";
  auto predict = mcx::jit(digits::predict, predict_options);
  double loss_sum = 0;
  auto epoch_start = std::chrono::steady_clock::now();
  double test_acc = 0;
  while (state.steps < total_steps) {
    if (!restarted && mcx::process_index() == cfg.kill_process && state.steps + 1 == cfg.at_step) {
      std::printf("%s: process %d kills itself at step %lld (--kill-process)\n", kTool, mcx::process_index(),
                  static_cast<long long>(cfg.at_step));
      std::fflush(stdout);
      std::raise(SIGKILL);
    }
    struct StepOutcome {
      TrainState state;
      double loss;
    };
    try {
      StepOutcome next = mcx::with_live_devices(
          mcx::devices(),
          [&](const mcx::LiveDevices& live) {
            if (!where || where->live.generation != live.generation) where = mesh_over(live, cfg.lr);
            TrainState current = state;
            if (live.generation != synced_generation) {
              const Synced synced = sync_state(*where, state);
              current = synced.state;
              std::printf("%s: live processes {%s} (generation %llu) agree on step %lld%s\n", kTool,
                          absl::StrJoin(live.processes, ",").c_str(), static_cast<unsigned long long>(live.generation),
                          static_cast<long long>(current.steps),
                          synced.sender < 0 ? ""
                                            : (", state sent by process " + std::to_string(synced.sender)).c_str());
              std::fflush(stdout);
            }
            const int n = static_cast<int>(live.devices.size());
            if (cfg.batch % n != 0) {
              throw mcx::InvalidArgument("[fault_tolerant_training] --batch " + std::to_string(cfg.batch) +
                                         " does not split over the " + std::to_string(n) + " live devices");
            }
            const int64_t b = current.steps % batches;
            const std::vector<int32_t> perm = digits::epoch_order(ex, static_cast<int>(current.steps / batches) + 1);
            const digits::Dataset mb = digits::gather_rows(ex.train, perm, b * cfg.batch, (b + 1) * cfg.batch);
            const Array x = mcx::device_put(digits::to_x(mb), mcx::NamedSharding(where->mesh, mcx::P("data", mcx::None)));
            const Array y = mcx::device_put(digits::to_y(mb), mcx::NamedSharding(where->mesh, mcx::P("data")));
            const Array t = mcx::device_put(mcx::array(static_cast<float>(current.steps + 1)),
                                            mcx::NamedSharding(where->mesh, mcx::P()));
            auto [p, m, v, loss] = where->step(current.params, current.m, current.v, t, x, y);
            const double l = loss.item<double>();  // waits for the step inside the scope
            return StepOutcome{TrainState{p, m, v, current.steps + 1}, l};
          },
          absl::Seconds(60));
      // The scope completed on every live process: commit.
      state = std::move(next.state);
      synced_generation = where->live.generation;
      loss_sum += next.loss;
      if (state.steps == cfg.preempt_at_step && mcx::process_index() == mcx::process_count() - 1) {
        mcx::multihost::notify_preemption("--preempt-at-step");
      }
      // Every live process stops at the same step and takes part in the checkpoint of the (replicated) state,
      // which the lowest live process writes and commits.
      if (mcx::multihost::reached_preemption_sync_point(state.steps)) {
        mcx::checkpoint::CheckpointManager ckpt(cfg.state_dir, {.max_to_keep = 1});  // follows the live set
        ckpt.save(state.steps, fault_tolerant::as_tree(state));
        std::printf("%s: preempted: stopping at step %lld%s\n", kTool, static_cast<long long>(state.steps),
                    mcx::process_index() == where->live.processes.front()
                        ? (", state saved to " + cfg.state_dir).c_str()
                        : "");
        std::printf("%s: parameters digest %016llx at step %lld\n", kTool,
                    static_cast<unsigned long long>(fault_tolerant::digest(state.params)),
                    static_cast<long long>(state.steps));
        std::fflush(stdout);
        if (distributed) digits::leave_job(0);
        return 0;
      }
    } catch (const mcx::ProcessFailure& e) {
      ++retries;
      std::printf("%s: step %lld failed: process %d is gone (%s); retrying it on the live processes\n", kTool,
                  static_cast<long long>(state.steps + 1), e.process(), e.what());
      std::fflush(stdout);
      continue;
    }
    if (state.steps % batches == 0) {  // an epoch ended
      test_acc = digits::accuracy(predict(state.params, digits::to_x(ex.test)), ex.test);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
      std::printf("%s epoch %3lld  loss %.4f  test acc %.4f  %zu devices  %.3f s\n", kTool,
                  static_cast<long long>(state.steps / batches), loss_sum / static_cast<double>(batches), test_acc,
                  where->live.devices.size(), secs);
      std::fflush(stdout);
      loss_sum = 0;
      epoch_start = std::chrono::steady_clock::now();
    }
  }
  test_acc = digits::accuracy(predict(state.params, digits::to_x(ex.test)), ex.test);
  std::printf("%s: %lld steps, %lld retried after a failure, final live processes {%s}, %lld SPMD executables "
              "cached; parameters digest %016llx\n",
              kTool, static_cast<long long>(state.steps), static_cast<long long>(retries),
              absl::StrJoin(where->live.processes, ",").c_str(), static_cast<long long>(mcx::run_stats().spmd_cached),
              static_cast<unsigned long long>(fault_tolerant::digest(state.params)));
  const int status = digits::finish(kTool, test_acc, cfg.min_accuracy, true);
  std::fflush(stdout);
  if (distributed) digits::leave_job(status);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  cfg.batch = 48;     // splits over 1, 2, 3, 4, 6 or 8 devices: the job keeps its global batch after a failure
  cfg.epochs = 60;    // about 15 s or more on 3 processes: time to kill one from outside
  cfg.min_accuracy = 0.93;
  CLI::App app{"Trains the digits MLP data-parallel over a recoverable job that survives a killed process and "
               "takes a restarted one back."};
  digits::add_train_flags(app, cfg, "global minibatch size (a multiple of every live device count)");
  app.add_option("--kill-process", cfg.kill_process, "failure injection: this process kills itself ...");
  app.add_option("--at-step", cfg.at_step, "... when it starts this (1-based) step (not again once restarted)");
  app.add_option("--preempt-at-step", cfg.preempt_at_step,
                 "preemption injection: the last process announces a preemption after this step (as a SIGTERM "
                 "to any process would); every process stops at the agreed step and the state is saved");
  app.add_option("--state-dir", cfg.state_dir, "where the state is saved at a preemption sync point");
  app.add_flag("--resume", cfg.resume, "start from the state saved in --state-dir, when there is one");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(cfg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", kTool, e.what());
    std::fflush(stderr);
    return 2;
  }
}
