// DeviceBuffer: the storage of one dense array (one shard of a value) in one device's memory, made by that
// device's platform (platform.h): by an executable, or by a copy from the host or from another buffer.
// Immutable once made, like core/buffer.h's Buffer; readiness is the runtime's business (its async buffers
// complete with a DeviceBuffer), so a DeviceBuffer always holds its data.
//
// Host-addressable memory (the CPU platform) exposes its storage as a Buffer (host_buffer(), no copy); any other
// memory is read through its platform's to_host().
// Thread-safety: immutable; every member may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "mcx/core/buffer.h"
#include "mcx/core/dtype.h"

namespace mcx {

class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;

  // The platform whose memory holds the data ("cpu", "cuda", ...).
  virtual std::string_view platform() const = 0;
  virtual DType dtype() const = 0;
  virtual const std::vector<int64_t>& dims() const = 0;
  // The storage as a host Buffer, without a copy, when the device's memory is host memory; nullptr otherwise.
  virtual const Buffer* host_buffer() const = 0;

  int64_t num_elements() const;
  size_t nbytes() const { return static_cast<size_t>(num_elements()) * dtype_size(dtype()); }
  // "f32[2,3] on cpu" for messages.
  std::string describe() const;
};

}  // namespace mcx
