// Merges the traces of a job's processes (one file each, written by the profiler, mcx/core/profiler.h) into one
// Chrome trace-event file on one clock, so that a step lines up across processes and a straggler shows. Used by
// `mcx-run --profile DIR` and `mcx-profile merge DIR`.
//
// The clock: processes whose files name the same boot id run on one kernel and share CLOCK_MONOTONIC, so the
// traces of a one-host job need no correction (error 0). Otherwise (or with Clock::kReference) each process's
// events move onto the coordination service's clock by the offset its heartbeats estimated
// (otherData.reference_clock), within the error it recorded; a process without an estimate takes the one of
// another process of its kernel, and failing that its wall clock (error unknown, reported in the notes).
//
// Errors: NotFound when `dir` holds no mcx-trace.*.json; InvalidArgument naming a file that is not a profiler
// trace; the OS's when the output cannot be written.
// Thread-safety: a pure function over its files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace mcx::tools {

struct TraceMergeOptions {
  std::string dir;  // the per-process traces (mcx-trace.*.json)
  std::string out;  // the merged file (default: dir/job.trace.json)
  enum class Clock { kAuto, kReference };
  Clock clock = Clock::kAuto;  // kReference: the service's clock even when all share one kernel (tests)
};

struct TraceMergeReport {
  std::string out;
  int processes = 0;  // files merged
  int64_t events = 0;
  std::string clock;              // "one kernel's CLOCK_MONOTONIC" or "the coordination service's clock"
  int64_t max_clock_error_us = 0;  // the largest error of any process's offset; -1 when one is unknown
  std::vector<std::string> notes;  // what the reader should know (a process on its wall clock, a restart)
  nlohmann::json merged;           // the merged document written to `out` (a report reads it from here)
};

absl::StatusOr<TraceMergeReport> merge_job_traces(const TraceMergeOptions& options);

}  // namespace mcx::tools
