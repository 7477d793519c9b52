// mcx-run: launch an N-process mcx job on this host.
//
//   mcx-run -n 4 [--cpu-devices 2 | --gpus-per-process 1 [--gpus 1]] [--max-restarts 1] [timeouts] [mTLS flags] -- ./my_program args...
//
// Starts mcx-coordinator on a free loopback port (or uses --coordinator ADDR), then N copies of PROGRAM with
// MCX_COORDINATOR_ADDRESS / MCX_NUM_PROCESSES / MCX_PROCESS_ID (and the other MCX_* settings) set, prefixes
// their output lines with "[p<i>] ", and exits with the first failure's exit code. See docs/distributed.md.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "tools/mcx-run/launcher.h"
#include "tools/common/mtls_flags.h"

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
  app.add_flag("-v,--verbose", o.verbose, "report coordinator and process lifecycle");
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
  return mcx::tools::run_job(o);
}
