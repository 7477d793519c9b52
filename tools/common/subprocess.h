// Child processes for the mcx tools and the multi-process tests: spawn with extra environment and piped
// output, read their output line by line through poll(2), signal them, reap them with deadlines.
//
// Not thread-safe: one thread owns a Subprocess / OutputPump (the launcher's event loop, a test body).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mcx::tools {

using Clock = std::chrono::steady_clock;

struct SpawnOptions {
  std::vector<std::string> argv;                 // argv[0] is looked up on PATH if it has no '/'
  std::map<std::string, std::string> env;        // added to (or replacing in) this process's environment
  std::vector<std::string> unset_env;            // removed from the child's environment
  bool pipe_stdout = true;                       // else the child inherits our stdout
  bool pipe_stderr = true;                       // else the child inherits our stderr
  bool new_process_group = true;                 // the child leads its own group; signals go to the group
  bool die_with_parent = true;                   // PR_SET_PDEATHSIG(SIGKILL): no orphans if we are killed
  std::vector<int> cpus;                         // bind the child to these CPUs (sched_setaffinity); empty: inherit
};

// How a child ended. exit_code() folds a signal into 128+signal, as shells do.
struct ExitStatus {
  bool signaled = false;
  int code = 0;  // exit status, or the signal number when signaled
  int exit_code() const { return signaled ? 128 + code : code; }
  bool success() const { return !signaled && code == 0; }
  std::string to_string() const;
};

ExitStatus exit_status_from_wait(int wait_status);

// One spawned child. The destructor kills (SIGKILL) and reaps a child still running, so a failing test
// never leaves processes behind.
class Subprocess {
 public:
  // Errors: InvalidArgument for empty argv or a CPU out of range; Internal when pipe/fork fails. A failed exec, or a
  // failed binding to `cpus` (none of them allowed here), shows as exit 127 with a message on the child's stderr.
  static absl::StatusOr<std::unique_ptr<Subprocess>> spawn(const SpawnOptions& options);
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // Read ends of the pipes (-1 when not piped or already closed). Owned here; OutputPump reads them.
  int stdout_fd() const { return stdout_fd_; }
  int stderr_fd() const { return stderr_fd_; }
  void close_stdout();
  void close_stderr();

  // Sends sig to the child's process group (or the child when it has none). No-op once reaped.
  void signal(int sig);
  // Non-blocking reap; returns the status once the child has exited (also on later calls).
  std::optional<ExitStatus> poll();
  // Records a status reaped elsewhere (waitpid(-1)); used by event loops that reap all children at once.
  void set_exited(ExitStatus status) { status_ = status; }
  std::optional<ExitStatus> status() const { return status_; }
  // Waits until the child exits or the deadline passes (returns nullopt then). Polls every few ms.
  std::optional<ExitStatus> wait_until(Clock::time_point deadline);
  // SIGTERM, wait up to grace, then SIGKILL and reap. Always returns a status.
  ExitStatus terminate(std::chrono::milliseconds grace);

 private:
  Subprocess() = default;
  pid_t pid_ = -1;
  bool own_group_ = false;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
  std::optional<ExitStatus> status_;
};

// Reads lines from many fds with poll(2) and hands each complete line (without '\n') to its sink.
// A partial last line is delivered at EOF. Lines longer than 64 KiB are split.
class OutputPump {
 public:
  using LineSink = std::function<void(std::string_view line)>;
  // Registers fd (not owned; the caller closes it after on_eof). on_eof runs once, after the last line.
  void add(int fd, LineSink sink, std::function<void()> on_eof = nullptr);
  bool empty() const { return streams_.empty(); }
  // Waits up to timeout for input on the fds (and extra_fd if >= 0; its readiness is returned in
  // *extra_ready), reads what is available and dispatches lines. Returns after one poll round.
  void pump(std::chrono::milliseconds timeout, int extra_fd = -1, bool* extra_ready = nullptr);
  // Stops reading fd now (delivering any partial line) and runs its on_eof.
  void drop(int fd);

 private:
  struct Stream {
    int fd;
    LineSink sink;
    std::function<void()> on_eof;
    std::string partial;
  };
  void finish(size_t index);
  std::vector<Stream> streams_;
};

// Writes all of data to fd, retrying on EINTR/partial writes. Errors are ignored (a closed terminal must
// not kill the launcher).
void write_all(int fd, std::string_view data);

// Directory that holds the running executable (from /proc/self/exe).
std::string self_exe_dir();

// Returns path of a sibling tool: same directory as this executable first, then PATH. Empty if not found.
std::string find_tool(const std::string& name);

}  // namespace mcx::tools
