// ServiceLock: the coordination service's mutex held together with the callbacks to run once it is released.
//
// The service answers blocking calls through callbacks, which may call back into it: they never run with its
// mutex held. Code that decides an answer under the lock defers the callback (defer) on the lock it holds;
// the destructor releases the mutex first and then runs every deferred callback, in order. One object owns both,
// so no declaration order can run a callback under the mutex.
//
// Thread-safety: used by the one thread that holds the lock.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "mcx/core/mutex.h"

namespace mcx::distributed {

class ABSL_SCOPED_LOCKABLE ServiceLock {
 public:
  explicit ServiceLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->lock(); }
  ~ServiceLock() ABSL_UNLOCK_FUNCTION() {
    mu_->unlock();
    for (std::function<void()>& f : deferred_) f();
  }
  ServiceLock(const ServiceLock&) = delete;
  ServiceLock& operator=(const ServiceLock&) = delete;

  // Runs f after the mutex is released (when this object is destroyed).
  void defer(std::function<void()> f) { deferred_.push_back(std::move(f)); }

 private:
  Mutex* mu_;
  std::vector<std::function<void()>> deferred_;
};

}  // namespace mcx::distributed
