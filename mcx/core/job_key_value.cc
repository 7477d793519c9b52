#include "mcx/core/job_key_value.h"

#include <mutex>

namespace mcx {
namespace {

std::mutex& registry_mutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}
std::shared_ptr<JobKeyValue>& registry_slot() {
  static auto* slot = new std::shared_ptr<JobKeyValue>;
  return *slot;
}

}  // namespace

void set_job_key_value(std::shared_ptr<JobKeyValue> store) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry_slot() = std::move(store);
}

std::shared_ptr<JobKeyValue> job_key_value() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  return registry_slot();
}

}  // namespace mcx
