// A shared library opened at run time (dlopen), for the CUDA driver and the CUDA libraries the backend uses:
// none of them is linked, so every build runs on a machine without them and says what is missing when asked
// for the GPU.
//
// Search order for a library named by its soname ("libnvJitLink.so.13"): each folder of MCX_CUDA_LIBRARY_PATH
// (colon-separated: an explicit choice wins), then the dynamic linker's own search (LD_LIBRARY_PATH, the ld.so
// cache), then the folders the caller adds (the CUDA toolkit's library folder found at build time). A library, once opened,
// stays loaded for the life of the process (the CUDA libraries start threads and register handlers that must
// not outlive their code). Thread-safe.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace mcx::cuda {

class DynamicLibrary {
 public:
  // Opens the first of `names` found in the search order above. NotFound naming every name and folder
  // tried, and the dynamic linker's message for the first.
  static absl::StatusOr<DynamicLibrary> open(std::span<const std::string> names,
                                             std::span<const std::string> extra_dirs = {});

  // The address of `name`; NotFound naming the symbol and the library.
  absl::StatusOr<void*> symbol(const std::string& name) const;

  // The file the library was opened from (its soname when the dynamic linker found it).
  const std::string& path() const { return path_; }

 private:
  DynamicLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  void* handle_;
  std::string path_;
};

// The CUDA toolkit library `stem` of the CUDA major version mcx was built with ("nvJitLink" ->
// libnvJitLink.so.13), or of its own `soversion` when it has one (NCCL: libnccl.so.2), looked for as above with
// the toolkit's library folder found at build time last. Errors as open()'s, prefixed "no <what>: ".
absl::StatusOr<DynamicLibrary> open_cuda_library(std::string_view stem, std::string_view what, int soversion = 0);

// The folders of MCX_CUDA_LIBRARY_PATH, in order (empty when unset).
std::vector<std::string> cuda_library_path();

}  // namespace mcx::cuda
