// Running a global program on global arrays: the placement decision behind eager ops, jit and
// call_program (jax.jit's semantics for where a computation runs).
//
//  1. The mesh: from in_shardings / out_shardings / the trace's sharding constraints (options.mesh)
//     and from committed arguments with multi-device shardings. All of them must use the same devices
//     (InvalidArgument naming the two that differ).
//  2. No mesh: a single-device computation, on the device of the committed arguments (all on one
//     device, else InvalidArgument "arguments are committed to different devices: argument 0 on
//     cpu:0, argument 2 on cpu:1"), or on default_device() when nothing is committed. Arguments on other
//     devices are moved there (implicit device-to-device transfer; uncommitted host data counts as
//     host-to-device).
//  3. A mesh: each argument gets in_shardings[i], or its own sharding when it is a sharding on that mesh,
//     or replicated over the mesh; moving an argument to that sharding is an implicit transfer (checked
//     by the transfer guard). The program is partitioned and compiled (cached by program, mesh and
//     specs) and launched on every device.
// Results are committed when any argument was committed or any sharding was requested.
//
// Thread-safety: thread-safe; executables are cached process-wide.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/ir/program.h"
#include "mcx/runtime/array_value.h"
#include "mcx/runtime/sharding.h"

namespace mcx {

struct RunOptions {
  std::string what = "computation";                     // "jit of 'step'", "add" ... for messages
  std::vector<std::optional<Sharding>> in_shardings;     // empty or one per parameter
  std::vector<std::optional<Sharding>> out_shardings;    // empty or one per result
  std::vector<bool> donate;                              // empty or one per parameter
  std::optional<Mesh> mesh;                              // mesh of sharding constraints in the program
  bool spans_processes = false;                          // thread-guard testing hook
  // Program key (runtime/executable_cache.h program_key) when the caller already has it.
  std::string program_key;
};

// Runs program on args (one per parameter, matching types) as described above; returns at once with
// results whose shards are being computed. Errors are returned with "[what] " prefixes.
absl::StatusOr<std::vector<ArrayValue>> run_program(const ir::Program& program,
                                                    std::span<const ArrayValue> args,
                                                    const RunOptions& options);

// Moves argument i of a computation to `target` unless it is there already: an implicit transfer for
// the transfer guard (host data counts as host-to-device, a move between devices as device-to-device).
// The result keeps the argument's committed flag. `what` names the computation.
absl::StatusOr<ArrayValue> place_argument(const ArrayValue& arg, const Sharding& target, std::string_view what,
                                          size_t i);

// Counters for tests and benchmarks.
struct RunStats {
  int64_t single_device_runs = 0;
  int64_t spmd_runs = 0;
  int64_t spmd_compiles = 0;
  int64_t spmd_cached = 0;  // executables in the process-wide SPMD cache (those of dead live sets are dropped)
};
RunStats run_stats();

}  // namespace mcx
