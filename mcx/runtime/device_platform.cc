#include "mcx/runtime/device_platform.h"

#include "mcx/core/error.h"
#include "mcx/platform/platform_registry.h"

namespace mcx {

absl::StatusOr<std::shared_ptr<const DeviceBuffer>> to_device(Buffer host, const Device& device) {
  MCX_ASSIGN_OR_RETURN(const Platform* platform, platform_of(device));
  return platform->from_host(host, device.local_id);
}

void set_from_host(AsyncBuffer& out, Buffer host, const Device& device) {
  absl::StatusOr<std::shared_ptr<const DeviceBuffer>> b = to_device(std::move(host), device);
  if (b.ok()) {
    out.set(*std::move(b));
  } else {
    out.set_error(b.status());
  }
}

KernelCompileStats selected_kernel_stats() {
  KernelCompileStats sum;
  absl::StatusOr<std::vector<Platform*>> selected = selected_platforms();
  if (!selected.ok()) return sum;
  for (const Platform* p : *selected) {
    const KernelCompileStats s = p->kernel_stats();
    sum.compiled += s.compiled;
    sum.loaded += s.loaded;
    sum.from_peers += s.from_peers;
    sum.reuses += s.reuses;
    sum.compile_ms += s.compile_ms;
    sum.load_ms += s.load_ms;
  }
  return sum;
}

}  // namespace mcx
