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
  // A failed preparation still runs the protocol (on this thread), so the other processes fail at once.
  if (!async || !ready.ok()) {
    throw_if_error(run_save(job, ready));
    return;
  }
  writer_ = std::thread([this, job = std::move(job), idle = options_.background_idle]() {
    absl::Status s;
    if (idle) {
      // Best effort: at the normal priority the save is still correct, only its overlap costs more.
      absl::Status lowered = make_this_thread_idle_priority();
      if (!lowered.ok()) log_warn("{}", std::string(lowered.message()));
    }
    try {
      s = run_save(job);
    } catch (const std::exception& e) {  // e.g. std::bad_alloc: a Status, never an escaping exception
      s = absl::InternalError(absl::StrCat("[checkpoint] background save of step ", job.step, " threw: ", e.what()));
    }
    MutexLock lock(&mu_);
    writer_status_ = std::move(s);
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
