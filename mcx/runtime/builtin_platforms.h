// The platforms built into this library, registered with the platform registry (platform/platform_registry.h)
// when the runtime makes its devices: the CPU's, and the CUDA platform's in a build with the CUDA backend. This is the one place above the backends that names a
// backend's platform; everything else finds platforms through the registry.
//
// Thread-safety: thread-safe; registers once per process.
#pragma once

#include "absl/status/status.h"

namespace mcx {

// Registers every built-in platform, once per process; later calls return the first call's result. Errors: the
// registry's (a platform replaced after use).
absl::Status register_builtin_platforms();

}  // namespace mcx
