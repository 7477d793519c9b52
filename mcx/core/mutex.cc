#include "mcx/core/mutex.h"


namespace mcx {

void Mutex::lock() { mu_.lock(); }

void Mutex::unlock() {
  // Read under the lock: a thread that starts waiting after this point has seen our writes already.
  const bool wake = waiters_ > 0;
  mu_.unlock();
  if (wake) changed_.notify_all();
}

void Mutex::await(const std::function<bool()>& cond) {
  std::unique_lock<std::mutex> held(mu_, std::adopt_lock);
  ++waiters_;
  while (!cond()) changed_.wait(held);
  --waiters_;
  held.release();  // the caller still holds the mutex
}

bool Mutex::await_until(const std::function<bool()>& cond, absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) {  // no chrono overflow at time_point::max
    await(cond);
    return true;
  }
  std::unique_lock<std::mutex> held(mu_, std::adopt_lock);
  ++waiters_;
  bool ok = cond();
  const auto until = absl::ToChronoTime(deadline);
  while (!ok && std::chrono::system_clock::now() < until) {
    changed_.wait_until(held, until);
    ok = cond();
  }
  --waiters_;
  held.release();
  return ok;
}

void CondVar::wait_for(Mutex* mu, absl::Duration timeout) {
  std::unique_lock<std::mutex> held(mu->mu_, std::adopt_lock);
  // The caller may have changed guarded state before waiting: wake the awaiters as unlock() would.
  if (mu->waiters_ > 0) mu->changed_.notify_all();
  if (timeout > absl::ZeroDuration()) cv_.wait_for(held, absl::ToChronoNanoseconds(timeout));
  held.release();
}

}  // namespace mcx
