// Test harness for the multi-process tests: spawns real processes (mcx-coordinator, mcx-run, mcx-ctl,
// mp_worker, hello_distributed), captures their output, and waits for output or exits with deadlines.
// Paths of the built programs come from compile definitions (see CMakeLists.txt).
//
// Not thread-safe: one test body drives one Harness. The destructor kills (SIGKILL) whatever still runs.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tools/common/subprocess.h"

#include "tests/support/temp_dir.h"

namespace mcx::mptest {

using tools::Clock;
using tools::ExitStatus;
using Env = std::map<std::string, std::string>;
using std::chrono::milliseconds;

std::string tool_path(const std::string& name);  // mcx-coordinator, mcx-run, mcx-ctl
std::string worker_path();                       // mp_worker
std::string collectives_worker_path();           // collectives_worker
std::string multihost_worker_path();             // multihost_worker
std::string live_devices_worker_path();          // live_devices_worker
std::string live_scope_worker_path();            // live_scope_worker
std::string hello_path();                        // hello_distributed
std::string make_certs_script();

using TempDir = test::TempDir;

// Runs make_certs.sh into dir for n tasks; returns false (and prints why) on failure.
bool make_certs(const std::string& dir, int n);

class Harness {
 public:
  struct Proc {
    std::unique_ptr<tools::Subprocess> sub;
    std::string name;
    std::string out, err;
    std::optional<ExitStatus> status;
    Clock::time_point started, exited;
  };

  ~Harness();

  // Spawns argv with env added to this process's environment (cluster variables of an enclosing
  // mpirun/Slurm are removed, so detection sees only what the test sets). Returns the process index.
  int spawn(const std::string& name, std::vector<std::string> argv, const Env& env = {});

  // Starts mcx-coordinator on `bind` (default 127.0.0.1:0, a free port) for n tasks with extra flags; returns
  // its address (empty and ADD_FAILURE on error). Its index is coordinator_index() (the newest one started).
  // Pass the address of a killed coordinator to start it again on the same port.
  std::string start_coordinator(int n, const std::vector<std::string>& extra = {},
                                const std::string& bind = "127.0.0.1:0");
  int coordinator_index() const { return coordinator_; }

  // Environment of task `id` of an n-task job using the standalone coordinator at address.
  static Env worker_env(const std::string& address, int n, int id, const Env& extra = {});

  // Pumps output and reaps exits until pred() or timeout; returns pred().
  bool run_until(const std::function<bool()>& pred, milliseconds timeout);
  bool wait_exit(int i, milliseconds timeout);
  bool wait_exits(const std::vector<int>& procs, milliseconds timeout);
  bool wait_output(int i, const std::string& needle, milliseconds timeout);

  Proc& proc(int i) { return procs_[i]; }
  const std::string& out(int i) const { return procs_[i].out; }
  const std::string& err(int i) const { return procs_[i].err; }
  int exit_code(int i) const { return procs_[i].status ? procs_[i].status->exit_code() : -1; }
  // Everything a process printed, for failure messages.
  std::string dump(int i) const;
  std::string dump_all() const;
  void kill9(int i);

 private:
  void pump_once(milliseconds timeout);
  std::vector<Proc> procs_;
  tools::OutputPump pump_;
  int coordinator_ = -1;
};

// Seconds between two time points.
double seconds_between(Clock::time_point a, Clock::time_point b);

// "0,1,...,n-1" without `except` (-1: none), as the workers print process lists.
std::string process_ids(int n, int except = -1);

}  // namespace mcx::mptest
