#include "mcx/distributed/coordination/preemption_notifier.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mcx/core/process_exit.h"

namespace mcx::distributed {
namespace {

static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs lock-free atomics");

constexpr char kSignalByte = 't';  // written by the handler
constexpr char kStopByte = 'q';    // written by uninstall

// Read by the handler: plain lock-free atomics only.
std::atomic<int> g_sigterms{0};
std::atomic<int> g_write_fd{-1};

void on_sigterm(int) {
  const int saved_errno = errno;
  if (g_sigterms.fetch_add(1) == 0) {
    const int fd = g_write_fd.load();
    if (fd >= 0) {
      const char b = kSignalByte;
      ssize_t ignored = write(fd, &b, 1);  // non-blocking; a full pipe already holds a wake-up
      (void)ignored;
    }
  } else {
    // The second one: the program did not end in time; let SIGTERM end it. SIGTERM is blocked while this
    // handler runs, so the raised signal is delivered, with the default action, when the handler returns.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGTERM, &dfl, nullptr);
    raise(SIGTERM);
  }
  errno = saved_errno;
}

struct Notifier {
  std::mutex mu;
  bool installed = false;              // guarded by mu
  int fds[2] = {-1, -1};               // created once, never closed (a late handler may still write)
  struct sigaction previous {};        // guarded by mu
  std::thread thread;                  // guarded by mu
  bool exit_step_registered = false;   // guarded by mu
};

Notifier& notifier() {
  static Notifier* n = new Notifier();  // never destroyed: the exit step and the handler use it
  return *n;
}

void drain(int fd) {
  char buf[64];
  while (read(fd, buf, sizeof(buf)) > 0) {
  }
}

// Waits for the handler's byte (then runs the callback once) or the stop byte. The wait has no deadline of
// its own: it ends with a signal or with uninstall, which writes the stop byte.
void notifier_loop(int fd, std::function<void()> on_sigterm_cb) {
  bool called = false;
  while (true) {
    struct pollfd p {fd, POLLIN, 0};
    const int r = poll(&p, 1, -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return;  // cannot happen with a valid fd; nothing to wait for then
    char buf[64];
    const ssize_t n = read(fd, buf, sizeof(buf));
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == kStopByte) return;
      if (buf[i] == kSignalByte && !called) {
        called = true;
        on_sigterm_cb();
      }
    }
  }
}

}  // namespace

absl::Status install_sigterm_notifier(std::function<void()> on_sigterm_cb) {
  Notifier& n = notifier();
  std::lock_guard<std::mutex> lock(n.mu);
  if (n.installed) return absl::OkStatus();
  if (n.fds[0] < 0 && pipe2(n.fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(
        absl::StrCat("[preemption] cannot create the SIGTERM notifier's pipe: ", std::strerror(errno)));
  }
  struct sigaction current {};
  if (sigaction(SIGTERM, nullptr, &current) != 0) {
    return absl::InternalError(absl::StrCat("[preemption] cannot read SIGTERM's action: ", std::strerror(errno)));
  }
  const bool foreign = (current.sa_flags & SA_SIGINFO) ? current.sa_sigaction != nullptr
                                                       : current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN;
  if (foreign) {
    return absl::FailedPreconditionError(
        "[preemption] expected SIGTERM to have its default action, found a handler the program installed; it is "
        "left in place, so SIGTERM is not a preemption notice (call mcx::multihost::notify_preemption() instead)");
  }
  drain(n.fds[0]);
  g_sigterms.store(0);
  g_write_fd.store(n.fds[1]);
  try {
    n.thread = std::thread(notifier_loop, n.fds[0], std::move(on_sigterm_cb));
  } catch (const std::system_error& e) {
    return absl::InternalError(absl::StrCat("[preemption] cannot start the SIGTERM notifier thread: ", e.what()));
  }
  struct sigaction sa {};
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // other threads' system calls resume instead of failing with EINTR
  if (sigaction(SIGTERM, &sa, &n.previous) != 0) {
    const int err = errno;
    const char stop = kStopByte;
    ssize_t ignored = write(n.fds[1], &stop, 1);
    (void)ignored;
    n.thread.join();
    return absl::InternalError(absl::StrCat("[preemption] cannot install the SIGTERM handler: ", std::strerror(err)));
  }
  n.installed = true;
  if (!n.exit_step_registered) {
    n.exit_step_registered = true;
    // A program that exits without uninstalling: join the thread before static destructors run.
    run_at_exit(ExitStage::kDataPlane, uninstall_sigterm_notifier);
  }
  return absl::OkStatus();
}

void uninstall_sigterm_notifier() {
  Notifier& n = notifier();
  std::lock_guard<std::mutex> lock(n.mu);
  if (!n.installed) return;
  sigaction(SIGTERM, &n.previous, nullptr);
  const char stop = kStopByte;
  ssize_t ignored = write(n.fds[1], &stop, 1);
  (void)ignored;
  n.thread.join();
  n.installed = false;
}

bool sigterm_notifier_installed() {
  Notifier& n = notifier();
  std::lock_guard<std::mutex> lock(n.mu);
  return n.installed;
}

bool sigterm_received() { return g_sigterms.load() > 0; }

}  // namespace mcx::distributed
