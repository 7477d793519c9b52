// mcx::checkpoint::CheckpointManager: save and restore pytrees of (sharded, multi-process) arrays plus user
// metadata, atomically, with keep-last-N retention, asynchronous saves and resharding on restore
// (docs/checkpoint.md: format, guarantees, side-by-side with Orbax and torch.distributed.checkpoint).
//
//   mcx::checkpoint::CheckpointManager ckpt("/shared/run1/ckpt", {.max_to_keep = 3});
//   ckpt.save_async(step, state, R"({"step": 100, "data_offset": 51200})");   // returns after the host copy
//   ... train ...
//   ckpt.wait();                                       // or the next save: joins, throws a failed write
//   if (auto last = ckpt.latest_step()) state = ckpt.restore(*last, state);   // `state` gives the shardings
//
// Every process of the job constructs a manager on the same root (a directory all processes see, e.g. a
// shared file system) and calls save / save_async with the same steps and tree structures in the same order
// (like collectives); each writes only the shards it owns (a distinct index box is written once, by the
// lowest device holding it). Process 0 (the lowest participant, see set_processes) assembles the manifest and
// commits (docs/checkpoint.md, "Commit protocol"). Restore needs no agreement: each process reads only the
// bytes its addressable shards need. Without distributed::initialize() everything is local to the one process.
//
// Blocking and deadlines: save blocks until the step is committed on every process; the waits on other
// processes use options.timeout (default MCX_DEVICE_TIMEOUT_S). save_async blocks until the previous save is
// done and the owned shards are copied to host memory; the rest runs on one background thread, joined by
// wait(), the next save, or the destructor (never detached). Retention (max_to_keep) retires old steps
// before a save returns (their commit markers are removed: no listing or restore sees them) and deletes their
// files on that background thread (joined the same way; a failed delete is logged, and the next save removes
// what is left).
//
// Errors (mcx::Error subclasses, messages "[checkpoint] ...", naming the file and the leaf path and what was
// expected vs found): InvalidArgument (bad metadata, bfloat16 leaves, a target whose tree structure, dtype or
// global shape differs from the checkpoint), AlreadyExists (the step is committed already), NotFound (no such
// committed step; a shard file listed in the manifest is missing), DataLoss (a truncated or corrupted file, a
// manifest edited after the commit), DeadlineExceeded / Unavailable (another process did not finish in time
// or failed), Internal / PermissionDenied for I/O failures.
//
// Thread-safety: one thread (the one that drives the job) calls the manager's methods; the background writer
// shares only the outcome slot with it.
#pragma once

#include <cstdint>
#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "mcx/checkpoint/checksum.h"
#include "mcx/core/mutex.h"
#include "mcx/runtime/sharding.h"
#include "mcx/trace/array.h"
#include "mcx/trace/pytree.h"

namespace mcx::checkpoint {

struct CheckpointOptions {
  int max_to_keep = 0;  // keep the newest N committed steps after each save; 0 keeps every step
  // Deadline of each wait on another process during a save; unset: MCX_DEVICE_TIMEOUT_S.
  std::optional<absl::Duration> timeout;
  // Threads one save or restore uses for file I/O and hashing on this process (started per call, not the
  // compute pool); 0: the hardware concurrency, at most 8. save_async's background write always uses one
  // thread (it is meant to take as little from the job as possible, not to finish first).
  int io_threads = 0;
  // save_async's background writer (and the threads it starts) runs under SCHED_IDLE on Linux: it takes only
  // CPU time the job leaves idle, so an overlapped write slows the training step as little as possible. The
  // price: while every core stays busy the write barely advances, and the other processes wait for it up to
  // `timeout`. false: the writer runs at the caller's priority.
  bool background_idle = true;
  // true: every file and directory of a save is fsynced before the commit marker and after the rename, so a
  // committed step survives a crash of the machine (power loss included). false: the same atomic protocol
  // without any fsync (as torch.distributed.checkpoint's sync_files=False or TensorStore's file_io_sync=false):
  // a committed step survives the death of any process (kill -9) but a crash of the machine may lose it or
  // leave it truncated, which restore then reports as DataLoss (the checksums catch it). For scratch or
  // tmpfs checkpoints, where the write's speed matters more than a power loss.
  bool durable = true;
  // The checksum of the shard files (checkpoint/checksum.h), recorded in the manifest: XXH3-128 (the default)
  // catches accidental corruption at memory speed; SHA-256 also makes the files tamper-evident, at about
  // 2 GB/s a core. Restore checks whichever the manifest names (and reads checkpoints of format version 2,
  // which were SHA-256).
  Checksum checksum = Checksum::kXxh3_128;
};

// What restore builds for one leaf: its dtype and global shape must equal the checkpoint's; sharding may be
// any (another mesh, process count or partition spec than the one it was saved with).
struct LeafTarget {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
  Sharding sharding;
};

struct LeafInfo {
  std::string path;  // "params/w"
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
};

// A committed step as its manifest describes it.
struct CheckpointInfo {
  int64_t step = 0;
  int process_count = 1;      // of the job that wrote it
  std::string metadata_json;  // the user metadata (a JSON object)
  TreeDef tree;
  std::vector<LeafInfo> leaves;  // in tree_flatten order
};

class CheckpointManager {
 public:
  explicit CheckpointManager(std::string root, CheckpointOptions options = {});
  // Joins a background write still running; its error, if any, is logged (destructors do not throw).
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  const std::string& root() const { return root_; }

  // Saves `tree` as `step` (>= 0) with metadata (a JSON object); returns once it is committed. Joins a
  // running save_async first and throws its error if it failed (then this save does not run).
  template <PyTree T>
  void save(int64_t step, const T& tree, std::string_view metadata_json = "{}") {
    auto [leaves, def] = tree_flatten(tree);
    save_leaves(step, def, leaves, metadata_json, /*async=*/false);
  }
  // As save, but returns once the shards this process writes are copied off the devices.
  template <PyTree T>
  void save_async(int64_t step, const T& tree, std::string_view metadata_json = "{}") {
    auto [leaves, def] = tree_flatten(tree);
    save_leaves(step, def, leaves, metadata_json, /*async=*/true);
  }
  // Joins the background write; throws its error (once).
  void wait();
  // Whether a save_async's write is still running (never blocks or throws; wait() collects its outcome).
  bool save_in_progress() const;

  // The processes that take part in the following saves: ascending, this process among them. By default
  // (and after set_processes({})) the manager follows the job: each save is taken by the live processes of
  // the newest mcx::live_devices / with_live_devices agreement over every process of the job (every process
  // when there was none), so after a process failure the survivors of a recoverable job save without it,
  // whether the failure happened before the first step, during a step, a save or a restore; the trees saved
  // must then live on the survivors' devices (a shard whose writer is another process is InvalidArgument).
  // A non-empty list overrides that (e.g. saves over a subset agreed some other way). The lowest participant
  // commits. Joins a running save_async first. InvalidArgument for a list that is not ascending, names a
  // process outside the job, or leaves this process out. (A save whose participant the coordination service
  // declared dead fails at once, Aborted, naming it: its barriers never wait for a dead process.)
  void set_processes(std::vector<int> processes);

  // Committed steps (directories with a commit marker), ascending; partial saves are not listed.
  std::vector<int64_t> all_steps() const;
  std::optional<int64_t> latest_step() const;
  CheckpointInfo info(int64_t step) const;

  // Restores `step` with the structure, dtypes, shapes and shardings of `like` (whose values are unused).
  template <PyTree T>
  T restore(int64_t step, const T& like) const {
    auto [leaves, def] = tree_flatten(like);
    std::vector<LeafTarget> targets;
    targets.reserve(leaves.size());
    for (const Array& a : leaves) targets.push_back({a.dtype(), a.dims(), a.sharding()});
    std::vector<Array> out = restore_leaves(step, def, targets);
    return tree_unflatten<T>(def, out);
  }
  // The abstract form: one target per leaf of def, in flatten order.
  std::vector<Array> restore_leaves(int64_t step, const TreeDef& def, std::span<const LeafTarget> targets) const;
  // Restores with the stored structure, every leaf placed with `sharding` (e.g. fully replicated).
  Tree restore_tree(int64_t step, const Sharding& sharding) const;
  // Restores onto abstract targets, as Orbax restores onto ShapeDtypeStructs (nothing is allocated to describe
  // them): with the stored structure, each leaf placed as `targets` says for its path ("params/w"). The target's
  // dtype and dims must equal the stored ones (InvalidArgument otherwise, as restore); a leaf of the checkpoint
  // without a target, or a target naming no leaf, is InvalidArgument listing the paths.
  Tree restore_tree(int64_t step, const std::map<std::string, LeafTarget>& targets) const;
  // The same with the stored dtype and shape of every leaf, placed where place(leaf) says.
  Tree restore_tree(int64_t step, const std::function<Sharding(const LeafInfo&)>& place) const;

  // Non-template core of save / save_async.
  void save_leaves(int64_t step, const TreeDef& def, const std::vector<Array>& leaves,
                   std::string_view metadata_json, bool async);

 private:
  absl::Status join_writer();

  std::string root_;
  CheckpointOptions options_;
  int64_t seq_ = 0;  // saves started, the same on every participant
  std::vector<int> processes_;  // set_processes
  bool processes_set_ = false;   // set_processes named a list; otherwise saves follow the job's live set
  std::vector<int> last_participants_;  // of the previous save (logged when it changes; empty: every process)
  std::thread writer_;  // a save_async's write, or the removal of the steps a save retired
  std::atomic<bool> writing_{false};  // a save_async's write is running
  Mutex mu_;
  absl::Status writer_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mcx::checkpoint
