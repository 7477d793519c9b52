#include "mcx/backend/cuda/driver_api.h"


#include "absl/strings/str_cat.h"
#include "mcx/backend/cuda/dynamic_library.h"
#include "mcx/core/error.h"

namespace mcx::cuda {
namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

absl::Status no_driver(absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrCat("no CUDA driver: ", why));
}

}  // namespace

std::string cuda_version_string(int version) { return absl::StrCat(version / 1000, ".", (version % 1000) / 10); }

absl::Status driver_status(const DriverApi& api, CUresult r, absl::string_view what) {
  if (r == CUDA_SUCCESS) return absl::OkStatus();
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName == nullptr || api.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = nullptr;
  if (api.cuGetErrorString == nullptr || api.cuGetErrorString(r, &text) != CUDA_SUCCESS) text = nullptr;
  std::string msg = absl::StrCat(what, ": ", name != nullptr ? name : absl::StrCat("CUresult ", static_cast<int>(r)),
                                 text != nullptr ? absl::StrCat(" (", text, ")") : "");
  switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY: return absl::ResourceExhaustedError(msg);
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED: return absl::FailedPreconditionError(msg);
    default: return absl::InternalError(msg);
  }
}

absl::StatusOr<std::unique_ptr<DriverApi>> load_cuda_driver(const std::string& library) {
  const std::string names[] = {library};
  absl::StatusOr<DynamicLibrary> lib = DynamicLibrary::open(names);
  if (!lib.ok()) return no_driver(lib.status().message());
  auto api = std::make_unique<DriverApi>();
  api->library = lib->path();
  absl::StatusOr<void*> gpa = lib->symbol("cuGetProcAddress_v2");
  if (!gpa.ok()) return no_driver(absl::StrCat(gpa.status().message(), ": not a CUDA ", kBuiltCudaVersion / 1000, " driver"));
  auto get_proc = reinterpret_cast<GetProcAddress>(*gpa);
  // cuInit and the error names straight from the library first: the toolkit's stub libcuda.so exports every
  // symbol, but its cuGetProcAddress and every call fail.
  for (auto [slot, name] : {std::pair<void**, const char*>{reinterpret_cast<void**>(&api->cuInit), "cuInit"},
                            {reinterpret_cast<void**>(&api->cuGetErrorName), "cuGetErrorName"},
                            {reinterpret_cast<void**>(&api->cuGetErrorString), "cuGetErrorString"}}) {
    absl::StatusOr<void*> fn = lib->symbol(name);
    if (!fn.ok()) return no_driver(fn.status().message());
    *slot = *fn;
  }
  const CUresult init = api->cuInit(0);
  if (init == CUDA_ERROR_STUB_LIBRARY) {
    return no_driver(absl::StrCat(api->library,
                                  " is the CUDA toolkit's stub library (for linking only), not a driver: put the "
                                  "driver's libcuda.so.1 first in the library path"));
  }
  if (init != CUDA_SUCCESS) {
    return no_driver(driver_status(*api, init, absl::StrCat("cuInit in ", api->library)).message());
  }
  std::string missing;
#define MCX_CUDA_DRIVER_RESOLVE(name)                                                                        \
  {                                                                                                          \
    void* fn = nullptr;                                                                                      \
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;                             \
    if (get_proc(#name, &fn, kBuiltCudaVersion, CU_GET_PROC_ADDRESS_DEFAULT, &found) == CUDA_SUCCESS &&      \
        found == CU_GET_PROC_ADDRESS_SUCCESS && fn != nullptr) {                                             \
      api->name = reinterpret_cast<decltype(api->name)>(fn);                                                 \
    } else if (missing.empty()) {                                                                            \
      missing = #name;                                                                                       \
    }                                                                                                        \
  }
  MCX_CUDA_DRIVER_FUNCTIONS(MCX_CUDA_DRIVER_RESOLVE)
#undef MCX_CUDA_DRIVER_RESOLVE
  if (!missing.empty()) {
    return no_driver(absl::StrCat(api->library, " has no ", missing, " for CUDA ",
                                  cuda_version_string(kBuiltCudaVersion), " (update the driver)"));
  }
  MCX_RETURN_IF_ERROR(driver_status(*api, api->cuDriverGetVersion(&api->version), "cuDriverGetVersion"));
  if (api->version < kBuiltCudaVersion) {
    return no_driver(absl::StrCat("the driver in ", api->library, " supports CUDA up to ", cuda_version_string(api->version),
                                  "; mcx was built with CUDA ", cuda_version_string(kBuiltCudaVersion),
                                  " and needs a driver for it or newer"));
  }
  int count = 0;
  MCX_RETURN_IF_ERROR(driver_status(*api, api->cuDeviceGetCount(&count), "cuDeviceGetCount"));
  if (count == 0) return no_driver(absl::StrCat("the driver in ", api->library, " sees no CUDA device"));
  return api;
}

absl::StatusOr<const DriverApi*> cuda_driver() {
  static const absl::StatusOr<std::unique_ptr<DriverApi>>* loaded =
      new absl::StatusOr<std::unique_ptr<DriverApi>>(load_cuda_driver("libcuda.so.1"));
  if (!loaded->ok()) return loaded->status();
  return loaded->value().get();
}

}  // namespace mcx::cuda
