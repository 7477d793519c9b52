#include "mcx/platform/device_buffer.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace mcx {

int64_t DeviceBuffer::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims()) n *= d;
  return n;
}

std::string DeviceBuffer::describe() const {
  return absl::StrCat(AbstractValue{dtype(), concrete_shape(dims())}.to_string(), " on ", std::string(platform()));
}

}  // namespace mcx
