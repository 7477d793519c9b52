// SIGTERM as a preemption notice (TSL's SigtermNotifier, with a self-pipe instead of polling).
//
// Schedulers announce preemption with SIGTERM and follow it with SIGKILL after a grace period (Kubernetes,
// Slurm, spot VMs; mcx-run forwards its own SIGTERM to every process). Once installed, the first SIGTERM no
// longer ends the process: the handler (async-signal-safe: an atomic counter and one write(2) to a
// self-pipe) wakes the notifier thread, which runs the callback given to install. A second SIGTERM restores
// the default action and re-raises it, so a program stuck before its sync point can still be ended.
//
// The handler is installed only when the program opts in (mcx/multihost/preemption.h); a program that set
// its own SIGTERM handler keeps it (install returns FailedPrecondition naming the reason and changes
// nothing), since taking over another handler's signal would silently break it.
//
// Threads: install starts one thread that blocks reading the self-pipe; uninstall (also registered as an
// exit step, core/process_exit.h) wakes it through the same pipe, joins it and restores the disposition
// SIGTERM had before install. The callback runs on that thread, once per installation (the first SIGTERM);
// it may block (publishing a notice is an RPC with a deadline) but must not call uninstall.
// Thread-safety: install, uninstall and sigterm_received may be called from any thread.
#pragma once

#include <functional>

#include "absl/status/status.h"

namespace mcx::distributed {

// Installs the handler and starts the notifier thread. `on_sigterm` runs on that thread after the first
// SIGTERM. Calling it while installed is OK and changes nothing (the first callback stays). Errors:
// FailedPrecondition when SIGTERM already has a handler other than the default or "ignore"; Internal when
// the pipe, the thread or sigaction cannot be set up (with strerror).
absl::Status install_sigterm_notifier(std::function<void()> on_sigterm);

// Stops and joins the notifier thread and restores SIGTERM's previous disposition. No-op when not
// installed. A SIGTERM that arrives after this takes the restored action.
void uninstall_sigterm_notifier();

bool sigterm_notifier_installed();

// Whether the installed handler has received a SIGTERM (since the latest install).
bool sigterm_received();

}  // namespace mcx::distributed
