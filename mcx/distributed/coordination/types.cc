#include "mcx/distributed/coordination/types.h"

#include <random>
#include <thread>

namespace mcx::distributed {

Incarnation random_incarnation() {
  static thread_local std::mt19937_64 gen([] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
           static_cast<uint64_t>(std::hash<std::thread::id>()(std::this_thread::get_id()));
  }());
  Incarnation v = 0;
  while (v == 0) v = gen();
  return v;
}

SystemClock* SystemClock::get() {
  static SystemClock* c = new SystemClock();
  return c;
}

absl::Time ManualClock::now() const {
  MutexLock lock(&mu_);
  return now_;
}

void ManualClock::advance(absl::Duration d) {
  MutexLock lock(&mu_);
  now_ += d;
}

std::string_view task_state_name(TaskState s) {
  switch (s) {
    case TaskState::kDisconnected: return "DISCONNECTED";
    case TaskState::kConnected: return "CONNECTED";
    case TaskState::kError: return "ERROR";
    case TaskState::kShutdown: return "SHUTDOWN";
  }
  return "?";
}

}  // namespace mcx::distributed
