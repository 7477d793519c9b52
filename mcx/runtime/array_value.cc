#include "mcx/runtime/array_value.h"

namespace mcx {

ArrayValue ArrayValue::single(Buffer buffer) { return single(std::move(buffer), default_device()); }

ArrayValue ArrayValue::single(Buffer buffer, const Device& device) {
  ArrayValue v;
  v.aval = buffer.abstract_value();
  v.shards.push_back(Shard{device, std::move(buffer)});
  return v;
}

}  // namespace mcx
