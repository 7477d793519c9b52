#include "mcx/platform/platform_registry.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "mcx/core/config.h"
#include "mcx/core/mutex.h"

namespace mcx {
namespace {

const Flag<std::string> kPlatformsFlag(
    "MCX_PLATFORMS", "",
    "the platforms this process uses, in order of preference, comma-separated (e.g. 'cuda,cpu'); empty: every "
    "usable platform, a GPU before the CPU");

struct Entry {
  int priority = 0;
  PlatformFactory factory;
  bool created = false;
  absl::StatusOr<std::unique_ptr<Platform>> platform = absl::UnknownError("not created");
};

struct Registry {
  Mutex mu;
  std::map<std::string, Entry, std::less<>> entries ABSL_GUARDED_BY(mu);
};

Registry& registry() {
  static auto* r = new Registry();  // never destroyed: platforms outlive static destruction
  return *r;
}

bool valid_name(std::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

std::vector<std::string> names_by_priority_locked(const Registry& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r.mu) {
  std::vector<std::pair<int, std::string>> order;
  for (const auto& [name, e] : r.entries) order.emplace_back(-e.priority, name);
  std::sort(order.begin(), order.end());
  std::vector<std::string> names;
  for (auto& [p, name] : order) names.push_back(std::move(name));
  return names;
}

std::string registered_list_locked(const Registry& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r.mu) {
  std::vector<std::string> names = names_by_priority_locked(r);
  return names.empty() ? std::string("none") : absl::StrJoin(names, ", ");
}

}  // namespace

absl::Status register_platform(std::string name, int priority, PlatformFactory factory) {
  if (!valid_name(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[platform] expected a platform name of lower-case letters, digits and '_', got '", name, "'"));
  }
  Registry& r = registry();
  MutexLock lock(&r.mu);
  Entry& e = r.entries[name];
  if (e.created) {
    return absl::FailedPreconditionError(
        absl::StrCat("[platform] '", name, "' is in use already; register a platform before its first use"));
  }
  e.priority = priority;
  e.factory = std::move(factory);
  return absl::OkStatus();
}

std::vector<std::string> registered_platforms() {
  Registry& r = registry();
  MutexLock lock(&r.mu);
  return names_by_priority_locked(r);
}

absl::StatusOr<Platform*> find_platform(std::string_view name) {
  Registry& r = registry();
  MutexLock lock(&r.mu);
  auto it = r.entries.find(name);
  if (it == r.entries.end()) {
    return absl::NotFoundError(absl::StrCat("[platform] no platform '", std::string(name),
                                            "' in this build (registered: ", registered_list_locked(r), ")"));
  }
  Entry& e = it->second;
  if (!e.created) {
    // Created under the lock: a factory is cheap (it finds a driver, it does not compile) and runs once.
    e.platform = e.factory();
    e.created = true;
  }
  if (!e.platform.ok()) return e.platform.status();
  return e.platform->get();
}

absl::StatusOr<std::vector<Platform*>> select_platforms(std::string_view list) {
  const absl::string_view text(list.data(), list.size());
  std::vector<Platform*> selected;
  if (absl::StripAsciiWhitespace(text).empty()) {
    for (const std::string& name : registered_platforms()) {
      absl::StatusOr<Platform*> p = find_platform(name);
      if (p.ok() && (*p)->usable().ok()) selected.push_back(*p);
    }
    if (selected.empty()) return absl::NotFoundError("[platform] no usable platform is registered");
    return selected;
  }
  std::vector<std::string> seen;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const std::string name(absl::StripAsciiWhitespace(part));
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("[platform] MCX_PLATFORMS='", std::string(list), "': expected platform names separated by commas, "
                       "found an empty name"));
    }
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("[platform] MCX_PLATFORMS='", std::string(list), "' names '", name, "' twice"));
    }
    seen.push_back(name);
    absl::StatusOr<Platform*> p = find_platform(name);
    absl::Status st = p.ok() ? (*p)->usable() : p.status();
    if (!st.ok()) {
      return absl::Status(st.code() == absl::StatusCode::kNotFound ? absl::StatusCode::kInvalidArgument : st.code(),
                          absl::StrCat("MCX_PLATFORMS='", std::string(list), "': ", st.message()));
    }
    selected.push_back(*p);
  }
  return selected;
}

absl::StatusOr<std::vector<Platform*>> selected_platforms() {
  absl::StatusOr<std::string> list = kPlatformsFlag.get();
  if (!list.ok()) return list.status();
  return select_platforms(*list);
}

}  // namespace mcx
