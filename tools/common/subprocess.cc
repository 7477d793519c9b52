#include "tools/common/subprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mcx/core/cpu_affinity.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace mcx::tools {
namespace {

constexpr size_t kMaxLine = 64 * 1024;

std::vector<std::string> build_env(const SpawnOptions& options) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    merged[std::string(kv.substr(0, eq))] = std::string(kv.substr(eq + 1));
  }
  for (const auto& name : options.unset_env) merged.erase(name);
  for (const auto& [k, v] : options.env) merged[k] = v;
  std::vector<std::string> out;
  out.reserve(merged.size());
  for (const auto& [k, v] : merged) out.push_back(k + "=" + v);
  return out;
}

}  // namespace

std::string ExitStatus::to_string() const {
  if (signaled) return absl::StrCat("killed by signal ", code, " (", strsignal(code), ")");
  return absl::StrCat("exit code ", code);
}

ExitStatus exit_status_from_wait(int wait_status) {
  ExitStatus s;
  if (WIFSIGNALED(wait_status)) {
    s.signaled = true;
    s.code = WTERMSIG(wait_status);
  } else {
    s.code = WEXITSTATUS(wait_status);
  }
  return s;
}

// In a child between fork and exec: writes "<what><strerror(error)>\n" to stderr and exits 127 (write(2) and
// _exit only: nothing here may allocate or take a lock).
[[noreturn]] static void die_in_child(const std::string& what, int error) {
  ssize_t ignored = write(STDERR_FILENO, what.data(), what.size());
  const char* msg = strerror(error);
  ignored = write(STDERR_FILENO, msg, strlen(msg));
  ignored = write(STDERR_FILENO, "\n", 1);
  (void)ignored;
  _exit(127);
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("[spawn] expected a program, found empty argv");
  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  auto close_pipes = [&] {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]})
      if (fd >= 0) ::close(fd);
  };
  if ((options.pipe_stdout && pipe2(out_pipe, O_CLOEXEC) != 0) ||
      (options.pipe_stderr && pipe2(err_pipe, O_CLOEXEC) != 0)) {
    int e = errno;
    close_pipes();
    return absl::InternalError(absl::StrCat("[spawn] pipe failed: ", strerror(e)));
  }
  // Everything the child needs is prepared before fork: after fork only async-signal-safe calls.
  std::vector<std::string> env = build_env(options);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = options.argv;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string exec_error = absl::StrCat("[spawn] cannot execute '", options.argv[0], "': ");
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (!options.cpus.empty()) {
    absl::StatusOr<cpu_set_t> set = cpu_set_of(options.cpus);
    if (!set.ok()) {
      close_pipes();
      return set.status();
    }
    cpus = *set;
  }
  const std::string bind_error = absl::StrCat("[spawn] cannot bind '", options.argv[0], "' to its CPUs: ");
  pid_t parent = getpid();

  // Signals stay blocked across fork, so that a signal meant for the child cannot run one of our
  // handlers in the child before it has reset them (the handlers write to our self-pipe).
  sigset_t all, old_mask;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  pid_t pid = fork();
  if (pid != 0) pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (pid < 0) {
    int e = errno;
    close_pipes();
    return absl::InternalError(absl::StrCat("[spawn] fork failed: ", strerror(e)));
  }
  if (pid == 0) {
    if (options.new_process_group) setpgid(0, 0);
    if (options.die_with_parent) {  // (the signal mask is still full here)
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
    }
    // Children start with default signal dispositions and an empty mask, whatever the launcher set.
    for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (options.pipe_stdout) dup2(out_pipe[1], STDOUT_FILENO);
    if (options.pipe_stderr) dup2(err_pipe[1], STDERR_FILENO);
    if (!options.cpus.empty() && sched_setaffinity(0, sizeof(cpus), &cpus) != 0) die_in_child(bind_error, errno);
    execvpe(argv[0], argv.data(), envp.data());
    die_in_child(exec_error, errno);
  }
  if (options.new_process_group) setpgid(pid, pid);  // also here, so signals work before the child runs
  auto p = std::unique_ptr<Subprocess>(new Subprocess());
  p->pid_ = pid;
  p->own_group_ = options.new_process_group;
  if (options.pipe_stdout) {
    ::close(out_pipe[1]);
    p->stdout_fd_ = out_pipe[0];
  }
  if (options.pipe_stderr) {
    ::close(err_pipe[1]);
    p->stderr_fd_ = err_pipe[0];
  }
  return p;
}

Subprocess::~Subprocess() {
  if (!status_) {
    signal(SIGKILL);
    wait_until(Clock::now() + std::chrono::seconds(5));
  }
  close_stdout();
  close_stderr();
}

void Subprocess::close_stdout() {
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
  stdout_fd_ = -1;
}

void Subprocess::close_stderr() {
  if (stderr_fd_ >= 0) ::close(stderr_fd_);
  stderr_fd_ = -1;
}

void Subprocess::signal(int sig) {
  if (status_ || pid_ <= 0) return;
  if (own_group_ && ::kill(-pid_, sig) == 0) return;
  ::kill(pid_, sig);
}

std::optional<ExitStatus> Subprocess::poll() {
  if (status_) return status_;
  int ws = 0;
  pid_t r = waitpid(pid_, &ws, WNOHANG);
  if (r == pid_) status_ = exit_status_from_wait(ws);
  if (r < 0 && errno == ECHILD) status_ = ExitStatus{false, 255};  // reaped by someone else
  if (status_ && own_group_) ::kill(-pid_, SIGKILL);  // leftover grandchildren die with their leader
  return status_;
}

std::optional<ExitStatus> Subprocess::wait_until(Clock::time_point deadline) {
  while (true) {
    if (auto s = poll()) return s;
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

ExitStatus Subprocess::terminate(std::chrono::milliseconds grace) {
  if (auto s = poll()) return *s;
  signal(SIGTERM);
  if (auto s = wait_until(Clock::now() + grace)) return *s;
  signal(SIGKILL);
  if (auto s = wait_until(Clock::now() + std::chrono::seconds(10))) return *s;
  return ExitStatus{true, SIGKILL};  // unreapable (D state); reported as killed
}

void OutputPump::add(int fd, LineSink sink, std::function<void()> on_eof) {
  if (fd < 0) return;
  streams_.push_back(Stream{fd, std::move(sink), std::move(on_eof), {}});
}

void OutputPump::finish(size_t index) {
  Stream s = std::move(streams_[index]);
  streams_.erase(streams_.begin() + index);
  if (!s.partial.empty()) s.sink(s.partial);
  if (s.on_eof) s.on_eof();
}

void OutputPump::drop(int fd) {
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (streams_[i].fd == fd) {
      finish(i);
      return;
    }
  }
}

void OutputPump::pump(std::chrono::milliseconds timeout, int extra_fd, bool* extra_ready) {
  std::vector<pollfd> fds;
  fds.reserve(streams_.size() + 1);
  for (const auto& s : streams_) fds.push_back(pollfd{s.fd, POLLIN, 0});
  if (extra_fd >= 0) fds.push_back(pollfd{extra_fd, POLLIN, 0});
  if (extra_ready) *extra_ready = false;
  if (fds.empty()) {
    std::this_thread::sleep_for(timeout);
    return;
  }
  int n = ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
  if (n <= 0) return;
  if (extra_fd >= 0 && extra_ready) *extra_ready = (fds.back().revents & (POLLIN | POLLHUP)) != 0;
  // Walk backwards so that finishing a stream (erasing it) does not shift the ones still to visit.
  char buf[64 * 1024];
  for (size_t i = streams_.size(); i-- > 0;) {
    if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    ssize_t r = ::read(streams_[i].fd, buf, sizeof(buf));
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) {
      finish(i);
      continue;
    }
    Stream& s = streams_[i];
    s.partial.append(buf, static_cast<size_t>(r));
    size_t start = 0;
    while (true) {
      size_t nl = s.partial.find('\n', start);
      if (nl == std::string::npos) break;
      s.sink(std::string_view(s.partial).substr(start, nl - start));
      start = nl + 1;
    }
    s.partial.erase(0, start);
    while (s.partial.size() > kMaxLine) {
      s.sink(std::string_view(s.partial).substr(0, kMaxLine));
      s.partial.erase(0, kMaxLine);
    }
  }
}

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t w = ::write(fd, data.data(), data.size());
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data.remove_prefix(static_cast<size_t>(w));
  }
}

std::string self_exe_dir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string find_tool(const std::string& name) {
  auto executable = [](const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
  };
  std::string dir = self_exe_dir();
  for (const std::string& candidate : {dir + "/" + name, dir + "/../" + name + "/" + name}) {
    if (executable(candidate)) return candidate;
  }
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (absl::string_view d : absl::StrSplit(path, ':')) {
    if (d.empty()) continue;
    std::string candidate = absl::StrCat(d, "/", name);
    if (executable(candidate)) return candidate;
  }
  return "";
}

}  // namespace mcx::tools
