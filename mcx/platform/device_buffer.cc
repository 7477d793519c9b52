#include "mcx/platform/device_buffer.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "mcx/core/dims.h"

namespace mcx {

int64_t DeviceBuffer::num_elements() const { return product(dims()); }

std::string DeviceBuffer::describe() const {
  return absl::StrCat(AbstractValue{dtype(), concrete_shape(dims())}.to_string(), " on ", std::string(platform()));
}

}  // namespace mcx
