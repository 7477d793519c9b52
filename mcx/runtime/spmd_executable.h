// SpmdExecutable: a global program compiled for a mesh: partitioned into one per-device program
// (spmd/partitioner.h), compiled once by the mesh devices' platform, and launched on every addressable device of
// the mesh, each on its own stream, with collectives through in-process communicators
// (collectives/local_communicator.h; across processes the Gloo communicator will plug in at the same point).
//
// A "manual" executable skips the partitioner: the program is already per-device (shard_map), and the
// specs only say how the global arguments/results are laid out.
//
// Launch order: executions are enqueued on all their devices under one process-wide launch lock, so every
// stream sees executions in the same order and collectives of different executions never interleave.
// Thread-safety: compile and execute are thread-safe; one executable may run concurrently.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/platform/executable.h"
#include "mcx/platform/platform.h"
#include "mcx/ir/program.h"
#include "mcx/runtime/array_value.h"
#include "mcx/runtime/mesh.h"
#include "mcx/runtime/sharding.h"
#include "mcx/spmd/partitioner.h"

namespace mcx {

struct SpmdOptions {
  explicit SpmdOptions(Mesh m) : mesh(std::move(m)) {}
  std::string name = "function";  // for messages: "jit of 'step'"
  Mesh mesh;
  std::vector<PartitionSpec> in_specs;                    // one per parameter, fully specified
  std::vector<std::optional<PartitionSpec>> out_specs;    // empty, or one per result (nullopt: propagate)
  bool manual = false;            // the program is already per-device (shard_map); out_specs required
  bool spans_processes = false;   // force the thread-guard check (tests); else: mesh spans processes
  // ir::canonical_encoding of the global program when the caller has it (the persistent cache's key);
  // computed when empty and a cache is installed.
  std::string program_key;
};

class SpmdExecutable {
 public:
  // Partitions (unless manual) and compiles for the mesh devices' platform. Errors: those of spmd::partition
  // and the platform's compile; InvalidArgument for a mesh over more than one platform.
  static absl::StatusOr<std::shared_ptr<const SpmdExecutable>> compile(const ir::Program& global,
                                                                       SpmdOptions options);

  // Launches on every addressable device of the mesh and returns at once with the global results.
  // args[i] must already have sharding in_shardings()[i] (InvalidArgument naming the argument
  // otherwise). donate[i] (optional, empty = none): argument i's shards are released when its device's
  // part finishes and the array reads as deleted afterwards. Checks the thread guard.
  absl::StatusOr<std::vector<ArrayValue>> execute(std::span<const ArrayValue> args,
                                                  std::span<const bool> donate = {}) const;

  const std::vector<Sharding>& in_shardings() const { return in_shardings_; }
  const std::vector<Sharding>& out_shardings() const { return out_shardings_; }
  const spmd::PartitionStats& stats() const { return stats_; }
  double partition_seconds() const { return partition_seconds_; }

 private:
  explicit SpmdExecutable(SpmdOptions options) : options_(std::move(options)) {}
  SpmdOptions options_;
  std::vector<AbstractValue> out_avals_;  // global result types
  std::vector<Sharding> in_shardings_;
  std::vector<Sharding> out_shardings_;
  std::shared_ptr<const Executable> exe_;
  uint64_t fingerprint_ = 0;  // of the per-device program (the launch check across processes)
  spmd::PartitionStats stats_;
  double partition_seconds_ = 0;
};

// Process-wide counts of SpmdExecutable::compile (tests and benchmarks): how often the partitioner ran and how
// often a partitioned executable was read back from the persistent compilation cache instead.
struct SpmdCompileStats {
  int64_t partitioned = 0;
  int64_t loaded = 0;
  int64_t checked = 0;           // stored entries partitioned and compiled again to compare (check_contents)
  int64_t check_mismatches = 0;  // of those, entries that differed from the fresh result
};
SpmdCompileStats spmd_compile_stats();

// Launches a single-device executable on `device`'s stream and returns at once; results are single
// shards on device (committed as given). args must be single-shard (the task awaits them); donate[i]
// donates argument i (as SpmdExecutable::execute). InvalidArgument for an executable of another platform
// than the device's.
absl::StatusOr<std::vector<ArrayValue>> launch_on_device(std::shared_ptr<const Executable> exe,
                                                         std::span<const ArrayValue> args,
                                                         const Device& device, bool committed,
                                                         std::string_view what, std::span<const bool> donate = {});

// Restarts from 0 the launch sequence numbers (the launch check's per-mesh count of launches, which every
// process must agree on) of every mesh whose processes are all in `processes` (ascending). Called at points
// all those processes reach together and after which their counts may differ otherwise: a newer live set
// (a restarted process starts counting at 0) or a failed live_devices scope (one process may have launched
// what another did not). Thread-safe.
void restart_launch_sequences(const std::vector<int>& processes);

}  // namespace mcx
