// Executable: a program compiled by one platform (platform.h) for its devices, the unit the runtime caches,
// stores in the persistent compilation cache (serialize; Platform::deserialize reads it back) and runs on a
// device's stream.
//
// Thread-safety: immutable once made; execute() may run concurrently from many threads (one per device).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/ir/program.h"
#include "mcx/platform/device_buffer.h"
#include "mcx/platform/execution_context.h"

namespace mcx {

class Executable {
 public:
  virtual ~Executable() = default;

  // The platform that compiled it; execute() takes and makes buffers of this platform only.
  virtual std::string_view platform() const = 0;
  // The program it runs (after the platform's own rewriting, e.g. inlined custom rules): its parameter and
  // result types are execute()'s.
  virtual const ir::Program& program() const = 0;
  // Whether the program holds collectives (then every partition must run concurrently, with a context).
  virtual bool has_collectives() const = 0;

  // Runs the program on the calling thread and returns one buffer per result. args[i] must be a buffer of
  // this platform with parameter i's dtype and dims; ctx as in execution_context.h (nullptr: partition 0 of 1).
  // Errors: InvalidArgument for a wrong argument count, type or platform (naming the index, expected and
  // found); the platform's execution errors (its executable header lists them), named by the failing op.
  virtual absl::StatusOr<std::vector<std::shared_ptr<const DeviceBuffer>>> execute(
      std::span<const DeviceBuffer* const> args, const ExecutionContext* ctx) const = 0;

  // The executable as bytes Platform::deserialize reads back (in this build, for this platform's target).
  virtual absl::StatusOr<std::string> serialize() const = 0;
};

}  // namespace mcx
