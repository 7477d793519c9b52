#include "mcx/core/buffer.h"

#include <cassert>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "fmt/format.h"
#include "mcx/core/dims.h"
#include "mcx/core/host_allocator.h"

namespace mcx {
namespace {

// Aligned host storage (core/host_allocator.h: large blocks are reused) owned by a shared_ptr.
std::shared_ptr<std::byte> allocate(size_t nbytes) {
  auto* p = static_cast<std::byte*>(host_allocate(nbytes));
  return std::shared_ptr<std::byte>(p, [nbytes](std::byte* q) { host_free(q, nbytes); });
}

std::string format_element(const Buffer& b, int64_t i) {
  return dispatch_dtype(b.dtype(), [&](auto tag) -> std::string {
    using T = decltype(tag);
    const T v = b.data<T>()[i];
    if constexpr (std::is_same_v<T, bool>) {
      return v ? "true" : "false";
    } else if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
      return fmt::format("{}", static_cast<float>(v));
    } else if constexpr (std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>) {
      return fmt::format("{}", static_cast<int>(v));
    } else {
      return fmt::format("{}", v);
    }
  });
}

}  // namespace

Buffer Buffer::zeros(DType dtype, std::vector<int64_t> dims) {
  Buffer b = uninitialized(dtype, std::move(dims));
  std::memset(b.storage_.get(), 0, b.nbytes());
  return b;
}

Buffer Buffer::uninitialized(DType dtype, std::vector<int64_t> dims) {
  Buffer b;
  b.dtype_ = dtype;
  b.num_elements_ = product(dims);
  b.dims_ = std::move(dims);
  b.storage_ = allocate(b.nbytes());
  return b;
}

double Buffer::element_as_double(int64_t i) const {
  assert(i >= 0 && i < num_elements_);
  return dispatch_dtype(dtype_, [&](auto tag) -> double {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
      return static_cast<double>(static_cast<float>(data<T>()[i]));
    } else {
      return static_cast<double>(data<T>()[i]);
    }
  });
}

std::vector<double> Buffer::to_doubles() const {
  std::vector<double> out(static_cast<size_t>(num_elements_));
  for (int64_t i = 0; i < num_elements_; ++i) out[i] = element_as_double(i);
  return out;
}

Buffer Buffer::reshaped(std::vector<int64_t> dims) const {
  assert(product(dims) == num_elements_ && "reshaped: element count must not change");
  Buffer b = *this;
  b.dims_ = std::move(dims);
  return b;
}

Buffer Buffer::copy() const {
  Buffer b = uninitialized(dtype_, dims_);
  if (nbytes() > 0) std::memcpy(b.mutable_data(), data(), nbytes());
  return b;
}

bool Buffer::bitwise_equal(const Buffer& other) const {
  if (dtype_ != other.dtype_ || dims_ != other.dims_) return false;
  if (nbytes() == 0 || data() == other.data()) return true;
  return std::memcmp(data(), other.data(), nbytes()) == 0;
}

std::string Buffer::to_string(int64_t max_elements) const {
  std::string out = abstract_value().to_string();
  out += "{";
  const int64_t n = num_elements_;
  const bool elide = max_elements >= 0 && n > max_elements;
  const int64_t head = elide ? (max_elements + 1) / 2 : n;
  const int64_t tail = elide ? max_elements / 2 : 0;
  for (int64_t i = 0; i < head; ++i) absl::StrAppend(&out, i ? ", " : "", format_element(*this, i));
  if (elide) {
    absl::StrAppend(&out, head ? ", " : "", "...");
    for (int64_t i = n - tail; i < n; ++i) absl::StrAppend(&out, ", ", format_element(*this, i));
  }
  out += "}";
  return out;
}

std::string Buffer::to_nested_string(int64_t max_elements) const {
  if (num_elements_ > max_elements) return to_string(max_elements);
  if (dims_.empty()) return format_element(*this, 0);
  std::string out;
  // Element i opens one bracket per trailing dimension it starts and closes one per dimension it ends.
  const int rank = static_cast<int>(dims_.size());
  if (num_elements_ == 0) return std::string(static_cast<size_t>(rank), '[') + std::string(static_cast<size_t>(rank), ']');
  for (int64_t i = 0; i < num_elements_; ++i) {
    int64_t stride = 1;
    int opens = 0;
    for (int d = rank - 1; d >= 0; --d) {
      stride *= dims_[d];
      if (i % stride == 0) ++opens;
    }
    if (i > 0) out += ", ";
    out.append(static_cast<size_t>(opens), '[');
    out += format_element(*this, i);
    stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      stride *= dims_[d];
      if ((i + 1) % stride == 0) out += ']';
    }
  }
  return out;
}

}  // namespace mcx
