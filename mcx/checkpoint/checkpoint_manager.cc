#include "mcx/checkpoint/checkpoint_manager.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/checkpoint/files.h"
#include "mcx/checkpoint/parallel.h"
#include "mcx/checkpoint/restore.h"
#include "mcx/checkpoint/save.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"
#include "mcx/runtime/device.h"
#include "mcx/runtime/stream.h"

namespace mcx::checkpoint {
namespace {

std::string absolute_root(const std::string& root) {
  if (root.empty()) throw InvalidArgument("[checkpoint] expected a root directory, found an empty path");
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(root, ec);
  if (ec) throw InvalidArgument(absl::StrCat("[checkpoint] cannot make '", root, "' absolute: ", ec.message()));
  std::string s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// Every shard's writer (the lowest device holding it) must belong to a participant of the save.
absl::Status check_writers(const std::vector<PlannedLeaf>& plan, const std::vector<int>& processes) {
  if (processes.empty()) return absl::OkStatus();
  for (const PlannedLeaf& leaf : plan) {
    for (const PlannedShard& shard : leaf.shards) {
      if (!std::binary_search(processes.begin(), processes.end(), shard.owner.process_index)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "[checkpoint] leaf '", leaf.path, "': expected every shard on a process taking part in the save (",
            absl::StrJoin(processes, ","), "), found the box ", shard.box.to_string(), " only on ",
            shard.owner.to_string(), " of process ", shard.owner.process_index));
      }
    }
  }
  return absl::OkStatus();
}

// Removes the directories of retired steps (run_save); a failure is only logged: the step is already retired,
// and the next save removes the partial directory.
void remove_retired(const std::vector<std::string>& dirs) {
  for (const std::string& dir : dirs) {
    absl::Status s = remove_tree(dir);
    if (!s.ok()) log_warn("[checkpoint] could not remove the retired step '{}' (the next save retries): {}", dir,
                          std::string(s.message()));
  }
}

// Lowers the calling (background) thread to SCHED_IDLE when asked; best effort: at the normal priority the
// work is still correct, only its overlap costs more.
void maybe_idle(bool idle) {
  if (!idle) return;
  absl::Status lowered = make_this_thread_idle_priority();
  if (!lowered.ok()) log_warn("{}", std::string(lowered.message()));
}

}  // namespace

CheckpointManager::CheckpointManager(std::string root, CheckpointOptions options)
    : root_(absolute_root(root)), options_(std::move(options)) {
  if (options_.max_to_keep < 0) {
    throw InvalidArgument(absl::StrCat("[checkpoint] expected max_to_keep >= 0 (0 keeps every step), found ",
                                       options_.max_to_keep));
  }
  if (options_.io_threads < 0) {
    throw InvalidArgument(absl::StrCat("[checkpoint] expected io_threads >= 0 (0: the hardware concurrency), found ",
                                       options_.io_threads));
  }
}

CheckpointManager::~CheckpointManager() {
  absl::Status s = join_writer();
  if (!s.ok()) log_error("[checkpoint] a background save failed and nobody called wait(): {}", s.ToString());
}

absl::Status CheckpointManager::join_writer() {
  if (writer_.joinable()) writer_.join();
  MutexLock lock(&mu_);
  return std::exchange(writer_status_, absl::OkStatus());
}

void CheckpointManager::wait() { throw_if_error(join_writer()); }

bool CheckpointManager::save_in_progress() const { return writing_.load(std::memory_order_acquire); }

void CheckpointManager::set_processes(std::vector<int> processes) {
  const int me = process_index(), count = process_count();
  const std::string listed = absl::StrJoin(processes, ",");
  const bool ascending = std::adjacent_find(processes.begin(), processes.end(), std::greater_equal<int>()) ==
                         processes.end();
  const bool in_range = processes.empty() || (processes.front() >= 0 && processes.back() < count);
  if (!ascending || !in_range) {
    throw InvalidArgument(absl::StrCat("[checkpoint] set_processes: expected ascending distinct process indices in [0, ",
                                       count, "), found {", listed, "}"));
  }
  if (!processes.empty() && !std::binary_search(processes.begin(), processes.end(), me)) {
    throw InvalidArgument(absl::StrCat("[checkpoint] set_processes: expected a list naming this process (", me,
                                       "), found {", listed, "}"));
  }
  throw_if_error(join_writer());
  processes_ = std::move(processes);
}

void CheckpointManager::save_leaves(int64_t step, const TreeDef& def, const std::vector<Array>& leaves,
                                    std::string_view metadata_json, bool async) {
  throw_if_error(join_writer());
  absl::StatusOr<SaveJob> prepared = prepare_save(root_, step, def, leaves, metadata_json, /*copy=*/async);
  SaveJob job;
  absl::Status ready = prepared.status();
  if (ready.ok()) {
    job = *std::move(prepared);
    ready = check_writers(job.plan, processes_);
  } else {
    job.root = root_;
    job.step = step;
  }
  job.seq = seq_++;  // counted on every participant, failed or not, so the next save's KV keys agree
  job.processes = processes_;
  job.max_to_keep = options_.max_to_keep;
  job.timeout = options_.timeout ? *options_.timeout : default_device_deadline() - absl::Now();
  job.threads = async ? 1 : io_threads(options_.io_threads);  // the background write: one thread (header)
  job.durable = options_.durable;
  const bool idle = options_.background_idle;
  // A failed preparation still runs the protocol (on this thread), so the other processes fail at once.
  if (!async || !ready.ok()) {
    std::vector<std::string> retired = value_or_throw(run_save(job, ready));
    if (!retired.empty()) {
      writer_ = std::thread([retired = std::move(retired), idle] {
        maybe_idle(idle);
        remove_retired(retired);
      });
    }
    return;
  }
  writing_.store(true, std::memory_order_release);
  writer_ = std::thread([this, job = std::move(job), idle]() {
    maybe_idle(idle);
    absl::Status s;
    std::vector<std::string> retired;
    try {
      absl::StatusOr<std::vector<std::string>> r = run_save(job);
      s = r.status();
      if (r.ok()) retired = *std::move(r);
    } catch (const std::exception& e) {  // e.g. std::bad_alloc: a Status, never an escaping exception
      s = absl::InternalError(absl::StrCat("[checkpoint] background save of step ", job.step, " threw: ", e.what()));
    }
    {
      MutexLock lock(&mu_);
      writer_status_ = std::move(s);
    }
    writing_.store(false, std::memory_order_release);
    remove_retired(retired);
  });
}

std::vector<int64_t> CheckpointManager::all_steps() const { return value_or_throw(committed_steps(root_)); }

std::optional<int64_t> CheckpointManager::latest_step() const {
  std::vector<int64_t> steps = all_steps();
  if (steps.empty()) return std::nullopt;
  return steps.back();
}

CheckpointInfo CheckpointManager::info(int64_t step) const {
  Manifest m = value_or_throw(load_manifest(root_, step));
  CheckpointInfo out;
  out.step = m.step;
  out.process_count = m.process_count;
  out.metadata_json = m.metadata_json;
  out.tree = m.tree;
  for (const LeafRecord& l : m.leaves) out.leaves.push_back({l.path, l.dtype, l.dims});
  return out;
}

std::vector<Array> CheckpointManager::restore_leaves(int64_t step, const TreeDef& def,
                                                     std::span<const LeafTarget> targets) const {
  return value_or_throw(restore_arrays(root_, step, def, targets, io_threads(options_.io_threads)));
}

Tree CheckpointManager::restore_tree(int64_t step, const Sharding& sharding) const {
  CheckpointInfo i = info(step);
  std::vector<LeafTarget> targets;
  for (const LeafInfo& l : i.leaves) targets.push_back({l.dtype, l.dims, sharding});
  std::vector<Array> leaves = restore_leaves(step, i.tree, targets);
  return tree_unflatten<Tree>(i.tree, leaves);
}

}  // namespace mcx::checkpoint
