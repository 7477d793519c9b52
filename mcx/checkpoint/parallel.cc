#include "mcx/checkpoint/parallel.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mcx/core/cpu_affinity.h"
#include "mcx/core/mutex.h"

namespace mcx::checkpoint {

int io_threads(int requested) {
  if (requested > 0) return requested;
  return std::clamp(allowed_cpu_count(), 1, 8);
}

absl::Status parallel_for_status(int64_t n, int threads, const std::function<absl::Status(int64_t)>& fn) {
  if (n <= 0) return absl::OkStatus();
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  Mutex mu;
  int64_t first_failed = n;   // guarded by mu
  absl::Status first_error;   // guarded by mu
  auto work = [&] {
    for (int64_t i; !failed.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < n;) {
      absl::Status s = fn(i);
      if (s.ok()) continue;
      failed.store(true, std::memory_order_relaxed);
      MutexLock lock(&mu);
      if (i < first_failed) {
        first_failed = i;
        first_error = std::move(s);
      }
    }
  };
  const int64_t extra = std::min<int64_t>(std::max(threads, 1), n) - 1;
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(extra));
  for (int64_t t = 0; t < extra; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  MutexLock lock(&mu);
  return first_error;
}

absl::Status make_this_thread_idle_priority() {
#ifdef SCHED_IDLE
  sched_param p{};
  p.sched_priority = 0;
  const int rc = ::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &p);
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("[checkpoint] cannot lower the background writer to SCHED_IDLE: ", std::strerror(rc)));
  }
#endif
  return absl::OkStatus();
}

}  // namespace mcx::checkpoint
