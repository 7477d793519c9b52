#include "tests/distributed/multiprocess/mp_harness.h"

#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace mcx::mptest {

std::string tool_path(const std::string& name) { return std::string(MCX_TEST_BIN_DIR) + "/" + name; }
std::string worker_path() { return MCX_TEST_WORKER; }
std::string collectives_worker_path() { return MCX_TEST_COLLECTIVES_WORKER; }
std::string multihost_worker_path() { return MCX_TEST_MULTIHOST_WORKER; }
std::string live_devices_worker_path() { return MCX_TEST_LIVE_DEVICES_WORKER; }
std::string live_scope_worker_path() { return MCX_TEST_LIVE_SCOPE_WORKER; }
std::string hello_path() { return MCX_TEST_HELLO; }
std::string make_certs_script() { return MCX_TEST_MAKE_CERTS; }

bool make_certs(const std::string& dir, int n) {
  Harness h;
  int i = h.spawn("make_certs", {"bash", make_certs_script(), dir, std::to_string(n)});
  if (!h.wait_exit(i, milliseconds(20000)) || h.exit_code(i) != 0) {
    ADD_FAILURE() << "make_certs.sh failed: " << h.dump(i);
    return false;
  }
  return true;
}

std::string process_ids(int n, int except) {
  std::string s;
  for (int p = 0; p < n; ++p) {
    if (p != except) s += (s.empty() ? "" : ",") + std::to_string(p);
  }
  return s;
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

Harness::~Harness() {
  for (auto& p : procs_) {
    if (p.sub && !p.status) p.sub->signal(SIGKILL);
  }
  for (auto& p : procs_) {
    if (p.sub) {
      if (p.sub->stdout_fd() >= 0) pump_.drop(p.sub->stdout_fd());
      if (p.sub->stderr_fd() >= 0) pump_.drop(p.sub->stderr_fd());
    }
  }
}

int Harness::spawn(const std::string& name, std::vector<std::string> argv, const Env& env) {
  tools::SpawnOptions so;
  so.argv = std::move(argv);
  so.env = env;
  // An enclosing launcher's variables must not leak into the job under test.
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                        "OMPI_MCA_orte_hnp_uri", "SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID",
                        "JOB_COMPLETION_INDEX", "MCX_COORDINATOR_PORT"}) {
    if (!env.count(v)) so.unset_env.push_back(v);
  }
  int index = static_cast<int>(procs_.size());
  procs_.push_back(Proc{});
  Proc& p = procs_.back();
  p.name = name;
  p.started = Clock::now();
  auto sub = tools::Subprocess::spawn(so);
  if (!sub.ok()) {
    ADD_FAILURE() << "cannot spawn " << name << ": " << sub.status();
    p.status = ExitStatus{false, 127};
    return index;
  }
  p.sub = std::move(*sub);
  pump_.add(p.sub->stdout_fd(), [this, index](std::string_view l) { procs_[index].out.append(l).push_back('\n'); },
            [this, index] { procs_[index].sub->close_stdout(); });
  pump_.add(p.sub->stderr_fd(), [this, index](std::string_view l) { procs_[index].err.append(l).push_back('\n'); },
            [this, index] { procs_[index].sub->close_stderr(); });
  return index;
}

std::string Harness::start_coordinator(int n, const std::vector<std::string>& extra, const std::string& bind) {
  std::vector<std::string> argv = {tool_path("mcx-coordinator"), "--bind", bind, "--num-processes",
                                   std::to_string(n)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  coordinator_ = spawn("coordinator", argv);
  const std::string marker = "listening on ";
  bool up = run_until(
      [&] { return out(coordinator_).find(marker) != std::string::npos || proc(coordinator_).status; },
      milliseconds(10000));
  const std::string& o = out(coordinator_);
  size_t at = o.find(marker);
  if (!up || at == std::string::npos) {
    ADD_FAILURE() << "mcx-coordinator did not start: " << dump(coordinator_);
    return "";
  }
  size_t end = o.find('\n', at);
  return o.substr(at + marker.size(), end - at - marker.size());
}

Env Harness::worker_env(const std::string& address, int n, int id, const Env& extra) {
  Env env = {{"MCX_COORDINATOR_ADDRESS", address},
             {"MCX_NUM_PROCESSES", std::to_string(n)},
             {"MCX_PROCESS_ID", std::to_string(id)},
             {"MCX_STANDALONE_COORDINATOR", "1"},
             {"MCX_CLUSTER_DETECTION", "env"},
             {"MCX_INIT_TIMEOUT", "10"}};
  for (const auto& [k, v] : extra) env[k] = v;
  return env;
}

void Harness::pump_once(milliseconds timeout) {
  pump_.pump(timeout);
  for (auto& p : procs_) {
    if (!p.sub || p.status) continue;
    if (auto s = p.sub->poll()) {
      p.status = s;
      p.exited = Clock::now();
    }
  }
}

bool Harness::run_until(const std::function<bool()>& pred, milliseconds timeout) {
  Clock::time_point deadline = Clock::now() + timeout;
  while (!pred()) {
    if (Clock::now() >= deadline) return false;
    pump_once(milliseconds(5));
  }
  return true;
}

bool Harness::wait_exit(int i, milliseconds timeout) {
  bool ok = run_until([&] { return procs_[i].status.has_value(); }, timeout);
  // Collect the rest of its output (bounded).
  run_until([&] { return procs_[i].sub == nullptr ||
                         (procs_[i].sub->stdout_fd() < 0 && procs_[i].sub->stderr_fd() < 0); },
            milliseconds(ok ? 1000 : 0));
  return ok;
}

bool Harness::wait_exits(const std::vector<int>& ids, milliseconds timeout) {
  Clock::time_point deadline = Clock::now() + timeout;
  for (int i : ids) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (!wait_exit(i, std::max(left, milliseconds(0)))) return false;
  }
  return true;
}

bool Harness::wait_output(int i, const std::string& needle, milliseconds timeout) {
  return run_until([&] { return procs_[i].out.find(needle) != std::string::npos; }, timeout);
}

void Harness::kill9(int i) {
  if (procs_[i].sub) ::kill(procs_[i].sub->pid(), SIGKILL);
}

std::string Harness::dump(int i) const {
  const Proc& p = procs_[i];
  return absl::StrCat("\n--- ", p.name, " (", p.status ? p.status->to_string() : "running", ") stdout:\n", p.out,
                      "--- stderr:\n", p.err);
}

std::string Harness::dump_all() const {
  std::string s;
  for (size_t i = 0; i < procs_.size(); ++i) s += dump(static_cast<int>(i));
  return s;
}

}  // namespace mcx::mptest
