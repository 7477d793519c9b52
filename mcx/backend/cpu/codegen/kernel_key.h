// What identifies a generated kernel's object code: the group's signature (fused_kernel.h signature()) and the
// generator's target_description() (LLVM version, generator sources, CPU and features). Kernels are shared
// between processes of a job under it (kernel_sharing.h) and stored in the compiled-code store
// (platform/compiled_store.h) under the same two parts, the target split into named components.
// Thread-safety: a value type.
#pragma once

#include <string>

namespace mcx::cpu::codegen {

struct KernelKey {
  std::string signature;
  std::string target;
};

}  // namespace mcx::cpu::codegen
