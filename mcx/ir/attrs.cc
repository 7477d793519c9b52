#include "mcx/ir/attrs.h"

#include <algorithm>
#include <type_traits>

#include "absl/status/status.h"
#include "mcx/ir/program.h"
#include "mcx/ir/str_util.h"

namespace mcx::ir {
using internal::cat;
using internal::join;
namespace {

const char* attr_kind_name(size_t index) {
  static const char* kNames[] = {"int", "ints", "dims", "dtype", "buffer", "regions"};
  return index < 6 ? kNames[index] : "?";
}

template <typename T>
absl::StatusOr<T> get_as(const Attrs& attrs, std::string_view name, size_t index) {
  const Attr* a = attrs.find(name);
  if (a == nullptr)
    return absl::InvalidArgumentError(
        cat("[attrs] missing attribute '", name, "' (expected ", attr_kind_name(index), ")"));
  if (const T* v = std::get_if<T>(a)) return *v;
  return absl::InvalidArgumentError(cat("[attrs] attribute '", name, "' expected ",
                                                 attr_kind_name(index), ", found ",
                                                 attr_kind_name(a->index())));
}

bool attr_equal(const Attr& a, const Attr& b) {
  if (a.index() != b.index()) return false;
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        const T& y = std::get<T>(b);
        if constexpr (std::is_same_v<T, Buffer>) {
          return x.bitwise_equal(y);
        } else if constexpr (std::is_same_v<T, Regions>) {
          if (x.size() != y.size()) return false;
          for (size_t i = 0; i < x.size(); ++i)
            if (x[i] != y[i] && !structurally_equal(*x[i], *y[i])) return false;
          return true;
        } else {
          return x == y;
        }
      },
      a);
}

}  // namespace

Attrs::Attrs(std::initializer_list<std::pair<std::string, Attr>> entries) {
  for (const auto& [name, value] : entries) set(name, value);
}

Attrs& Attrs::set(std::string name, Attr value) {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const auto& e, const std::string& n) { return e.first < n; });
  if (it != entries_.end() && it->first == name) {
    it->second = std::move(value);
  } else {
    entries_.insert(it, {std::move(name), std::move(value)});
  }
  return *this;
}

const Attr* Attrs::find(std::string_view name) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const auto& e, std::string_view n) { return e.first < n; });
  if (it != entries_.end() && it->first == name) return &it->second;
  return nullptr;
}

bool Attrs::has(std::string_view name) const { return find(name) != nullptr; }

absl::StatusOr<int64_t> Attrs::get_int(std::string_view name) const { return get_as<int64_t>(*this, name, 0); }
absl::StatusOr<std::vector<int64_t>> Attrs::get_ints(std::string_view name) const {
  return get_as<std::vector<int64_t>>(*this, name, 1);
}
absl::StatusOr<Shape> Attrs::get_dims(std::string_view name) const { return get_as<Shape>(*this, name, 2); }
absl::StatusOr<DType> Attrs::get_dtype(std::string_view name) const { return get_as<DType>(*this, name, 3); }
absl::StatusOr<Buffer> Attrs::get_buffer(std::string_view name) const { return get_as<Buffer>(*this, name, 4); }
absl::StatusOr<Regions> Attrs::get_regions(std::string_view name) const { return get_as<Regions>(*this, name, 5); }

bool operator==(const Attrs& a, const Attrs& b) {
  if (a.entries_.size() != b.entries_.size()) return false;
  for (size_t i = 0; i < a.entries_.size(); ++i) {
    if (a.entries_[i].first != b.entries_[i].first) return false;
    if (!attr_equal(a.entries_[i].second, b.entries_[i].second)) return false;
  }
  return true;
}

}  // namespace mcx::ir
