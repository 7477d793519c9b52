// Thread guard (jax.thread_guard): in multi-controller programs, every process must issue its
// process-spanning computations in the same order; issuing them from several threads makes the order
// nondeterministic and leads to mismatched collectives (hangs or wrong results). While a ThreadGuard is
// held, only the thread that opened it may run an executable that spans processes; any other thread
// doing so gets mcx::ThreadGuardError naming both threads.
//
// Rules: guards nest in the owning thread (the outermost one releases ownership); opening a guard in a
// second thread while one is held is a ThreadGuardError naming the owner. Single-process executables are
// never checked. With MCX_THREAD_GUARD=1 the guard holds for the whole process: the first thread that issues a
// process-spanning computation (or opens a guard) owns it until the process ends, so every other thread doing
// either gets the error; guards opened in the owning thread nest as usual. (A bad value of the variable is
// InvalidArgument, thrown, at the first check.) Executables report whether they span processes (check_thread_guard's argument); tests
// mark one as spanning to exercise the check in one process.
//
// Thread-safety: all functions are thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "mcx/core/error.h"

namespace mcx {

class ThreadGuardError : public FailedPrecondition {
 public:
  using FailedPrecondition::FailedPrecondition;
};

class ThreadGuard {
 public:
  ThreadGuard();   // throws ThreadGuardError when another thread holds a guard
  ~ThreadGuard();
  ThreadGuard(const ThreadGuard&) = delete;
  ThreadGuard& operator=(const ThreadGuard&) = delete;
};

// Whether a guard is held (by any thread).
bool thread_guard_active();
// Throws ThreadGuardError if spans_processes and a guard is held by a thread other than the caller.
// `what` names the computation ("jit of 'step'").
void check_thread_guard(bool spans_processes, std::string_view what);

// A readable name for the calling thread, for error messages: "thread 0x7f... (tid 1234, 'cpu:3')"
// (pthread handle, kernel thread id, and the thread's name when it has one).
std::string current_thread_description();

}  // namespace mcx
