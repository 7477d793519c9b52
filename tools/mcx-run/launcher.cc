#include "tools/mcx-run/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <regex>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "mcx/core/cpu_affinity.h"
#include "mcx/distributed/coordination/agent.h"
#include "tools/common/env_names.h"
#include "tools/common/subprocess.h"

namespace mcx::tools {
namespace {

using std::chrono::milliseconds;

// Self-pipe: signal handlers write the signal number, the event loop polls the read end.
int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  ssize_t ignored = write(g_signal_pipe[1], &b, 1);
  (void)ignored;
  errno = saved;
}

void install_signal_handlers() {
  if (g_signal_pipe[0] < 0) {
    if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGCHLD, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

// Debian's abseil does not take std::string_view in StrCat.
std::string join_line(std::string_view prefix, std::string_view line) {
  std::string s;
  s.reserve(prefix.size() + line.size() + 1);
  s.append(prefix).append(line).push_back('\n');
  return s;
}

std::string seconds_str(double s) { return absl::StrCat(s); }

std::string for_task(const std::string& path, const std::string& id) {
  return absl::StrReplaceAll(path, {{"{id}", id}});
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

class Job {
 public:
  explicit Job(const LaunchOptions& o)
      : o_(o), workers_(o.num_processes), restarts_(o.num_processes, 0), joined_(o.num_processes, false),
        started_again_(o.num_processes, false) {}
  int run();

 private:
  struct Worker {
    std::unique_ptr<Subprocess> proc;
    bool done = false;      // exited and will not be restarted
    bool reaped = false;    // the current incarnation has exited
    std::optional<Clock::time_point> restart_at;
    std::optional<ExitStatus> failure;  // how the last incarnation failed, unless the launcher ended it
    bool signalled = false;             // the launcher sent it a signal while ending the job
  };

  void say(const std::string& msg) { write_all(STDERR_FILENO, absl::StrCat("[mcx-run] ", msg, "\n")); }
  // The job survives a failed process (--recoverable, or --max-restarts, which implies it).
  bool recoverable() const { return o_.recoverable || o_.max_restarts > 0; }
  // Spawns mcx-coordinator bound to `bind` and waits until it reports the address it serves.
  bool start_coordinator(const std::string& bind);
  // Recoverable jobs: the spawned coordinator died while processes run; start it again on the same address.
  bool restart_coordinator(const ExitStatus& how);
  bool spawn_worker(int id);
  void attach_output(Subprocess& p, const std::string& prefix);
  void on_worker_exit(int id, ExitStatus status);
  // Sends sig (default SIGTERM) to every running process; SIGKILL follows after the grace period.
  void begin_termination(const std::string& why, int sig = SIGTERM);
  void handle_signals();
  void reap();
  bool all_workers_done() const;
  // The coordinator printed "task N ERROR": the order of these reports is the order of the failures.
  void on_coordinator_line(std::string_view line);
  // The root cause is the first task the coordinator reported that failed on its own (before this launcher
  // began ending the job: a process it terminated is never the cause). Makes its exit code the job's result
  // once both the report and its exit are known, whatever order the processes were reaped in.
  void settle_root_cause();

  const LaunchOptions& o_;
  std::vector<int> cpus_;  // --cpu-bind cores: this host's CPUs (mcx-run's own) in core order, shared out
  std::string address_;
  std::unique_ptr<Subprocess> coordinator_;
  bool coordinator_exited_ = false;
  int coordinator_restarts_ = 0;
  std::vector<Worker> workers_;
  std::vector<int> restarts_;
  std::vector<bool> joined_;         // the coordinator reported the process CONNECTED (it registered)
  std::vector<bool> started_again_;  // it died before it joined and was started once more
  OutputPump pump_;
  std::optional<int> result_;  // first failure's exit code
  int interrupted_by_ = 0;     // the first signal forwarded to the workers (0: none)
  bool failed_before_interrupt_ = false;  // result_ was already set when that signal came
  bool every_exit_succeeded_ = true;      // no worker (incarnation) has exited with a non-zero status
  // result_ came from a process that exited because another one failed (fate-sharing exit code); a
  // root-cause failure seen later replaces it.
  bool result_is_fate_shared_ = false;
  std::vector<int> reported_failed_;     // tasks the coordinator reported as ERROR, in report order
  std::vector<std::pair<int, int>> lost_;  // recoverable: (process, exit code) of those the job went on without
  std::optional<int> result_from_task_;  // the worker whose exit gave result_
  bool root_settled_ = false;
  bool terminating_ = false;
  bool killed_ = false;
  Clock::time_point kill_at_;
  std::optional<Clock::time_point> job_deadline_;
  std::optional<Clock::time_point> coordinator_lost_deadline_;
  int interrupts_ = 0;
};

void Job::attach_output(Subprocess& p, const std::string& prefix) {
  if (!o_.prefix_output) return;
  auto sink_for = [prefix](int out) {
    return [prefix, out](std::string_view line) { write_all(out, join_line(prefix, line)); };
  };
  Subprocess* raw = &p;
  int out_fd = p.stdout_fd(), err_fd = p.stderr_fd();
  pump_.add(out_fd, sink_for(STDOUT_FILENO), [raw, out_fd] {
    if (raw->stdout_fd() == out_fd) raw->close_stdout();
  });
  pump_.add(err_fd, sink_for(STDERR_FILENO), [raw, err_fd] {
    if (raw->stderr_fd() == err_fd) raw->close_stderr();
  });
}

bool Job::start_coordinator(const std::string& bind) {
  std::string binary = o_.coordinator_binary.empty() ? find_tool("mcx-coordinator") : o_.coordinator_binary;
  if (binary.empty()) {
    say("cannot find mcx-coordinator beside mcx-run or on PATH; pass --coordinator-binary or --coordinator");
    return false;
  }
  SpawnOptions so;
  so.argv = {binary, "--bind", bind, "--num-processes", absl::StrCat(o_.num_processes)};
  auto add_time = [&](const char* flag, double v) {
    if (v >= 0) {
      so.argv.push_back(flag);
      so.argv.push_back(seconds_str(v));
    }
  };
  // (the heartbeat interval and init timeout are the agents' settings: they go to the workers' env)
  add_time("--heartbeat-timeout", o_.heartbeat_timeout);
  add_time("--shutdown-timeout", o_.shutdown_timeout);
  if (recoverable()) so.argv.push_back("--recoverable");
  if (o_.max_restarts > 0) so.argv.push_back("--expect-restarts");  // barriers wait for a restarted process
  if (!o_.mtls.ca.empty()) {
    std::string cert = o_.coordinator_mtls_cert.empty() ? for_task(o_.mtls.cert, "coordinator") : o_.coordinator_mtls_cert;
    std::string key = o_.coordinator_mtls_key.empty() ? for_task(o_.mtls.key, "coordinator") : o_.coordinator_mtls_key;
    for (const auto& [flag, v] : std::vector<std::pair<std::string, std::string>>{
             {"--mtls-cert", cert}, {"--mtls-key", key}, {"--mtls-ca", o_.mtls.ca},
             {"--mtls-peer-uri-prefix", o_.mtls.peer_uri_prefix}}) {
      if (v.empty()) continue;
      so.argv.push_back(flag);
      so.argv.push_back(v);
    }
    if (o_.mtls.bind_identity) so.argv.push_back("--mtls-bind-identity");
  }
  if (o_.mtls.require) so.argv.push_back("--require-mtls");
  auto spawned = Subprocess::spawn(so);
  if (!spawned.ok()) {
    say(std::string(spawned.status().message()));
    return false;
  }
  coordinator_ = std::move(*spawned);
  // The first stdout line that names the address tells us it is serving; everything is also echoed.
  const std::string marker = "listening on ";
  pump_.add(coordinator_->stdout_fd(),
            [this, marker](std::string_view line) {
              if (address_.empty()) {
                size_t at = line.find(marker);
                if (at != std::string_view::npos) address_ = std::string(line.substr(at + marker.size()));
              }
              if (o_.verbose) write_all(STDERR_FILENO, join_line("[coord] ", line));
            },
            [this] { coordinator_->close_stdout(); });
  pump_.add(coordinator_->stderr_fd(),
            [this](std::string_view line) {
              on_coordinator_line(line);
              write_all(STDERR_FILENO, join_line("[coord] ", line));
            },
            [this] { coordinator_->close_stderr(); });
  Clock::time_point deadline = after(o_.coordinator_start_timeout);
  while (address_.empty()) {
    if (auto s = coordinator_->poll()) {
      say(absl::StrCat("mcx-coordinator exited before serving (", s->to_string(), ")"));
      coordinator_exited_ = true;
      return false;
    }
    if (Clock::now() > deadline) {
      say(absl::StrCat("mcx-coordinator did not report its address within ", o_.coordinator_start_timeout, " s"));
      return false;
    }
    pump_.pump(milliseconds(20));
  }
  if (o_.verbose) say(absl::StrCat("coordinator at ", address_, " (pid ", coordinator_->pid(), ")"));
  return true;
}

bool Job::restart_coordinator(const ExitStatus& how) {
  const std::string address = address_;
  const size_t colon = address.rfind(':');
  say(absl::StrCat("the coordinator exited (", how.to_string(), ") while processes were running; starting it again on ",
                   address, " (restart ", coordinator_restarts_ + 1, " of ", o_.max_coordinator_restarts,
                   "): the processes of this recoverable job rejoin it"));
  ++coordinator_restarts_;
  // The old coordinator's last lines, then stop reading its pipes before they are closed.
  const Clock::time_point flushed = after(0.2);
  while ((coordinator_->stdout_fd() >= 0 || coordinator_->stderr_fd() >= 0) && Clock::now() < flushed) {
    pump_.pump(milliseconds(20));
  }
  if (coordinator_->stdout_fd() >= 0) pump_.drop(coordinator_->stdout_fd());
  if (coordinator_->stderr_fd() >= 0) pump_.drop(coordinator_->stderr_fd());
  coordinator_.reset();
  address_.clear();
  coordinator_exited_ = false;
  if (colon == std::string::npos || !start_coordinator(absl::StrCat(o_.bind_host, address.substr(colon)))) {
    coordinator_exited_ = true;
    address_ = address;
    return false;
  }
  if (address_ != address) {
    say(absl::StrCat("the restarted coordinator serves ", address_, ", not ", address, ": the processes cannot rejoin it"));
    return false;
  }
  return true;
}

bool Job::spawn_worker(int id) {
  Worker& w = workers_[id];
  if (w.proc) {  // a restart: stop reading the old incarnation's pipes before they are closed
    if (w.proc->stdout_fd() >= 0) pump_.drop(w.proc->stdout_fd());
    if (w.proc->stderr_fd() >= 0) pump_.drop(w.proc->stderr_fd());
    w.proc.reset();
  }
  SpawnOptions so;
  so.argv = o_.program;
  so.env = worker_env(o_, address_, id, restarts_[id]);
  so.pipe_stdout = so.pipe_stderr = o_.prefix_output;
  so.cpus = cpus_of_process(o_, cpus_, id);
  if (o_.verbose && !so.cpus.empty()) say(absl::StrCat("process ", id, " runs on CPUs ", absl::StrJoin(so.cpus, ",")));
  auto spawned = Subprocess::spawn(so);
  if (!spawned.ok()) {
    say(absl::StrCat("cannot start process ", id, ": ", spawned.status().message()));
    return false;
  }
  w.proc = std::move(*spawned);
  w.reaped = false;
  w.restart_at.reset();
  if (o_.prefix_output) {
    attach_output(*w.proc, absl::StrCat("[p", id, "] "));
  }
  return true;
}

void Job::begin_termination(const std::string& why, int sig) {
  if (terminating_) return;
  terminating_ = true;
  say(why);
  for (auto& w : workers_) {
    if (w.restart_at) {  // waiting to be restarted: it will not be
      w.restart_at.reset();
      w.done = true;
    }
    if (w.proc && !w.reaped) {
      w.proc->signal(sig);
      w.signalled = true;
    }
  }
  kill_at_ = after(o_.grace_period);
}

void Job::on_coordinator_line(std::string_view line) {
  static const std::regex connected(R"(\[mcx-coordinator\] task (\d+) CONNECTED)");
  static const std::regex re(R"(\[mcx-coordinator\] task (\d+) ERROR)");
  std::match_results<std::string_view::const_iterator> m;
  if (std::regex_search(line.begin(), line.end(), m, connected)) {
    const int task = std::stoi(m[1].str());
    if (task >= 0 && task < o_.num_processes) joined_[task] = true;
    return;
  }
  if (!std::regex_search(line.begin(), line.end(), m, re)) return;
  const int task = std::stoi(m[1].str());
  if (task >= 0 && task < o_.num_processes) reported_failed_.push_back(task);
  settle_root_cause();
}

void Job::settle_root_cause() {
  if (root_settled_ || !result_) return;
  for (int task : reported_failed_) {
    const Worker& w = workers_[task];
    if (!w.failure) {
      if (!w.reaped) return;  // reported, not reaped yet: wait for its exit before deciding
      continue;             // ended by this launcher: not a cause
    }
    root_settled_ = true;
    if (result_from_task_ == task) return;
    result_ = w.failure->exit_code();
    result_from_task_ = task;
    result_is_fate_shared_ = false;
    say(absl::StrCat("process ", task, " failed (", w.failure->to_string(),
                     "): the root cause (the coordinator reported it first)"));
    return;
  }
}

void Job::on_worker_exit(int id, ExitStatus status) {
  Worker& w = workers_[id];
  w.reaped = true;
  if (!status.success()) every_exit_succeeded_ = false;
  // A process that died of the signal this launcher sent it did not fail on its own.
  if (!status.success() && !(w.signalled && status.signaled)) w.failure = status;
  if (status.success()) {
    w.done = true;
    if (o_.verbose) say(absl::StrCat("process ", id, " finished"));
    return;
  }
  if (terminating_) {
    w.done = true;
    if (result_is_fate_shared_ && !status.success() &&
        status.exit_code() != mcx::distributed::kFailureExitCode) {
      result_ = status.exit_code();
      result_from_task_ = id;
      result_is_fate_shared_ = false;
      say(absl::StrCat("process ", id, " failed (", status.to_string(), "): the root cause"));
    }
    settle_root_cause();
    return;
  }
  if (recoverable() && !joined_[id] && o_.coordinator.empty() && !coordinator_exited_ && !started_again_[id]) {
    // It died before it registered: a recoverable job cannot assemble without it (registration waits for every
    // process) and the others have nothing of it to carry on without, so it is started once more, as the same
    // first incarnation (MCX_RESTART_COUNT unchanged).
    started_again_[id] = true;
    w.failure.reset();
    w.signalled = false;
    reported_failed_.erase(std::remove(reported_failed_.begin(), reported_failed_.end(), id), reported_failed_.end());
    say(absl::StrCat("process ", id, " failed (", status.to_string(), ") before it joined the job; starting it again "
                     "(the job cannot assemble without it)"));
    w.restart_at = Clock::now() + milliseconds(100);
    return;
  }
  if (restarts_[id] < o_.max_restarts && !coordinator_exited_) {
    restarts_[id]++;
    w.failure.reset();  // restarted: an earlier failure is no longer the job's root cause
    w.signalled = false;
    reported_failed_.erase(std::remove(reported_failed_.begin(), reported_failed_.end(), id), reported_failed_.end());
    say(absl::StrCat("process ", id, " failed (", status.to_string(), "); restart ", restarts_[id], " of ",
                     o_.max_restarts));
    w.restart_at = Clock::now() + milliseconds(100);
    return;
  }
  if (o_.recoverable && !coordinator_exited_) {
    w.done = true;
    lost_.push_back({id, status.exit_code()});
    say(absl::StrCat("process ", id, " failed (", status.to_string(),
                     "); the others carry on without it (--recoverable)"));
    return;
  }
  w.done = true;
  if (!result_) {
    result_ = status.exit_code();
    result_from_task_ = id;
    result_is_fate_shared_ = status.exit_code() == mcx::distributed::kFailureExitCode;
  }
  begin_termination(absl::StrCat("process ", id, " failed (", status.to_string(), ")",
                                 o_.max_restarts > 0 ? " and has no restarts left" : "",
                                 "; ending the other processes"));
  settle_root_cause();
}

void Job::handle_signals() {
  unsigned char buf[64];
  ssize_t n;
  while ((n = read(g_signal_pipe[0], buf, sizeof(buf))) > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      int sig = buf[i];
      if (sig == SIGCHLD) continue;  // reap() runs every round
      ++interrupts_;
      if (interrupted_by_ == 0) {
        interrupted_by_ = sig;
        failed_before_interrupt_ = result_.has_value();
      }
      if (interrupts_ == 1) {
        begin_termination(absl::StrCat("received ", strsignal(sig), "; forwarding it to every process (SIGKILL after ",
                                       o_.grace_period, " s)"),
                          sig);
      } else {
        say("second interrupt: killing all processes now");
        kill_at_ = Clock::now();
      }
    }
  }
}

void Job::reap() {
  // Collect every exit first and handle root causes before fate-shared exits: failure detection is so
  // fast that the processes told of a failure often exit in the same round as the one that failed.
  std::vector<std::pair<int, ExitStatus>> exited;
  for (int id = 0; id < o_.num_processes; ++id) {
    Worker& w = workers_[id];
    if (!w.proc || w.reaped) continue;
    if (auto s = w.proc->poll()) exited.emplace_back(id, *s);
  }
  std::stable_partition(exited.begin(), exited.end(), [](const auto& e) {
    return e.second.exit_code() != mcx::distributed::kFailureExitCode;
  });
  for (const auto& [id, status] : exited) on_worker_exit(id, status);
  if (coordinator_ && !coordinator_exited_) {
    if (auto s = coordinator_->poll()) {
      coordinator_exited_ = true;
      if (!all_workers_done() && !terminating_ && recoverable() && coordinator_restarts_ < o_.max_coordinator_restarts &&
          restart_coordinator(*s)) {
        return;
      }
      if (!all_workers_done()) {
        say(absl::StrCat("the coordinator exited (", s->to_string(),
                         ") while processes were running; they should fail on their own"));
        // Workers are expected to notice and exit; if they do not, they are ended after the grace period.
        coordinator_lost_deadline_ = after(o_.grace_period + 2);
      }
    }
  }
}

bool Job::all_workers_done() const {
  return std::all_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.done; });
}

int Job::run() {
  install_signal_handlers();
  if (o_.job_timeout > 0) job_deadline_ = after(o_.job_timeout);
  if (!o_.coordinator.empty()) {
    address_ = o_.coordinator;
  } else if (!start_coordinator(absl::StrCat(o_.bind_host, ":", o_.coordinator_port))) {
    if (coordinator_) coordinator_->terminate(milliseconds(1000));
    return 2;
  }
  if (o_.cpu_bind == CpuBind::kCores) {
    cpus_ = cpus_in_core_order(allowed_cpus());
    if (o_.num_processes > static_cast<int>(cpus_.size())) {
      say(absl::StrCat("--cpu-bind cores: ", o_.num_processes, " processes on ", cpus_.size(),
                       " CPUs; processes share CPUs"));
    }
  }
  for (int id = 0; id < o_.num_processes; ++id) {
    if (!spawn_worker(id)) {
      result_ = 2;
      workers_[id].done = workers_[id].reaped = true;
      begin_termination("a process could not be started; ending the others");
      break;
    }
  }
  for (int id = 0; id < o_.num_processes; ++id)
    if (!workers_[id].proc) workers_[id].done = workers_[id].reaped = true;

  std::optional<Clock::time_point> drain_deadline;
  while (true) {
    bool sig_ready = false;
    pump_.pump(milliseconds(50), g_signal_pipe[0], &sig_ready);
    if (sig_ready) handle_signals();
    reap();
    Clock::time_point now = Clock::now();
    for (int id = 0; id < o_.num_processes; ++id) {
      Worker& w = workers_[id];
      if (w.restart_at && now >= *w.restart_at && !terminating_) {
        if (!spawn_worker(id)) {
          w.done = true;
          if (!result_) result_ = 2;
          begin_termination("a restart failed; ending the other processes");
        }
      }
    }
    if (job_deadline_ && now >= *job_deadline_ && !terminating_) {
      if (!result_) result_ = 124;
      begin_termination(absl::StrCat("job timeout of ", o_.job_timeout, " s reached; ending all processes"));
    }
    if (coordinator_lost_deadline_ && now >= *coordinator_lost_deadline_ && !terminating_) {
      if (!result_) result_ = 1;
      begin_termination("processes still running after the coordinator exited; ending them");
    }
    if (terminating_ && !killed_ && now >= kill_at_) {
      killed_ = true;
      bool any = false;
      for (auto& w : workers_) {
        if (w.proc && !w.reaped) {
          w.proc->signal(SIGKILL);
          w.signalled = true;
          any = true;
        }
      }
      if (any) say(absl::StrCat("grace period of ", o_.grace_period, " s over; sent SIGKILL"));
    }
    if (all_workers_done()) {
      // Output of exited processes may still sit in pipes (or be held open by grandchildren): drain it
      // for a bounded time.
      if (!drain_deadline) drain_deadline = now + milliseconds(500);
      bool only_coordinator_left = true;
      for (auto& w : workers_)
        if (w.proc && (w.proc->stdout_fd() >= 0 || w.proc->stderr_fd() >= 0)) only_coordinator_left = false;
      if (only_coordinator_left || now >= *drain_deadline) break;
    }
  }
  for (auto& w : workers_) {
    if (!w.proc) continue;
    if (w.proc->stdout_fd() >= 0) pump_.drop(w.proc->stdout_fd());
    if (w.proc->stderr_fd() >= 0) pump_.drop(w.proc->stderr_fd());
  }
  if (coordinator_ && !coordinator_exited_) {
    ExitStatus cs = coordinator_->terminate(std::chrono::duration_cast<milliseconds>(
        std::chrono::duration<double>(std::max(1.0, o_.grace_period))));
    if (o_.verbose) say(absl::StrCat("coordinator ended (", cs.to_string(), ")"));
  }
  if (coordinator_) {
    // Flush whatever the coordinator printed last (bounded: it has exited).
    Clock::time_point d = Clock::now() + milliseconds(300);
    while (coordinator_->stderr_fd() >= 0 && Clock::now() < d) pump_.pump(milliseconds(20));
  }
  if (interrupted_by_ != 0 && !failed_before_interrupt_) {
    if (!every_exit_succeeded_ || result_) {
      result_ = 128 + interrupted_by_;  // the processes ended because of the forwarded signal
    } else {
      // Every process exited 0 after it (e.g. it saved its state at a preemption sync point): a clean shutdown,
      // which a scheduler should not read as a failure.
      say(absl::StrCat("every process exited 0 after ", strsignal(interrupted_by_), ": a clean shutdown"));
    }
  }
  if (!lost_.empty() && !result_) {
    std::vector<int> ids;
    for (const auto& [id, code] : lost_) ids.push_back(id);
    if (static_cast<int>(lost_.size()) == o_.num_processes) {
      result_ = lost_.front().second;
      say(absl::StrCat("every process failed; exit code ", *result_, " (process ", lost_.front().first, ", the first)"));
    } else {
      say(absl::StrCat("the job finished without processes {", absl::StrJoin(ids, ","), "}, which failed"));
    }
  }
  return result_.value_or(0);
}

}  // namespace

std::vector<int> gpus_of_process(const LaunchOptions& o, int id) {
  std::vector<int> out;
  const int host = o.host_gpus > 0 ? o.host_gpus : o.num_processes * o.gpus_per_process;
  for (int k = 0; k < o.gpus_per_process; ++k) out.push_back((id * o.gpus_per_process + k) % host);
  return out;
}

std::vector<int> cpus_of_process(const LaunchOptions& o, const std::vector<int>& cpus, int id) {
  const int c = static_cast<int>(cpus.size()), n = o.num_processes;
  if (o.cpu_bind == CpuBind::kNone || c == 0 || id < 0 || id >= n) return {};
  if (n > c) return {cpus[static_cast<size_t>(id % c)]};
  const int size = c / n, larger = c % n;  // the first `larger` blocks hold size + 1
  const int begin = id * size + std::min(id, larger);
  const int end = begin + size + (id < larger ? 1 : 0);
  return std::vector<int>(cpus.begin() + begin, cpus.begin() + end);
}

std::map<std::string, std::string> worker_env(const LaunchOptions& o, const std::string& address, int id,
                                              int restart_count) {
  std::map<std::string, std::string> env;
  std::string sid = absl::StrCat(id);
  env[kEnvCoordinatorAddress] = address;
  env[kEnvNumProcesses] = absl::StrCat(o.num_processes);
  env[kEnvProcessId] = sid;
  env[kEnvRestartCount] = absl::StrCat(restart_count);
  env[kEnvStandaloneCoordinator] = "1";  // mcx-run always runs the service apart from process 0
  if (o.cpu_devices > 0) env[kEnvCpuDeviceCount] = absl::StrCat(o.cpu_devices);
  if (o.gpus_per_process > 0) env[kEnvLocalDeviceIds] = absl::StrJoin(gpus_of_process(o, id), ",");
  if (o.heartbeat_interval >= 0) env[kEnvHeartbeatInterval] = seconds_str(o.heartbeat_interval);
  if (o.heartbeat_timeout >= 0) env[kEnvHeartbeatTimeout] = seconds_str(o.heartbeat_timeout);
  if (o.init_timeout >= 0) env[kEnvInitTimeout] = seconds_str(o.init_timeout);
  if (o.shutdown_timeout >= 0) env[kEnvShutdownTimeout] = seconds_str(o.shutdown_timeout);
  if (o.recoverable || o.max_restarts > 0) env[kEnvRecoverable] = "1";
  if (!o.mtls.cert.empty()) env[kEnvMtlsCert] = for_task(o.mtls.cert, sid);
  if (!o.mtls.key.empty()) env[kEnvMtlsKey] = for_task(o.mtls.key, sid);
  if (!o.mtls.ca.empty()) env[kEnvMtlsCa] = o.mtls.ca;
  if (!o.mtls.peer_uri_prefix.empty()) env[kEnvMtlsPeerUriPrefix] = o.mtls.peer_uri_prefix;
  if (o.mtls.bind_identity) env[kEnvMtlsBindIdentity] = "1";
  if (o.mtls.require) env[kEnvRequireMtls] = "1";
  if (!o.profile_dir.empty()) env[kEnvProfileDir] = o.profile_dir;
  return env;
}

int run_job(const LaunchOptions& options) {
  Job job(options);
  return job.run();
}

}  // namespace mcx::tools
