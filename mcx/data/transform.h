// Transforms in C++: per-example maps on one field and per-batch functions, run by the loader's workers on
// the host data of this process's rows, before placement.
//
//   field.transforms = {mcx::data::normalize(0.2860, 0.3530),     // u8 pixels -> f32 (x/255 - mean) / std
//                       mcx::data::random_flip(/*axis=*/1)};     // [28, 28]: mirror left-right half the time
//
// Determinism: every per-example transform gets a 64-bit key derived from (loader seed, epoch, global example
// index, field, transform position) only, so augmentations do not depend on the number of processes, devices
// or workers, nor on which worker ran them; processes holding the same replica compute the same bytes.
//
// Contract: output_spec(in) says the dtype/dims the transform produces from an example of `in`
// (InvalidArgument when it cannot take `in`, checked once when the loader is built); apply writes exactly
// output_spec(in).nbytes() bytes. Thread-safety: apply is const and called from several workers at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/core/buffer.h"
#include "mcx/data/source.h"

namespace mcx::data {

class ExampleTransform {
 public:
  virtual ~ExampleTransform();
  virtual std::string name() const = 0;
  virtual absl::StatusOr<ExampleSpec> output_spec(const ExampleSpec& in) const = 0;
  virtual void apply(const ExampleSpec& in, std::span<const std::byte> src, std::span<std::byte> dst,
                     uint64_t key) const = 0;
};
using TransformPtr = std::shared_ptr<const ExampleTransform>;

// (x - mean) / std as f32, where x is the element (u8 scaled by 1/255 first, so mean/std are in [0, 1]).
TransformPtr normalize(float mean, float stddev);
// Mirrors the example along `axis` (of the example's dims) with probability 1/2, decided by the key.
TransformPtr random_flip(int axis);
// Pads the last two dims (H, W) by `pad` zeros on every side and crops back to H x W at a keyed random
// offset (the usual translation augmentation). Any dtype.
TransformPtr random_crop(int pad);
// A user function: out_spec maps the input spec, fn(in_spec, src, dst, key) writes the output.
using ExampleFn = std::function<void(const ExampleSpec&, std::span<const std::byte>, std::span<std::byte>, uint64_t)>;
TransformPtr map_example(std::string name, std::function<absl::StatusOr<ExampleSpec>(const ExampleSpec&)> out_spec,
                         ExampleFn fn);

// This process's rows of one global batch, on the host, after the per-example transforms: fields[f] holds
// the rows of field f (dims [rows, example dims...]); indices[r] is row r's global example index (-1: padding)
// and its position in the global batch is positions[r]. A batch function may change values, not shapes or
// dtypes (checked; InvalidArgument naming the field).
struct HostBatch {
  std::vector<std::string> names;
  std::vector<Buffer> fields;
  std::vector<int64_t> indices;
  std::vector<int64_t> positions;
  int64_t epoch = 0;
};
using BatchFn = std::function<absl::Status(HostBatch&)>;

// The key of example `index` for transform `slot` of field `field` in `epoch`.
uint64_t example_key(uint64_t seed, int64_t epoch, int64_t index, int field, int slot);
// A uniform draw in [0, bound) from a key (and a counter for several draws from one key).
uint64_t key_draw(uint64_t key, uint64_t counter, uint64_t bound);

}  // namespace mcx::data
