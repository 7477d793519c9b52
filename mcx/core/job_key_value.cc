#include "mcx/core/job_key_value.h"

#include <charconv>
#include <mutex>

#include "absl/strings/str_cat.h"

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

constexpr std::string_view kTaskKeyPrefix = "mcx/task/";

}  // namespace

std::string task_key(int process, std::string_view suffix) {
  return absl::StrCat(std::string(kTaskKeyPrefix), process, "/", std::string(suffix));
}

std::optional<int> task_of_key(std::string_view key) {
  if (!key.starts_with(kTaskKeyPrefix)) return std::nullopt;
  key.remove_prefix(kTaskKeyPrefix.size());
  const std::string_view id = key.substr(0, key.find('/'));
  int process = -1;
  auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), process);
  if (id.empty() || ec != std::errc() || end != id.data() + id.size() || process < 0) return std::nullopt;
  return process;
}

void set_job_key_value(std::shared_ptr<JobKeyValue> store) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry_slot() = std::move(store);
}

std::shared_ptr<JobKeyValue> job_key_value() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  return registry_slot();
}

}  // namespace mcx
