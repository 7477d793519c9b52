// The profiler's file format (profiler.h): Chrome trace-event JSON ("JSON Object Format": traceEvents plus
// metadata), the format Perfetto's trace processor and chrome://tracing read. Internal to the profiler and the
// tools that merge its files.
// Thread-safety: the functions are pure apart from the file they write.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mcx/core/profiler.h"

namespace mcx::profiler {

struct TraceEvent {
  char phase = 'X';                // 'X' complete, 'i' instant, 'C' counter
  const char* category = "";       // a literal
  std::string name;
  double ts_us = 0, dur_us = 0;    // CLOCK_MONOTONIC microseconds; dur for 'X' only
  std::vector<Arg> args;
  int tid = 0;
};

struct TraceThread {
  int tid = 0;
  std::string name;  // empty: unnamed
};

// One process's trace.
struct TraceFile {
  std::string dir;
  int process_index = -1;  // -1: not part of a job (pid is then os_pid)
  std::string process_label;
  int64_t os_pid = 0;
  std::string host;     // the host's name
  std::string boot_id;  // the running kernel's boot id: processes with the same one share CLOCK_MONOTONIC
  int64_t start_monotonic_us = 0, start_realtime_us = 0;
  int64_t dropped_events = 0;
  // The reference clock (profiler.h, set_reference_clock): error -1 when this process had no estimate.
  int64_t reference_offset_us = 0, reference_error_us = -1;
  std::vector<TraceThread> threads;
  std::vector<TraceEvent> events;
};

// The file's name in its directory: mcx-trace.p<index>.<os pid>.json, or mcx-trace.<os pid>.json outside a job.
std::string trace_file_name(const TraceFile& file);
// The JSON text of `file`.
std::string trace_json(const TraceFile& file);
// Writes trace_json(file) to dir/trace_file_name(file) (through a temporary file renamed into place) and returns
// the path. Errors: the OS's, naming the path.
absl::StatusOr<std::string> write_trace_file(const TraceFile& file);
// Creates `dir` and its parents where missing. Errors: the OS's, naming the path.
absl::Status make_directory(const std::string& dir);

}  // namespace mcx::profiler
