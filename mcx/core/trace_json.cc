// Chrome trace-event JSON for the profiler (trace_json.h).
#include "mcx/core/trace_json.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mcx/core/json_text.h"
#include "mcx/core/text_file.h"

namespace mcx::profiler {
namespace {

void append_number(std::string& out, double v) { absl::StrAppendFormat(&out, "%.3f", v); }

void append_args(std::string& out, const std::vector<Arg>& args) {
  out += "{";
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0) out += ",";
    out += json_string(args[i].key);
    out += ":";
    if (const auto* n = std::get_if<int64_t>(&args[i].value)) absl::StrAppend(&out, *n);
    else if (const auto* d = std::get_if<double>(&args[i].value)) append_number(out, *d);
    else out += json_string(std::get<std::string>(args[i].value));
  }
  out += "}";
}

}  // namespace

std::string trace_file_name(const TraceFile& file) {
  return file.process_index >= 0 ? absl::StrCat("mcx-trace.p", file.process_index, ".", file.os_pid, ".json")
                                 : absl::StrCat("mcx-trace.", file.os_pid, ".json");
}

std::string trace_json(const TraceFile& file) {
  const int64_t pid = file.process_index >= 0 ? file.process_index : file.os_pid;
  const std::string label = file.process_label.empty() ? absl::StrCat("pid ", file.os_pid) : file.process_label;
  std::string out = "{\"traceEvents\":[\n";
  absl::StrAppend(&out, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":", pid, ",\"tid\":0,\"args\":{\"name\":",
                  json_string(label), "}}");
  for (const TraceThread& t : file.threads) {
    if (t.name.empty()) continue;
    absl::StrAppend(&out, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":", pid, ",\"tid\":", t.tid,
                    ",\"args\":{\"name\":", json_string(t.name), "}}");
  }
  for (const TraceEvent& e : file.events) {
    absl::StrAppend(&out, ",\n{\"ph\":\"", std::string(1, e.phase), "\",\"cat\":", json_string(e.category),
                    ",\"name\":", json_string(e.name), ",\"pid\":", pid, ",\"tid\":", e.tid, ",\"ts\":");
    append_number(out, e.ts_us);
    if (e.phase == 'X') {
      out += ",\"dur\":";
      append_number(out, e.dur_us);
    }
    if (e.phase == 'i') out += ",\"s\":\"p\"";
    if (!e.args.empty()) {
      out += ",\"args\":";
      append_args(out, e.args);
    }
    out += "}";
  }
  absl::StrAppend(&out, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"mcx\",\"process_index\":",
                  file.process_index, ",\"process_label\":", json_string(file.process_label), ",\"os_pid\":",
                  file.os_pid, ",\"host\":", json_string(file.host), ",\"boot_id\":", json_string(file.boot_id), ",\"clock\":\"CLOCK_MONOTONIC\",\"start_monotonic_us\":", file.start_monotonic_us,
                  ",\"start_realtime_us\":", file.start_realtime_us, ",\"dropped_events\":", file.dropped_events,
                  ",\"reference_clock\":{\"offset_us\":", file.reference_offset_us, ",\"error_us\":",
                  file.reference_error_us, "}}}\n");
  return out;
}

absl::Status make_directory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("[profiler] cannot create directory ", dir, ": ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<std::string> write_trace_file(const TraceFile& file) {
  const std::string path = (std::filesystem::path(file.dir) / trace_file_name(file)).string();
  if (absl::Status s = write_text_file(path, trace_json(file)); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("[profiler] ", s.message()));
  }
  return path;
}

}  // namespace mcx::profiler
