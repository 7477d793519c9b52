#include "mcx/cache/cache_key.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace mcx::cache {
namespace {

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

std::string short_hex(const Sha256Digest& d) { return to_hex(d).substr(0, 12); }

}  // namespace

absl::Status CacheKey::add(std::string name, std::string_view bytes) { return add_digest(std::move(name), sha256(bytes)); }

absl::Status CacheKey::add_digest(std::string name, const Sha256Digest& digest) {
  if (!valid_name(name)) {
    return absl::InvalidArgumentError(absl::StrCat("[cache] key component name: expected 1-64 characters of [a-z0-9_], found '", name, "'"));
  }
  for (const CacheKeyComponent& c : components_) {
    if (c.name == name) return absl::InvalidArgumentError(absl::StrCat("[cache] key component '", name, "' added twice"));
  }
  components_.push_back({std::move(name), digest});
  return absl::OkStatus();
}

std::string_view kind_name(const std::vector<CacheKeyComponent>& components) {
  for (const CacheKeyComponent& c : components) {
    if (c.name != "kind") continue;
    for (std::string_view kind : {kKindFusedKernel, kKindExecutable, kKindSpmdExecutable})
      if (sha256(kind) == c.digest) return kind;
  }
  return "unknown";
}

Sha256Digest CacheKey::digest() const {
  Sha256 h;
  h.update(std::string_view("mcx-cache-key-v1"));
  for (const CacheKeyComponent& c : components_) {
    h.update_u64(c.name.size());
    h.update(c.name);
    h.update(std::span<const uint8_t>(c.digest.data(), c.digest.size()));
  }
  return h.digest();
}

std::string CacheKey::hex() const { return to_hex(digest()); }

std::vector<std::string> explain_difference(const std::vector<CacheKeyComponent>& wanted,
                                            const std::vector<CacheKeyComponent>& other) {
  std::vector<std::string> lines;
  auto find = [](const std::vector<CacheKeyComponent>& list, const std::string& name) -> const CacheKeyComponent* {
    for (const CacheKeyComponent& c : list) {
      if (c.name == name) return &c;
    }
    return nullptr;
  };
  for (const CacheKeyComponent& w : wanted) {
    const CacheKeyComponent* o = find(other, w.name);
    if (o == nullptr) {
      lines.push_back(absl::StrCat(w.name, ": not in the entry"));
    } else if (o->digest != w.digest) {
      lines.push_back(absl::StrCat(w.name, ": ", short_hex(w.digest), " (wanted) vs ", short_hex(o->digest), " (entry)"));
    }
  }
  for (const CacheKeyComponent& o : other) {
    if (find(wanted, o.name) == nullptr) lines.push_back(absl::StrCat(o.name, ": only in the entry"));
  }
  return lines;
}

}  // namespace mcx::cache
