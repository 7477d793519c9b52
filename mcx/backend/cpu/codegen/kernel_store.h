// Where generated kernels' object code is kept between processes. The backend defines the interface; the
// persistent compilation cache (mcx/cache, a layer above) implements it and registers itself here when a
// cache directory is configured (docs/compilation_cache.md). Without a store every kernel is compiled.
//
// Thread-safety: set_kernel_store/kernel_store are thread-safe; a store's methods are called from any
// thread (compiles run on the thread pool) and must be thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace mcx::cpu::codegen {

// What identifies a kernel's object code: the group's signature (fused_kernel.h signature()) and the
// generator's target_description() (LLVM version, generator sources, CPU and features).
struct KernelKey {
  std::string signature;
  std::string target;
};

class KernelStore {
 public:
  virtual ~KernelStore() = default;
  // The object code stored under key, or nullopt on a miss. A damaged entry is a miss (the store logs and
  // removes it); never an error the compile must handle.
  virtual std::optional<std::string> load(const KernelKey& key) = 0;
  // Keeps object under key (the store may decline by its own policy). compile_ms: what a hit saves.
  virtual void save(const KernelKey& key, std::string_view object, double compile_ms) = 0;
};

// Installs the store compile_fused consults (nullptr: none). Kernels already made in this process stay.
void set_kernel_store(std::shared_ptr<KernelStore> store);
std::shared_ptr<KernelStore> kernel_store();

}  // namespace mcx::cpu::codegen
