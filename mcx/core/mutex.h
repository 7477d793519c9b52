// mcx::Mutex: the mutex for mcx's own shared state, built on std::mutex and std::condition_variable so that
// ThreadSanitizer sees every acquire and release (Debian's abseil is not built with TSan, so Mutex's
// synchronisation is invisible to it and every Mutex-guarded field looks racy; see docs/architecture.md,
// "Threads").
//
// It keeps the two things the distributed layer relied on in Mutex:
//  - Clang thread-safety annotations (ABSL_GUARDED_BY(mu_), ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_)) work on it.
//  - Conditional waits: await(cond) blocks until cond() holds, re-checking it whenever any thread releases
//    the mutex, so a waiter needs no separate condition variable or explicit notify from the writer.
//    The price is one notify_all on unlock while someone waits; mcx's waits are few (RPC completions,
//    stop flags), so that is cheap.
//
// CondVar is the explicit form for the rare loop that wants to be woken by a signal or a timeout (a timer).
//
// Thread-safety: all members may be called from any thread. await/wait must be called with the mutex held
// by the caller; they release it while blocked and hold it again on return. Not recursive.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace mcx {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION();
  // Releases the mutex and wakes the threads blocked in await() so they re-check their conditions.
  void unlock() ABSL_UNLOCK_FUNCTION();

  // Blocks until cond() is true. cond runs with the mutex held.
  void await(const std::function<bool()>& cond) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this);
  // As await(), giving up at the deadline; returns cond() (false: timed out with the condition false).
  bool await_until(const std::function<bool()>& cond, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this);
  bool await_for(const std::function<bool()>& cond, absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    return await_until(cond, absl::Now() + timeout);
  }

 private:
  friend class CondVar;
  std::mutex mu_;
  std::condition_variable changed_;  // notified on unlock while waiters_ > 0
  int waiters_ = 0;                  // guarded by mu_
};

// Scoped lock (as std::lock_guard, with the annotations Clang's analysis needs).
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

// A condition variable used with a held mcx::Mutex.
class CondVar {
 public:
  // Releases mu, blocks until signalled or until timeout has passed (spurious wake-ups are possible, as with
  // any condition variable: callers re-check their state), then holds mu again.
  void wait_for(Mutex* mu, absl::Duration timeout);
  void signal() { cv_.notify_one(); }
  void signal_all() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace mcx
