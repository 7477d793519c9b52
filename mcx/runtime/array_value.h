// The runtime data of a concrete array: an abstract value plus the shards that hold its elements, each a
// Buffer on a Device. Today every array has exactly one shard holding the whole value on the default
// device; shardings (a later issue) add the index domain each shard covers.
#pragma once

#include <vector>

#include "mcx/core/buffer.h"
#include "mcx/core/shape.h"
#include "mcx/runtime/device.h"

namespace mcx {

struct Shard {
  Device device;
  Buffer buffer;
};

struct ArrayValue {
  AbstractValue aval;
  std::vector<Shard> shards;

  // One shard with the whole value on `device` (default_device() when omitted).
  static ArrayValue single(Buffer buffer);
  static ArrayValue single(Buffer buffer, const Device& device);
  // The whole value as one host buffer (today: the single shard's buffer, no copy).
  const Buffer& buffer() const { return shards.front().buffer; }
};

}  // namespace mcx
