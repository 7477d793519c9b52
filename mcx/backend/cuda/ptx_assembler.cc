#include "mcx/backend/cuda/ptx_assembler.h"

#include <cuda.h>
#include <nvJitLink.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "mcx/backend/cuda/dynamic_library.h"
#include "mcx/core/error.h"

namespace mcx::cuda {
namespace {

// nvJitLink's exported entry points (the header maps its names to versioned symbols; the library also exports
// the plain names, which this resolves).
struct JitLinkApi {
  nvJitLinkResult (*create)(nvJitLinkHandle*, uint32_t, const char**) = nullptr;
  nvJitLinkResult (*destroy)(nvJitLinkHandle*) = nullptr;
  nvJitLinkResult (*add_data)(nvJitLinkHandle, nvJitLinkInputType, const void*, size_t, const char*) = nullptr;
  nvJitLinkResult (*complete)(nvJitLinkHandle) = nullptr;
  nvJitLinkResult (*cubin_size)(nvJitLinkHandle, size_t*) = nullptr;
  nvJitLinkResult (*cubin)(nvJitLinkHandle, void*) = nullptr;
  nvJitLinkResult (*error_log_size)(nvJitLinkHandle, size_t*) = nullptr;
  nvJitLinkResult (*error_log)(nvJitLinkHandle, char*) = nullptr;
  nvJitLinkResult (*info_log_size)(nvJitLinkHandle, size_t*) = nullptr;
  nvJitLinkResult (*info_log)(nvJitLinkHandle, char*) = nullptr;
  nvJitLinkResult (*version)(unsigned int*, unsigned int*) = nullptr;
};

absl::StatusOr<JitLinkApi> load() {
  absl::StatusOr<DynamicLibrary> lib = open_cuda_library("nvJitLink", "PTX assembler");
  if (!lib.ok()) return lib.status();
  JitLinkApi api;
  auto resolve = [&](auto& fn, const char* name) -> absl::Status {
    MCX_ASSIGN_OR_RETURN(void* p, lib->symbol(name));
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    return absl::OkStatus();
  };
  MCX_RETURN_IF_ERROR(resolve(api.create, "nvJitLinkCreate"));
  MCX_RETURN_IF_ERROR(resolve(api.destroy, "nvJitLinkDestroy"));
  MCX_RETURN_IF_ERROR(resolve(api.add_data, "nvJitLinkAddData"));
  MCX_RETURN_IF_ERROR(resolve(api.complete, "nvJitLinkComplete"));
  MCX_RETURN_IF_ERROR(resolve(api.cubin_size, "nvJitLinkGetLinkedCubinSize"));
  MCX_RETURN_IF_ERROR(resolve(api.cubin, "nvJitLinkGetLinkedCubin"));
  MCX_RETURN_IF_ERROR(resolve(api.error_log_size, "nvJitLinkGetErrorLogSize"));
  MCX_RETURN_IF_ERROR(resolve(api.error_log, "nvJitLinkGetErrorLog"));
  MCX_RETURN_IF_ERROR(resolve(api.info_log_size, "nvJitLinkGetInfoLogSize"));
  MCX_RETURN_IF_ERROR(resolve(api.info_log, "nvJitLinkGetInfoLog"));
  MCX_RETURN_IF_ERROR(resolve(api.version, "nvJitLinkVersion"));
  return api;
}

absl::StatusOr<const JitLinkApi*> jit_link() {
  static const absl::StatusOr<JitLinkApi>* api = new absl::StatusOr<JitLinkApi>(load());
  if (!api->ok()) return api->status();
  return &api->value();
}

std::string read_log(nvJitLinkHandle h, nvJitLinkResult (*size_fn)(nvJitLinkHandle, size_t*),
                     nvJitLinkResult (*log_fn)(nvJitLinkHandle, char*)) {
  size_t n = 0;
  if (size_fn(h, &n) != NVJITLINK_SUCCESS || n == 0) return "";
  std::string log(n, '\0');
  if (log_fn(h, log.data()) != NVJITLINK_SUCCESS) return "";
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

absl::StatusOr<std::string> ptx_assembler_version() {
  MCX_ASSIGN_OR_RETURN(const JitLinkApi* api, jit_link());
  unsigned major = 0, minor = 0;
  if (api->version(&major, &minor) != NVJITLINK_SUCCESS) return absl::InternalError("nvJitLinkVersion failed");
  return absl::StrCat(major, ".", minor);
}

absl::StatusOr<AssembledKernel> assemble_ptx(std::string_view ptx, int arch) {
  MCX_ASSIGN_OR_RETURN(const JitLinkApi* api, jit_link());
  const std::string arch_option = absl::StrCat("-arch=sm_", arch);
  const char* options[] = {arch_option.c_str(), "-O3", "-verbose"};
  nvJitLinkHandle h = nullptr;
  if (nvJitLinkResult r = api->create(&h, 3, options); r != NVJITLINK_SUCCESS) {
    return absl::InternalError(absl::StrCat("nvJitLinkCreate(", arch_option, ") failed: nvJitLinkResult ", static_cast<int>(r)));
  }
  struct Destroy {
    const JitLinkApi* api;
    nvJitLinkHandle* h;
    ~Destroy() { api->destroy(h); }
  } destroy{api, &h};
  nvJitLinkResult r = api->add_data(h, NVJITLINK_INPUT_PTX, ptx.data(), ptx.size(), "mcx_kernels.ptx");
  if (r == NVJITLINK_SUCCESS) r = api->complete(h);
  if (r != NVJITLINK_SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat("PTX rejected by nvJitLink for sm_", arch, " (nvJitLinkResult ",
                                                   static_cast<int>(r), "): ",
                                                   read_log(h, api->error_log_size, api->error_log)));
  }
  AssembledKernel out;
  size_t n = 0;
  if (api->cubin_size(h, &n) != NVJITLINK_SUCCESS) return absl::InternalError("nvJitLinkGetLinkedCubinSize failed");
  out.cubin.resize(n);
  if (api->cubin(h, out.cubin.data()) != NVJITLINK_SUCCESS) return absl::InternalError("nvJitLinkGetLinkedCubin failed");
  out.info = read_log(h, api->info_log_size, api->info_log);
  return out;
}

}  // namespace mcx::cuda
