// A job report: one self-contained HTML page (no network, no files beside it) drawn from a merged job trace
// (trace_merge.h): a timeline per process and thread (launches, collectives, data waits, compiles, checkpoint
// phases; failures and recovery as marks), the step time and the throughput of the job's training step, and a
// table of the fault-tolerance and checkpoint events. Written by `mcx-run --report FILE` and
// `mcx-profile report`; docs/profiling.md shows one.
//
// The step: the launch (category "launch") of a jit program that each process launched most often, on each
// process's first stream; step time is the interval between consecutive starts there (what a step costs,
// waits included), throughput the steps started per second.
//
// Errors: NotFound or InvalidArgument naming the trace that cannot be read; the OS's when the page cannot be
// written. The page itself reports a rendering failure in its element #status ("rendered" when drawn).
// Thread-safety: a pure function over its files.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace mcx::tools {

struct TraceReportSummary {
  std::string out;
  int processes = 0;
  int64_t steps = 0;          // of the busiest process
  std::string step_program;   // empty when no jit program was launched
  int64_t timeline_events = 0;
};

// Writes the report of the merged trace `trace` (trace_merge.h's document) to `out_path`.
absl::StatusOr<TraceReportSummary> write_job_report(const nlohmann::json& trace, const std::string& out_path);
// The same, reading the merged trace from `trace_path`.
absl::StatusOr<TraceReportSummary> write_job_report(const std::string& trace_path, const std::string& out_path);

}  // namespace mcx::tools
