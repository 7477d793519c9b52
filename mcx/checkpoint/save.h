// One save, in two halves: prepare (on the caller's thread: checks, plan, host copies of the owned shards)
// and run (file writes and the commit protocol of docs/checkpoint.md; on the caller's thread for save, on the
// background writer for save_async). Errors as in checkpoint_manager.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/checkpoint/checksum.h"
#include "mcx/checkpoint/save_plan.h"

namespace mcx::checkpoint {

struct SaveJob {
  std::string root;  // absolute
  int64_t step = 0;
  int64_t seq = 0;  // the manager's save counter (the same on every participant)
  std::vector<int> processes;  // the participants (CheckpointManager::set_processes); empty: every process
  int max_to_keep = 0;
  absl::Duration timeout;
  int threads = 1;  // for writing and hashing the owned shards (parallel.h)
  bool durable = true;  // fsync files and directories (CheckpointOptions::durable)
  Checksum checksum = Checksum::kXxh3_128;  // of the shard files (CheckpointOptions::checksum)
  TreeDef tree;
  std::string metadata_json;
  std::vector<PlannedLeaf> plan;
  std::vector<OwnedShard> owned;
};

// copy: private host copies (save_async) or shared storage (save).
absl::StatusOr<SaveJob> prepare_save(const std::string& root, int64_t step, const TreeDef& def,
                                     const std::vector<Array>& leaves, std::string_view metadata_json, bool copy);
// Runs the protocol. prepared: prepare_save's outcome on this process; when it failed, job needs only root,
// step, seq and timeout, and this process still takes part, publishing the failure at its first step (process
// 0: instead of the directory name; the others: as their "written" outcome), so every process fails the save
// at once instead of waiting for this one until the timeout. Returns this process's own failure if it had
// one, else the first failure of any process. On success: the directories of the steps retention retired
// (on the leader; their commit markers are already gone, so no listing shows them), which the caller removes
// with remove_tree, off the critical path (a crash before that leaves partial directories that the next
// save removes).
absl::StatusOr<std::vector<std::string>> run_save(const SaveJob& job,
                                                  const absl::Status& prepared = absl::OkStatus());

}  // namespace mcx::checkpoint
