// mcx::data sources: random access to the examples of a data set, one field (e.g. the images, or the labels)
// per source. A loader zips sources of equal size into the fields of a batch (loader.h).
//
//   auto images = mcx::data::open_idx("data/fashion-mnist/train-images-idx3-ubyte.gz");  // u8[60000, 28, 28]
//   images->size();                 // 60000
//   images->spec();                 // {u8, {28, 28}}: one example
//   images->read_batch(indices, out);  // indices.size() examples, packed row-major into out
//
// Implementing a source for another format: derive from Source and implement size(), spec(), name() and
// read(index, out) (one example) or, where a format reads several at once more cheaply, read_batch.
//
// Contract: examples are numbered 0..size()-1; read(i) writes exactly spec().nbytes() bytes; the same index
// always yields the same bytes (the loader's determinism and its MCX_DATA_VERIFY check depend on it).
// Errors: absl::Status naming the file and the record (the public open_* functions throw mcx::Error).
// Thread-safety: read and read_batch are const and must be safe to call from several threads at once (the
// loader's workers do); the sources here keep their data immutable after opening.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mcx/core/dtype.h"

namespace mcx::data {

// The dtype and dims of one example of a field.
struct ExampleSpec {
  DType dtype = DType::kUInt8;
  std::vector<int64_t> dims;
  int64_t num_elements() const;
  size_t nbytes() const;
  std::string to_string() const;  // "u8[28,28]"
  bool operator==(const ExampleSpec&) const = default;
};

class Source {
 public:
  virtual ~Source();
  virtual int64_t size() const = 0;
  virtual ExampleSpec spec() const = 0;
  // What errors and logs call it: the file or directory.
  virtual std::string name() const = 0;
  // Example `index` (0 <= index < size()) into out (spec().nbytes() bytes).
  virtual absl::Status read(int64_t index, std::span<std::byte> out) const = 0;
  // Examples indices[k] into out at k * spec().nbytes(); the default calls read for each.
  virtual absl::Status read_batch(std::span<const int64_t> indices, std::span<std::byte> out) const;

 protected:
  // OutOfRange "[data] <name>: record <index> out of range: expected an index in [0, size), found <index>".
  absl::Status check_index(int64_t index) const;
};

using SourcePtr = std::shared_ptr<const Source>;

// A source over examples stored contiguously in memory (row-major, example after example): a memory-mapped
// file, a decompressed file or a caller's vector. `keep` owns the memory (any shared pointer; the data stays
// valid while it lives). data.size() must be size * spec.nbytes() (InvalidArgument otherwise).
absl::StatusOr<SourcePtr> make_memory_source(std::string name, ExampleSpec spec, int64_t size,
                                             std::span<const std::byte> data, std::shared_ptr<const void> keep);

// Public, throwing form for users' in-memory data: a copy of `values` (size * spec.num_elements() elements of
// spec.dtype's C++ type, checked by byte count).
SourcePtr from_bytes(std::string name, ExampleSpec spec, int64_t size, std::vector<std::byte> bytes);

// Users' in-memory data, typed: a copy of `values`, one example of shape example_dims after another, with T's
// dtype (dtype_of<T>). The example count is values.size() / prod(example_dims); InvalidArgument names both
// when that does not divide (or example_dims has a negative or zero-sized dimension).
//   auto labels = mcx::data::from_values<int32_t>("labels", {}, label_vector);           // i32[] examples
//   auto images = mcx::data::from_values<float>("images", {28, 28}, pixel_vector);       // f32[28,28] examples
SourcePtr from_values_bytes(std::string name, ExampleSpec spec, std::span<const std::byte> bytes, size_t count);
template <typename T>
SourcePtr from_values(std::string name, std::vector<int64_t> example_dims, std::span<const T> values) {
  return from_values_bytes(std::move(name), ExampleSpec{dtype_of<T>::value, std::move(example_dims)},
                           std::as_bytes(values), values.size());
}
template <typename T>
SourcePtr from_values(std::string name, std::vector<int64_t> example_dims, const std::vector<T>& values) {
  return from_values<T>(std::move(name), std::move(example_dims), std::span<const T>(values));
}

}  // namespace mcx::data
