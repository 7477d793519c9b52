// mcx-run: launch an N-process mcx job on this host.
//
//   mcx-run -n 4 [--cpu-devices 2 | --gpus-per-process 1 [--gpus 1]] [--max-restarts 1] [timeouts] [mTLS flags]
//           [--cpu-bind cores] [--profile DIR] [--report FILE.html] -- ./my_program args...
//
// Starts mcx-coordinator on a free loopback port (or uses --coordinator ADDR), then N copies of PROGRAM with
// MCX_COORDINATOR_ADDRESS / MCX_NUM_PROCESSES / MCX_PROCESS_ID (and the other MCX_* settings) set, prefixes
// their output lines with "[p<i>] ", and exits with the first failure's exit code. See docs/distributed.md.
// --profile DIR: each process writes its trace there, merged at the end into DIR/job.trace.json;
// --report FILE: an HTML report of the job drawn from it (docs/profiling.md). --cpu-bind cores: each process on
// its own block of cores (launcher.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>

#include "absl/strings/str_cat.h"
#include "tools/common/mtls_flags.h"
#include "tools/common/trace_merge.h"
#include "tools/common/trace_report.h"
#include "tools/mcx-run/launcher.h"

namespace {

// The directory exists and holds no traces of an earlier run (they would be merged with this one's).
absl::Status prepare_profile_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("mcx-trace.", 0) == 0 || name == "job.trace.json") std::filesystem::remove(entry.path(), ec);
  }
  if (ec) return absl::InvalidArgumentError(absl::StrCat("cannot clear the traces of an earlier run in ", dir, ": ", ec.message()));
  return absl::OkStatus();
}

// Merges the processes' traces, writes the HTML report when asked, and says where the results are (a failure
// is reported, not fatal: the job's exit code stands).
void report_profile(const std::string& dir, const std::string& html) {
  absl::StatusOr<mcx::tools::TraceMergeReport> r = mcx::tools::merge_job_traces({.dir = dir});
  if (!r.ok()) {
    std::cerr << "[mcx-run] --profile: " << r.status().message() << "\n";
    return;
  }
  std::cerr << "[mcx-run] profile: " << r->out << " (" << r->processes << " process traces, " << r->events
            << " events; clock: " << r->clock << ", error "
            << (r->max_clock_error_us < 0 ? std::string("unknown") : absl::StrCat("<= ", r->max_clock_error_us, " us"))
            << "); open it in Perfetto (ui.perfetto.dev)\n";
  for (const std::string& note : r->notes) std::cerr << "[mcx-run] profile: " << note << "\n";
  if (html.empty()) return;
  absl::StatusOr<mcx::tools::TraceReportSummary> page = mcx::tools::write_job_report(r->merged, html);
  if (!page.ok()) {
    std::cerr << "[mcx-run] --report: " << page.status().message() << "\n";
    return;
  }
  std::cerr << "[mcx-run] report: " << page->out << " (open it in a browser)\n";
}

}  // namespace

int main(int argc, char** argv) {
  mcx::tools::LaunchOptions o;
  CLI::App app{"mcx-run: start the coordinator and N processes of an mcx job on this host"};
  app.add_option("-n,--num-processes", o.num_processes, "number of processes")->required()->check(CLI::Range(1, 4096));
  app.add_option("--cpu-devices", o.cpu_devices, "virtual CPU devices per process (MCX_CPU_DEVICE_COUNT)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--gpus-per-process", o.gpus_per_process,
                 "GPUs per process (MCX_LOCAL_DEVICE_IDS): process i gets GPUs i*G .. i*G+G-1, modulo --gpus")
      ->check(CLI::Range(0, 64));
  app.add_option("--gpus", o.host_gpus,
                 "GPUs this host has (as CUDA_VISIBLE_DEVICES leaves them); fewer than -n times --gpus-per-process "
                 "makes processes share GPUs (default: exactly enough)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--max-restarts", o.max_restarts,
                 "restart a failed process up to R times (runs the coordinator in recoverable mode)")
      ->check(CLI::Range(0, 1000));
  app.add_flag("--recoverable", o.recoverable,
               "a process that fails (with no restarts left) does not end the others: they are told and carry on; "
               "the job succeeds when every process that did not fail does");
  app.add_option("--coordinator", o.coordinator, "use this running coordinator (HOST:PORT) instead of starting one");
  app.add_option("--coordinator-binary", o.coordinator_binary, "path of mcx-coordinator");
  app.add_option("--coordinator-host", o.bind_host, "address the started coordinator binds (default 127.0.0.1)");
  app.add_option("--coordinator-port", o.coordinator_port, "port of the started coordinator (default: any free)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--coordinator-restarts", o.max_coordinator_restarts,
                 "recoverable jobs: start a coordinator that died again on the same address (its processes rejoin "
                 "it) up to this many times")
      ->check(CLI::Range(0, 1000));
  app.add_option("--heartbeat-interval", o.heartbeat_interval, "seconds between heartbeats");
  app.add_option("--heartbeat-timeout", o.heartbeat_timeout, "seconds without heartbeat before a task is failed");
  app.add_option("--init-timeout", o.init_timeout, "seconds to wait for all processes to register");
  app.add_option("--shutdown-timeout", o.shutdown_timeout, "seconds of the shutdown barrier");
  app.add_option("--grace-period", o.grace_period, "seconds between SIGTERM and SIGKILL when ending processes");
  app.add_option("--timeout", o.job_timeout, "end the whole job after this many seconds (0 = no limit)");
  app.add_flag("--no-prefix{false}", o.prefix_output, "let processes write to the terminal directly");
  using mcx::tools::CpuBind;
  const std::map<std::string, CpuBind> binds{{"none", CpuBind::kNone}, {"cores", CpuBind::kCores}};
  app.add_option("--cpu-bind", o.cpu_bind,
                 "none (default): processes go where the kernel puts them; cores: each process bound to its own "
                 "block of whole cores of mcx-run's CPUs (more processes than CPUs: one CPU each, shared)")
      ->transform(CLI::CheckedTransformer(binds, CLI::ignore_case));
  app.add_flag("-v,--verbose", o.verbose, "report coordinator and process lifecycle");
  app.add_option("--profile", o.profile_dir,
                 "trace every process into DIR (MCX_PROFILE_DIR) and merge the traces into DIR/job.trace.json on one "
                 "clock (Chrome trace-event JSON: open it in Perfetto, docs/profiling.md)");
  std::string report;
  app.add_option("--report", report,
                 "write an HTML report of the job (timeline, step time, throughput, failures) to FILE; traces the "
                 "processes into --profile DIR, or FILE.traces/ without it");
  mcx::tools::add_mtls_flags(app, o.mtls, /*per_task=*/true);
  app.add_option("--coordinator-mtls-cert", o.coordinator_mtls_cert,
                 "coordinator certificate (default: --mtls-cert with {id} = coordinator)");
  app.add_option("--coordinator-mtls-key", o.coordinator_mtls_key,
                 "coordinator key (default: --mtls-key with {id} = coordinator)");
  app.add_option("program", o.program, "PROGRAM ARGS... (after --)")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (o.host_gpus > 0 && o.gpus_per_process > o.host_gpus) {
    std::cerr << "[mcx-run] --gpus-per-process " << o.gpus_per_process << " is more than the host's --gpus "
              << o.host_gpus << "\n";
    return 2;
  }
  if (o.host_gpus > 0 && o.gpus_per_process == 0) {
    std::cerr << "[mcx-run] --gpus needs --gpus-per-process\n";
    return 2;
  }
  if (o.max_restarts > 0 && !o.coordinator.empty()) {
    std::cerr << "[mcx-run] --max-restarts needs a recoverable coordinator; start it with --recoverable\n";
  }
  if (!report.empty() && o.profile_dir.empty()) o.profile_dir = report + ".traces";
  if (!o.profile_dir.empty()) {
    absl::Status ready = prepare_profile_dir(o.profile_dir);
    if (!ready.ok()) {
      std::cerr << "[mcx-run] --profile: " << ready.message() << "\n";
      return 2;
    }
    o.profile_dir = std::filesystem::absolute(o.profile_dir).string();
  }
  const int code = mcx::tools::run_job(o);
  if (!o.profile_dir.empty()) report_profile(o.profile_dir, report);
  return code;
}
