#include "mcx/backend/cuda/dynamic_library.h"

#include <cuda.h>
#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#ifndef MCX_CUDA_TOOLKIT_LIBRARY_DIR
#define MCX_CUDA_TOOLKIT_LIBRARY_DIR ""
#endif

namespace mcx::cuda {

std::vector<std::string> cuda_library_path() {
  std::vector<std::string> dirs;
  const char* v = std::getenv("MCX_CUDA_LIBRARY_PATH");
  if (v == nullptr) return dirs;
  for (absl::string_view d : absl::StrSplit(v, ':', absl::SkipEmpty())) dirs.emplace_back(d);
  return dirs;
}

absl::StatusOr<DynamicLibrary> DynamicLibrary::open(std::span<const std::string> names,
                                                    std::span<const std::string> extra_dirs) {
  const std::vector<std::string> chosen = cuda_library_path();
  std::vector<std::string> dirs = chosen;
  dirs.insert(dirs.end(), extra_dirs.begin(), extra_dirs.end());
  std::string first_error;
  for (const std::string& name : names) {
    std::vector<std::string> candidates;
    for (const std::string& d : chosen) candidates.push_back(absl::StrCat(d, "/", name));
    candidates.push_back(name);
    for (const std::string& d : extra_dirs) candidates.push_back(absl::StrCat(d, "/", name));
    for (const std::string& c : candidates) {
      // RTLD_LOCAL: the library's symbols stay out of the global namespace (two CUDA versions may meet).
      if (void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL)) return DynamicLibrary(h, c);
      if (first_error.empty()) {
        const char* e = dlerror();
        first_error = e != nullptr ? e : "unknown dlopen error";
      }
    }
  }
  return absl::NotFoundError(absl::StrCat(
      "cannot load ", absl::StrJoin(names, " or "), " (looked in the dynamic linker's path",
      dirs.empty() ? "" : absl::StrCat(" and in ", absl::StrJoin(dirs, ", ")),
      "; MCX_CUDA_LIBRARY_PATH adds folders): ", first_error));
}

absl::StatusOr<DynamicLibrary> open_cuda_library(std::string_view stem, std::string_view what, int soversion) {
  const std::string names[] = {absl::StrCat("lib", std::string(stem), ".so.", soversion > 0 ? soversion : CUDA_VERSION / 1000)};
  std::vector<std::string> dirs;
  if (std::string_view(MCX_CUDA_TOOLKIT_LIBRARY_DIR).size() > 0) dirs.emplace_back(MCX_CUDA_TOOLKIT_LIBRARY_DIR);
  absl::StatusOr<DynamicLibrary> lib = DynamicLibrary::open(names, dirs);
  if (!lib.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("no ", std::string(what), ": ", lib.status().message()));
  }
  return lib;
}

absl::StatusOr<void*> DynamicLibrary::symbol(const std::string& name) const {
  dlerror();
  void* p = dlsym(handle_, name.c_str());
  if (p == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, " has no symbol ", name));
  }
  return p;
}

}  // namespace mcx::cuda
