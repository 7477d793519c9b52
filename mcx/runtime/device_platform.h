// The platform (platform/platform.h) that runs a device's work: the one its `platform` names. Runtime code
// compiles, places and reads arrays of a device through it, never through a backend directly.
// Thread-safety: thread-safe.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "mcx/platform/platform.h"
#include "mcx/core/buffer.h"
#include "mcx/runtime/async_buffer.h"
#include "mcx/runtime/device.h"

namespace mcx {

// The selected platform (MCX_PLATFORMS) whose name device.platform is, as the devices were made with it (device.cc;
// no lock). NotFound naming the selected platforms for any other.
absl::StatusOr<const Platform*> platform_of(const Device& device);

// host's values on `device` (local): its platform's from_host (the storage itself for host memory, a copy
// otherwise). Errors: platform_of's; the platform's (InvalidArgument for a device it does not have).
absl::StatusOr<std::shared_ptr<const DeviceBuffer>> to_device(Buffer host, const Device& device);

// Completes out with to_device(host, device), or with its error.
void set_from_host(AsyncBuffer& out, Buffer host, const Device& device);

// The code generators' counters summed over the platforms this process selected (MCX_PLATFORMS); zeros when
// the selection fails (the devices' creation reports that).
KernelCompileStats selected_kernel_stats();

}  // namespace mcx
