// mcx's profiler: timed events of this process (compiles, launches, collectives, host transfers, data-loader
// waits, checkpoint phases, fault-tolerance events), written as one Chrome trace-event JSON file per process
// that Perfetto (ui.perfetto.dev) and chrome://tracing open. docs/profiling.md shows how to take and read one.
//
// A session runs from start() to stop(). With MCX_PROFILE_DIR=DIR set, one starts at the process's first event
// (the first call of active()) and ends at exit, when it writes its file; start() and stop() (or a Session
// object) take traces of parts of a program. Code records events only while a session runs: Scope, instant()
// and counter() cost one relaxed atomic load when none does.
//
// The file: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}. Events carry "pid" (the
// process's index in the job once set_process was called, else its OS pid), "tid" (a small number per thread,
// named by "thread_name" metadata events), "ts" (microseconds of CLOCK_MONOTONIC, one clock for every process
// of a host) and, for complete events ("ph": "X"), "dur". otherData records the host and its kernel's boot id,
// the clocks at the session's start (monotonic and real time, microseconds) and the offset from the job's
// reference clock (set_reference_clock), so that traces of several hosts can be put on one clock
// (tools/common/trace_merge.h).
//
// Errors: start_session with a session already running is FailedPrecondition; a directory that cannot be created
// or a file that cannot be written is the OS error naming the path. The public API (start, stop, Session) throws
// those as mcx::Error; nothing else throws. Events are kept in memory until stop(): at most kMaxEvents per
// session (later ones are counted, reported in otherData.dropped_events, and dropped).
// Thread-safety: every function may be called from any thread; a Scope belongs to the thread that made it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mcx::profiler {

inline constexpr int64_t kMaxEvents = 1'000'000;  // about 150 MB of memory at most

// Whether a session is running (starting the one MCX_PROFILE_DIR asks for on first call).
bool active();

// The clock of every timestamp in traces: CLOCK_MONOTONIC in microseconds (shared by the processes of a host).
int64_t trace_clock_us();

// This process's clock against the job's reference clock (the coordination service host's trace clock):
// reference = trace_clock_us() + offset_us, within +-error_us. The distributed layer sets it from its heartbeats
// (half the round trip is the error; the sample with the shortest round trip wins); a trace records the latest
// in otherData.reference_clock, and merging puts every process on the reference clock with it.
void set_reference_clock(int64_t offset_us, int64_t error_us);

// Starts a session that stop() writes under `dir` (created if missing). FailedPrecondition if one runs.
absl::Status start_session(const std::string& dir);
// Ends the session and writes its file, DIR/mcx-trace.<process>.<pid>.json; returns that path.
// FailedPrecondition when none runs.
absl::StatusOr<std::string> stop_session();

// Names this process in traces: its index in the job (the trace's pid) and a label ("process 1 on host-a").
// The distributed layer calls it when the job starts; before that, traces use the OS pid and no label.
void set_process(int index, std::string label);
// Names the calling thread in traces ("device cpu:0 stream", "data loader").
void set_thread_name(std::string name);

// An event's argument value, shown in the trace viewer's details.
using ArgValue = std::variant<int64_t, double, std::string>;
struct Arg {
  std::string key;
  ArgValue value;
};

// A complete event ("X"): from construction to destruction on this thread. No-op unless a session is running
// when it is made. `category` is a literal ("compile", "launch", "collective", "transfer", "data",
// "checkpoint", "fault_tolerance").
class Scope {
 public:
  Scope(const char* category, std::string_view name);
  // The name first + second, joined only when recording (no string is built on a path that runs untraced).
  Scope(const char* category, std::string_view first, std::string_view second);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  bool recording() const { return start_ns_ >= 0; }
  // Adds an argument (ignored when not recording).
  Scope& arg(std::string_view key, int64_t value);
  Scope& arg(std::string_view key, double value);
  Scope& arg(std::string_view key, std::string_view value);

 private:
  const char* category_;
  int64_t start_ns_ = -1;
  std::string name_;
  std::vector<Arg> args_;
};

// A moment ("i", process-wide): a failure noticed, a checkpoint committed, a preemption sync point.
void instant(const char* category, std::string_view name, std::vector<Arg> args = {});
// A counter track ("C"): `name` takes `value` from now on (bytes in flight, queue depth).
void counter(const char* category, std::string_view name, double value);

// Public API: a session for the object's lifetime (the scope object of JAX's jax.profiler.trace). Throws
// mcx::Error as start_session does; the destructor writes the file (an error there is logged, not thrown) and
// path() says where.
class Session {
 public:
  explicit Session(const std::string& dir);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  // Ends the session now and returns the file's path (throws mcx::Error as stop_session).
  std::string stop();

 private:
  bool running_ = true;
};

// Public API: start_session and stop_session, throwing mcx::Error.
void start(const std::string& dir);
std::string stop();

}  // namespace mcx::profiler
