// A dense, row-major host array: dtype, concrete dims and shared storage. Cheap to copy (the storage is
// shared); treat it as immutable once it has been handed to an op. Used for IR constants, kernel inputs
// and outputs, and the shards of concrete arrays. Storage is 64-byte aligned (also for zero elements).
// Thread-safety: concurrent reads are safe; writes through mutable_data() need external ordering.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mcx/core/dtype.h"
#include "mcx/core/shape.h"

namespace mcx {

class Buffer {
 public:
  Buffer() = default;
  // Zero-initialised storage (64-byte aligned) for dims; negative dims are a programming error (asserted).
  static Buffer zeros(DType dtype, std::vector<int64_t> dims);
  // Uninitialised storage, for kernels that overwrite every element.
  static Buffer uninitialized(DType dtype, std::vector<int64_t> dims);
  // Copies values; values.size() must equal the product of dims (asserted).
  template <typename T>
  static Buffer from_vector(const std::vector<T>& values, std::vector<int64_t> dims) {
    Buffer b = uninitialized(dtype_v<T>, std::move(dims));
    assert(values.size() == static_cast<size_t>(b.num_elements()) && "from_vector: size must match dims");
    for (size_t i = 0; i < values.size(); ++i) b.mutable_data<T>()[i] = values[i];
    return b;
  }
  template <typename T>
  static Buffer scalar(T value) { return from_vector<T>({value}, {}); }

  bool valid() const { return storage_ != nullptr || num_elements_ == 0; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t num_elements() const { return num_elements_; }
  size_t nbytes() const { return static_cast<size_t>(num_elements_) * dtype_size(dtype_); }
  AbstractValue abstract_value() const { return {dtype_, concrete_shape(dims_)}; }

  const void* data() const { return storage_.get(); }
  void* mutable_data() { return storage_.get(); }
  template <typename T> const T* data() const { return static_cast<const T*>(data()); }
  template <typename T> T* mutable_data() { return static_cast<T*>(mutable_data()); }

  // Whether this Buffer is the only holder of its storage (no copy, reshape or device buffer shares it): then
  // nothing else can read or write the bytes, and the storage may be handed on instead of copied. Meaningful
  // only while no other thread is copying this very Buffer object.
  bool sole_owner() const { return storage_ == nullptr || storage_.use_count() == 1; }

  // Element i converted to double (for tests, printing and reference evaluators).
  double element_as_double(int64_t i) const;
  // All elements converted to double.
  std::vector<double> to_doubles() const;
  // Same storage, new dims with the same element count (asserted).
  Buffer reshaped(std::vector<int64_t> dims) const;
  // Deep copy.
  Buffer copy() const;
  // Bitwise equality of dtype, dims and contents.
  bool bitwise_equal(const Buffer& other) const;
  // "f32[2,3]{1, 2, 3, 4, 5, 6}" (elided in the middle beyond max_elements).
  std::string to_string(int64_t max_elements = 64) const;
  // The values as numpy prints them, nested by dimension: "3.5", "[1, 2]", "[[1, 2], [3, 4]]"; beyond
  // max_elements elements, to_string(max_elements) (type and elided values) instead.
  std::string to_nested_string(int64_t max_elements = 1000) const;

 private:
  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> dims_;
  int64_t num_elements_ = 0;
  std::shared_ptr<std::byte> storage_;
};

}  // namespace mcx
