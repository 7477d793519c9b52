#include "mcx/data/source.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/error.h"

namespace mcx::data {

int64_t ExampleSpec::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

size_t ExampleSpec::nbytes() const { return static_cast<size_t>(num_elements()) * dtype_size(dtype); }

std::string ExampleSpec::to_string() const {
  return absl::StrCat(std::string(dtype_short_name(dtype)), "[", absl::StrJoin(dims, ","), "]");
}

Source::~Source() = default;

absl::Status Source::check_index(int64_t index) const {
  if (index >= 0 && index < size()) return absl::OkStatus();
  return absl::OutOfRangeError(absl::StrCat("[data] ", name(), ": record ", index, " out of range: expected an index in [0, ",
                                            size(), "), found ", index));
}

absl::Status Source::read_batch(std::span<const int64_t> indices, std::span<std::byte> out) const {
  const size_t row = spec().nbytes();
  if (out.size() != indices.size() * row) {
    return absl::InvalidArgumentError(absl::StrCat("[data] ", name(), ": read_batch: expected an output of ",
                                                   indices.size() * row, " bytes, found ", out.size()));
  }
  for (size_t k = 0; k < indices.size(); ++k) MCX_RETURN_IF_ERROR(read(indices[k], out.subspan(k * row, row)));
  return absl::OkStatus();
}

namespace {

class MemorySource final : public Source {
 public:
  MemorySource(std::string name, ExampleSpec spec, int64_t size, std::span<const std::byte> data,
               std::shared_ptr<const void> keep)
      : name_(std::move(name)), spec_(std::move(spec)), size_(size), row_(spec_.nbytes()), data_(data),
        keep_(std::move(keep)) {}

  int64_t size() const override { return size_; }
  ExampleSpec spec() const override { return spec_; }
  std::string name() const override { return name_; }

  absl::Status read(int64_t index, std::span<std::byte> out) const override {
    MCX_RETURN_IF_ERROR(check_index(index));
    if (out.size() != row_) {
      return absl::InvalidArgumentError(absl::StrCat("[data] ", name_, ": read: expected an output of ", row_,
                                                     " bytes, found ", out.size()));
    }
    std::memcpy(out.data(), data_.data() + static_cast<size_t>(index) * row_, row_);
    return absl::OkStatus();
  }

  absl::Status read_batch(std::span<const int64_t> indices, std::span<std::byte> out) const override {
    if (out.size() != indices.size() * row_) return Source::read_batch(indices, out);  // its error
    for (size_t k = 0; k < indices.size(); ++k) {
      MCX_RETURN_IF_ERROR(check_index(indices[k]));
      std::memcpy(out.data() + k * row_, data_.data() + static_cast<size_t>(indices[k]) * row_, row_);
    }
    return absl::OkStatus();
  }

 private:
  std::string name_;
  ExampleSpec spec_;
  int64_t size_;
  size_t row_;
  std::span<const std::byte> data_;
  std::shared_ptr<const void> keep_;
};

}  // namespace

absl::StatusOr<SourcePtr> make_memory_source(std::string name, ExampleSpec spec, int64_t size,
                                             std::span<const std::byte> data, std::shared_ptr<const void> keep) {
  if (size < 0 || data.size() != static_cast<size_t>(size) * spec.nbytes()) {
    return absl::InvalidArgumentError(absl::StrCat("[data] ", name, ": expected ", size, " examples of ",
                                                   spec.to_string(), " (", static_cast<size_t>(std::max<int64_t>(size, 0)) * spec.nbytes(),
                                                   " bytes), found ", data.size(), " bytes"));
  }
  return SourcePtr(std::make_shared<MemorySource>(std::move(name), std::move(spec), size, data, std::move(keep)));
}

SourcePtr from_values_bytes(std::string name, ExampleSpec spec, std::span<const std::byte> bytes, size_t count) {
  int64_t per_example = 1;
  for (int64_t d : spec.dims) {
    if (d <= 0) {
      throw InvalidArgument(absl::StrCat("[data] ", name, ": expected example dimensions > 0, found ", spec.to_string()));
    }
    per_example *= d;
  }
  const int64_t n = static_cast<int64_t>(count);
  if (n % per_example != 0) {
    throw InvalidArgument(absl::StrCat("[data] ", name, ": expected a whole number of ", spec.to_string(),
                                       " examples (a multiple of ", per_example, " values), found ", n, " values"));
  }
  return from_bytes(std::move(name), std::move(spec), n / per_example,
                    std::vector<std::byte>(bytes.begin(), bytes.end()));
}

SourcePtr from_bytes(std::string name, ExampleSpec spec, int64_t size, std::vector<std::byte> bytes) {
  auto owned = std::make_shared<std::vector<std::byte>>(std::move(bytes));
  std::span<const std::byte> view(owned->data(), owned->size());
  return value_or_throw(make_memory_source(std::move(name), std::move(spec), size, view, std::move(owned)));
}

}  // namespace mcx::data
