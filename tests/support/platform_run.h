// Running an executable through the platform interface alone (platform/platform.h): host buffers in through
// from_host on local device 0, execute, results back through to_host. Throws mcx::Error on any failure.
#pragma once

#include <memory>
#include <vector>

#include "mcx/core/buffer.h"
#include "mcx/core/error.h"
#include "mcx/platform/platform.h"

namespace mcx::test {

inline std::vector<Buffer> run_on_platform(const Platform& p, const Executable& exe, const std::vector<Buffer>& args) {
  std::vector<std::shared_ptr<const DeviceBuffer>> held;
  std::vector<const DeviceBuffer*> ptrs;
  for (const Buffer& a : args) {
    held.push_back(value_or_throw(p.from_host(a, 0)));
    ptrs.push_back(held.back().get());
  }
  std::vector<Buffer> host;
  for (const auto& o : value_or_throw(exe.execute(ptrs, nullptr))) host.push_back(value_or_throw(p.to_host(*o)));
  return host;
}

}  // namespace mcx::test
