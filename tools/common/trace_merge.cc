#include "tools/common/trace_merge.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "mcx/core/text_file.h"

namespace mcx::tools {
namespace {

using nlohmann::json;

struct ProcessTrace {
  std::string file;
  json doc;
  int index = -1;
  int64_t start_monotonic_us = 0, start_realtime_us = 0;
  int64_t offset_us = 0, error_us = -1;  // the recorded reference clock (error -1: none)
  std::string boot_id;
};

absl::StatusOr<ProcessTrace> read_trace(const std::string& path) {
  absl::StatusOr<std::string> text = read_text_file(path);
  if (!text.ok()) return absl::Status(text.status().code(), absl::StrCat("[trace merge] ", text.status().message()));
  ProcessTrace t;
  t.file = path;
  t.doc = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("[trace merge] ", path, ": ", why));
  };
  if (t.doc.is_discarded()) return bad("not JSON (a trace cut short?)");
  if (!t.doc.is_object() || !t.doc.contains("traceEvents") || !t.doc["traceEvents"].is_array() ||
      !t.doc.contains("otherData") || !t.doc["otherData"].is_object()) {
    return bad("expected a profiler trace (traceEvents and otherData)");
  }
  const json& o = t.doc["otherData"];
  if (o.value("producer", "") != "mcx") return bad("expected otherData.producer \"mcx\"");
  t.index = o.value("process_index", -1);
  t.start_monotonic_us = o.value("start_monotonic_us", int64_t{0});
  t.start_realtime_us = o.value("start_realtime_us", int64_t{0});
  t.boot_id = o.value("boot_id", "");
  if (o.contains("reference_clock") && o["reference_clock"].is_object()) {
    t.offset_us = o["reference_clock"].value("offset_us", int64_t{0});
    t.error_us = o["reference_clock"].value("error_us", int64_t{-1});
  }
  return t;
}

}  // namespace

absl::StatusOr<TraceMergeReport> merge_job_traces(const TraceMergeOptions& options) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options.dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("mcx-trace.", 0) == 0 && name.size() > 5 && name.substr(name.size() - 5) == ".json") {
      paths.push_back(entry.path().string());
    }
  }
  if (ec) return absl::NotFoundError(absl::StrCat("[trace merge] cannot read ", options.dir, ": ", ec.message()));
  if (paths.empty()) {
    return absl::NotFoundError(absl::StrCat("[trace merge] no process traces (mcx-trace.*.json) in ", options.dir));
  }
  std::vector<ProcessTrace> traces;
  for (const std::string& p : paths) {
    absl::StatusOr<ProcessTrace> t = read_trace(p);
    if (!t.ok()) return t.status();
    traces.push_back(*std::move(t));
  }
  // Processes in index order, a restarted process's incarnations in the order they started.
  std::sort(traces.begin(), traces.end(), [](const ProcessTrace& a, const ProcessTrace& b) {
    return std::tie(a.index, a.start_monotonic_us) < std::tie(b.index, b.start_monotonic_us);
  });

  TraceMergeReport report;
  report.out = options.out.empty() ? (std::filesystem::path(options.dir) / "job.trace.json").string() : options.out;
  std::set<std::string> kernels;
  for (const ProcessTrace& t : traces) kernels.insert(t.boot_id);
  const bool one_kernel = kernels.size() == 1 && !traces[0].boot_id.empty();
  std::vector<int64_t> shift(traces.size(), 0);
  if (one_kernel && options.clock == TraceMergeOptions::Clock::kAuto) {
    report.clock = "one kernel's CLOCK_MONOTONIC (every process on one host)";
  } else {
    report.clock = "the coordination service's clock";
    // Per kernel, the best estimate any of its processes made: they all read the same clock.
    std::map<std::string, const ProcessTrace*> best;
    for (const ProcessTrace& t : traces) {
      if (t.error_us < 0 || t.boot_id.empty()) continue;
      auto& b = best[t.boot_id];
      if (b == nullptr || t.error_us < b->error_us) b = &t;
    }
    const ProcessTrace* any = nullptr;  // a process with an estimate, for wall-clock fallbacks
    for (const auto& [id, t] : best) {
      if (any == nullptr || t->error_us < any->error_us) any = t;
    }
    for (size_t i = 0; i < traces.size(); ++i) {
      const ProcessTrace& t = traces[i];
      const ProcessTrace* own = t.error_us >= 0 ? &t : (best.count(t.boot_id) ? best[t.boot_id] : nullptr);
      if (own != nullptr) {
        shift[i] = own->offset_us;
        report.max_clock_error_us = report.max_clock_error_us < 0 ? -1 : std::max(report.max_clock_error_us, own->error_us);
        continue;
      }
      // No estimate on this kernel: through the wall clocks (theirs and the estimating process's), whose
      // agreement nothing here knows.
      report.max_clock_error_us = -1;
      if (any != nullptr) {
        shift[i] = (t.start_realtime_us - t.start_monotonic_us) - (any->start_realtime_us - any->start_monotonic_us) +
                   any->offset_us;
      }
      report.notes.push_back(absl::StrCat("process ", t.index, " (", t.file, ") had no estimate of its clock: placed ",
                                          any != nullptr ? "by its wall clock (error unknown)" : "unshifted"));
    }
  }

  json events = json::array();
  std::map<int, int> incarnations;  // process index -> files seen
  for (size_t i = 0; i < traces.size(); ++i) {
    ProcessTrace& t = traces[i];
    const int seen = incarnations[t.index]++;
    // A restarted process's later incarnations get tracks of their own.
    const int64_t pid = seen == 0 ? t.index : int64_t{100000} + int64_t{t.index} * 100 + seen;
    if (seen > 0) {
      report.notes.push_back(absl::StrCat("process ", t.index, " ran ", seen + 1, " times (restarted): incarnation ",
                                          seen + 1, " is pid ", pid));
    }
    for (json& e : t.doc["traceEvents"]) {
      if (t.index >= 0 || seen > 0) e["pid"] = pid;
      if (e.contains("ts") && e["ts"].is_number()) e["ts"] = e["ts"].get<double>() + static_cast<double>(shift[i]);
      if (seen > 0 && e.value("ph", "") == "M" && e.value("name", "") == "process_name") {
        e["args"]["name"] = absl::StrCat(e["args"].value("name", ""), " (incarnation ", seen + 1, ")");
      }
      events.push_back(std::move(e));
    }
    report.events += static_cast<int64_t>(t.doc["traceEvents"].size());
  }
  json processes = json::array();
  for (size_t i = 0; i < traces.size(); ++i) {
    processes.push_back({{"process_index", traces[i].index}, {"file", traces[i].file}, {"shift_us", shift[i]},
                         {"clock_error_us", traces[i].error_us}, {"boot_id", traces[i].boot_id}});
  }
  report.processes = static_cast<int>(traces.size());
  json merged = {{"traceEvents", std::move(events)},
                       {"displayTimeUnit", "ms"},
                       {"otherData",
                        {{"producer", "mcx trace merge"},
                         {"clock", report.clock},
                         {"max_clock_error_us", report.max_clock_error_us},
                         {"processes", std::move(processes)},
                         {"notes", report.notes}}}};
  if (absl::Status s = write_text_file(report.out, merged.dump() + "\n"); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("[trace merge] ", s.message()));
  }
  report.merged = std::move(merged);
  return report;
}

}  // namespace mcx::tools
