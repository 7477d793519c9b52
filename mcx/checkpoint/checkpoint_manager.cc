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
#include "mcx/collectives/live_set.h"
#include "mcx/core/logging.h"
#include "mcx/core/profiler.h"
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

// The participants of a save when set_processes was not called: the live processes of the newest live-set
// agreement over the whole job (collectives/live_set.h, recorded by mcx::live_devices / with_live_devices), so a
// save after a failure waits only for the survivors; every process of the job when there is none. Empty
// means every process.
std::vector<int> followed_processes() {
  const int count = process_count();
  if (count <= 1) return {};
  std::vector<int> all(static_cast<size_t>(count));
  for (int p = 0; p < count; ++p) all[static_cast<size_t>(p)] = p;
  std::optional<LiveSet> live = live_set_for(all);
  if (!live || live->processes.size() == all.size()) return {};
  if (!std::binary_search(live->processes.begin(), live->processes.end(), process_index())) {
    throw FailedPrecondition(absl::StrCat("[checkpoint] this process (", process_index(),
                                          ") is not in the job's live set ", live->to_string(),
                                          ": the other processes carry on without it, so it cannot take part in a save"));
  }
  return live->processes;
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
  processes_set_ = !processes.empty();
  processes_ = std::move(processes);
}

void CheckpointManager::save_leaves(int64_t step, const TreeDef& def, const std::vector<Array>& leaves,
                                    std::string_view metadata_json, bool async) {
  throw_if_error(join_writer());
  const std::vector<int> participants = processes_set_ ? processes_ : followed_processes();
  if (participants != last_participants_) {
    log_info("[checkpoint] saves from step {} on: processes {{{}}}{}", step,
             participants.empty() ? "all" : absl::StrJoin(participants, ","),
             processes_set_ ? " (set_processes)" : " (the job's live set)");
    last_participants_ = participants;
  }
  absl::StatusOr<SaveJob> prepared = [&] {
    profiler::Scope traced("checkpoint", async ? "copy for a background save" : "prepare save");
    return prepare_save(root_, step, def, leaves, metadata_json, /*copy=*/async);
  }();
  SaveJob job;
  absl::Status ready = prepared.status();
  if (ready.ok()) {
    job = *std::move(prepared);
    ready = check_writers(job.plan, participants);
  } else {
    job.root = root_;
    job.step = step;
  }
  job.seq = seq_++;  // counted on every participant, failed or not, so the next save's KV keys agree
  job.processes = participants;
  job.max_to_keep = options_.max_to_keep;
  job.timeout = options_.timeout ? *options_.timeout : default_device_deadline() - absl::Now();
  job.threads = async ? 1 : io_threads(options_.io_threads);  // the background write: one thread (header)
  job.durable = options_.durable;
  job.checksum = options_.checksum;
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
    profiler::set_thread_name("checkpoint writer");
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
  return restore_tree(step, [&sharding](const LeafInfo&) { return sharding; });
}

Tree CheckpointManager::restore_tree(int64_t step, const std::function<Sharding(const LeafInfo&)>& place) const {
  CheckpointInfo i = info(step);
  std::vector<LeafTarget> targets;
  for (const LeafInfo& l : i.leaves) targets.push_back({l.dtype, l.dims, place(l)});
  std::vector<Array> leaves = restore_leaves(step, i.tree, targets);
  return tree_unflatten<Tree>(i.tree, leaves);
}

Tree CheckpointManager::restore_tree(int64_t step, const std::map<std::string, LeafTarget>& targets) const {
  CheckpointInfo i = info(step);
  std::vector<std::string> untargeted, unknown;
  std::vector<LeafTarget> ordered;
  for (const LeafInfo& l : i.leaves) {
    auto it = targets.find(l.path);
    if (it == targets.end()) {
      untargeted.push_back(l.path);
    } else {
      ordered.push_back(it->second);
    }
  }
  for (const auto& [path, target] : targets) {
    const bool stored = std::any_of(i.leaves.begin(), i.leaves.end(), [&](const LeafInfo& l) { return l.path == path; });
    if (!stored) unknown.push_back(path);
  }
  if (!untargeted.empty() || !unknown.empty()) {
    std::vector<std::string> paths;
    for (const LeafInfo& l : i.leaves) paths.push_back(l.path);
    throw InvalidArgument(absl::StrCat(
        "[checkpoint] restore of step ", step, ": expected one target per leaf (", absl::StrJoin(paths, ", "), ")",
        untargeted.empty() ? "" : absl::StrCat("; no target for ", absl::StrJoin(untargeted, ", ")),
        unknown.empty() ? "" : absl::StrCat("; targets for leaves the checkpoint lacks: ", absl::StrJoin(unknown, ", "))));
  }
  std::vector<Array> leaves = restore_leaves(step, i.tree, ordered);
  return tree_unflatten<Tree>(i.tree, leaves);
}

}  // namespace mcx::checkpoint
