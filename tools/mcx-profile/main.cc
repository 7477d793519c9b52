// mcx-profile: work with the profiler's traces (docs/profiling.md).
//
//   mcx-profile merge DIR [-o FILE] [--clock auto|reference]
//   mcx-profile report TRACE -o report.html
//   mcx-profile check TRACE
//
// merge: the per-process traces in DIR (mcx-trace.*.json, written under MCX_PROFILE_DIR) as one Chrome trace-event
// file on one clock (default DIR/job.trace.json), as `mcx-run --profile` does at the end of a job. --clock
// reference puts every process on the coordination service's clock even when all share one kernel's.
// report: a self-contained HTML page (timeline, step time, throughput, failures) from TRACE, a merged trace or
// a directory of process traces (merged first), as `mcx-run --report` writes.
// check: whether TRACE follows the trace-event format the viewers read (tools/common/trace_check.h); prints its
// events per process and category.
// Exit codes: 0 done, 1 nothing to merge or a bad trace (the message says which), 2 usage.
#include <CLI/CLI.hpp>

#include <iostream>

#include <filesystem>

#include <map>

#include "mcx/core/text_file.h"
#include "tools/common/trace_check.h"
#include "tools/common/trace_merge.h"
#include "tools/common/trace_report.h"

int main(int argc, char** argv) {
  CLI::App app{"mcx-profile: the profiler's traces (docs/profiling.md)"};
  app.require_subcommand(1);
  mcx::tools::TraceMergeOptions merge;
  std::string clock = "auto";
  CLI::App* m = app.add_subcommand("merge", "merge a job's process traces onto one clock");
  m->add_option("dir", merge.dir, "directory of the traces (MCX_PROFILE_DIR)")->required();
  m->add_option("-o,--output", merge.out, "merged file (default DIR/job.trace.json)");
  m->add_option("--clock", clock, "auto: one kernel's clock when every process shares it; reference: the service's")
      ->check(CLI::IsMember({"auto", "reference"}));
  std::string report_input, report_out;
  CLI::App* rep = app.add_subcommand("report", "an HTML report of a job's trace");
  rep->add_option("trace", report_input, "merged trace (job.trace.json), or a directory of process traces")->required();
  rep->add_option("-o,--output", report_out, "the HTML page to write")->required();
  std::string check_input;
  CLI::App* chk = app.add_subcommand("check", "check a trace against the trace-event format");
  chk->add_option("trace", check_input, "a trace file (a process's or a merged one)")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (chk->parsed()) {
    absl::StatusOr<std::string> text = mcx::read_text_file(check_input);
    absl::StatusOr<nlohmann::json> doc = text.ok() ? mcx::tools::parse_trace_events(*text) : text.status();
    if (!doc.ok()) {
      std::cerr << "mcx-profile: " << check_input << ": " << doc.status().message() << "\n";
      return 1;
    }
    std::map<std::pair<int64_t, std::string>, int64_t> counts;  // (pid, category) -> events
    for (const nlohmann::json& e : (*doc)["traceEvents"]) {
      if (e["ph"] != "M") ++counts[{e["pid"].get<int64_t>(), e.value("cat", "")}];
    }
    std::cout << check_input << ": a valid trace-event file, " << (*doc)["traceEvents"].size() << " events\n";
    for (const auto& [key, n] : counts) std::cout << "  pid " << key.first << " " << key.second << ": " << n << "\n";
    return 0;
  }
  if (rep->parsed()) {
    absl::StatusOr<mcx::tools::TraceReportSummary> r;
    if (std::filesystem::is_directory(report_input)) {
      absl::StatusOr<mcx::tools::TraceMergeReport> merged = mcx::tools::merge_job_traces({.dir = report_input});
      if (!merged.ok()) {
        std::cerr << "mcx-profile: " << merged.status().message() << "\n";
        return 1;
      }
      r = mcx::tools::write_job_report(merged->merged, report_out);
    } else {
      r = mcx::tools::write_job_report(report_input, report_out);
    }
    if (!r.ok()) {
      std::cerr << "mcx-profile: " << r.status().message() << "\n";
      return 1;
    }
    std::cout << r->out << ": " << r->processes << " processes, " << r->timeline_events << " timeline events"
              << (r->step_program.empty() ? std::string() : "; " + std::to_string(r->steps) + " steps of " + r->step_program)
              << "\n";
    return 0;
  }
  merge.clock = clock == "reference" ? mcx::tools::TraceMergeOptions::Clock::kReference
                                     : mcx::tools::TraceMergeOptions::Clock::kAuto;
  absl::StatusOr<mcx::tools::TraceMergeReport> r = mcx::tools::merge_job_traces(merge);
  if (!r.ok()) {
    std::cerr << "mcx-profile: " << r.status().message() << "\n";
    return 1;
  }
  std::cout << r->out << ": " << r->processes << " process traces, " << r->events << " events; clock: " << r->clock
            << ", error " << (r->max_clock_error_us < 0 ? std::string("unknown")
                                                          : "<= " + std::to_string(r->max_clock_error_us) + " us")
            << "\n";
  for (const std::string& note : r->notes) std::cout << "note: " << note << "\n";
  return 0;
}
