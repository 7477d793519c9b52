#include "mcx/runtime/device.h"

#include "absl/strings/str_cat.h"

namespace mcx {

std::string Device::to_string() const { return absl::StrCat(platform, ":", global_id); }

const std::vector<Device>& local_devices() {
  static const std::vector<Device> devices = {Device{}};
  return devices;
}

const Device& default_device() { return local_devices().front(); }

}  // namespace mcx
