// A stand-in CUDA driver for tests on machines without a GPU (built as libcuda.so.1 in its own folder; a test
// process finds it through MCX_CUDA_LIBRARY_PATH). It implements the driver functions mcx resolves over host
// memory: MCX_FAKE_CUDA_DEVICES devices (default 1; CUDA_VISIBLE_DEVICES selects and renumbers them as the real
// driver does), each "mcx fake GPU", sm_90, 132 SMs, MCX_FAKE_CUDA_MEMORY_MB of memory (default 1024), device
// memory from malloc with each device's capacity enforced (the current context's device), copies done at once,
// modules accepted when they are ELF images or PTX. A stream is complete except while a stand-in library holds
// it (mcx_fake_cuda_stream_hold/release: the stand-in NCCL's collectives, finished by its own threads): then
// cuStreamQuery answers not ready and every later operation on the stream waits for the release, as stream order
// requires. Those it cannot run (cuLaunchKernel
// answers CUDA_ERROR_NOT_SUPPORTED), so the backend's host side (loading, devices, the allocator over the driver,
// staging and chunked transfers, module loading, error paths) runs for real. Kernels compiled for the host
// (MCX_CUDA_KERNEL_TARGET=host) it runs, at launch, on the calling thread (emulated_kernels.h): so the gpu
// label's tests check the kernels' logic against the CPU on any machine. What only a GPU shows (thread
// concurrency, the NVPTX code generator, libdevice's math) stays the gpu label's on a GPU.
#include <cuda.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tests/support/fake_cuda/emulated_kernels.h"

namespace {

std::mutex mu;
struct Allocation {
  size_t bytes = 0;
  int device = 0;
};
std::map<CUdeviceptr, Allocation> allocations;  // guarded by mu
std::map<int, size_t> used;                     // bytes by visible device; guarded by mu
thread_local int current_device = 0;            // the device of the thread's current context
int next_handle = 1;                         // guarded by mu
// Host modules and kernels by handle (the handles of other modules and functions are absent).
std::map<CUmodule, size_t> host_modules;           // guarded by mu
struct HostKernel {
  size_t module = 0;
  mcx::fake_cuda::KernelEntry entry = nullptr;
};
std::map<CUfunction, HostKernel> host_kernels;     // guarded by mu

size_t capacity() {
  const char* mb = std::getenv("MCX_FAKE_CUDA_MEMORY_MB");
  return static_cast<size_t>(mb != nullptr ? std::atoll(mb) : 1024) << 20;
}

// The physical devices the process sees, in visible order: MCX_FAKE_CUDA_DEVICES of them, filtered and reordered by
// CUDA_VISIBLE_DEVICES (a comma-separated list of indices; as the driver, the list ends at the first invalid entry).
const std::vector<int>& visible_devices() {
  static const std::vector<int> visible = [] {
    const char* n = std::getenv("MCX_FAKE_CUDA_DEVICES");
    const int physical = n != nullptr ? std::atoi(n) : 1;
    std::vector<int> out;
    const char* list = std::getenv("CUDA_VISIBLE_DEVICES");
    if (list == nullptr) {
      for (int i = 0; i < physical; ++i) out.push_back(i);
      return out;
    }
    std::string entry;
    for (const char* c = list;; ++c) {
      if (*c == ',' || *c == '\0') {
        char* end = nullptr;
        const long v = std::strtol(entry.c_str(), &end, 10);
        if (entry.empty() || *end != '\0' || v < 0 || v >= physical) break;
        out.push_back(static_cast<int>(v));
        entry.clear();
        if (*c == '\0') break;
      } else {
        entry.push_back(*c);
      }
    }
    return out;
  }();
  return visible;
}

// Work a stand-in library holds on each stream (see above).
std::mutex stream_mu;
std::condition_variable stream_released;
std::map<CUstream, int> held;  // guarded by stream_mu

bool stream_busy(CUstream s) {
  std::lock_guard<std::mutex> lock(stream_mu);
  auto it = held.find(s);
  return it != held.end() && it->second > 0;
}

// Waits until nothing holds `s` (every operation on a stream comes after the held work).
void drain(CUstream s) {
  std::unique_lock<std::mutex> lock(stream_mu);
  stream_released.wait(lock, [&] { return held[s] == 0; });
}

void drain_all() {
  std::unique_lock<std::mutex> lock(stream_mu);
  stream_released.wait(lock, [&] {
    for (const auto& [stream, n] : held) {
      if (n > 0) return false;
    }
    return true;
  });
}

CUcontext context_of(int device) { return reinterpret_cast<CUcontext>(static_cast<uintptr_t>(0x1000 + 0x10 * device)); }

template <typename T>
T new_handle() {
  std::lock_guard<std::mutex> lock(mu);
  return reinterpret_cast<T>(static_cast<uintptr_t>(next_handle++) << 4);
}

}  // namespace

extern "C" {
// NOLINTBEGIN(readability-identifier-naming): the driver API's names.
CUresult cuInit(unsigned int) { return CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int* v) { *v = CUDA_VERSION; return CUDA_SUCCESS; }
CUresult cuGetErrorName(CUresult r, const char** s) {
  *s = r == CUDA_ERROR_NOT_SUPPORTED ? "CUDA_ERROR_NOT_SUPPORTED"
       : r == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY"
       : r == CUDA_ERROR_INVALID_IMAGE ? "CUDA_ERROR_INVALID_IMAGE"
                                       : "CUDA_ERROR_UNKNOWN";
  return CUDA_SUCCESS;
}
CUresult cuGetErrorString(CUresult r, const char** s) {
  *s = r == CUDA_ERROR_NOT_SUPPORTED ? "the fake driver runs no kernels" : "fake driver error";
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetCount(int* n) { *n = static_cast<int>(visible_devices().size()); return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal < 0 || ordinal >= static_cast<int>(visible_devices().size())) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetName(char* name, int len, CUdevice) {
  std::strncpy(name, "mcx fake GPU", static_cast<size_t>(len));
  return CUDA_SUCCESS;
}
// The same physical device has the same UUID in every process: "mcx-fake-gpu" and its physical index.
CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice d) {
  if (d < 0 || d >= static_cast<int>(visible_devices().size())) return CUDA_ERROR_INVALID_DEVICE;
  std::memset(uuid->bytes, 0, sizeof(uuid->bytes));
  std::memcpy(uuid->bytes, "mcx-fake-gpu", 12);
  const int physical = visible_devices()[d];
  std::memcpy(uuid->bytes + 12, &physical, sizeof(physical));
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
    default: *v = 0;
  }
  return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) { *bytes = capacity(); return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) { *c = context_of(d); return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) { return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext c) {
  const auto handle = reinterpret_cast<uintptr_t>(c);
  if (handle < 0x1000 || (handle - 0x1000) % 0x10 != 0) return CUDA_ERROR_INVALID_CONTEXT;
  current_device = static_cast<int>((handle - 0x1000) / 0x10);
  return CUDA_SUCCESS;
}
CUresult cuCtxSynchronize() { drain_all(); return CUDA_SUCCESS; }
CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  std::lock_guard<std::mutex> lock(mu);
  *total = capacity();
  *free_bytes = *total - used[current_device];
  return CUDA_SUCCESS;
}
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu);
  if (used[current_device] + bytes > capacity()) return CUDA_ERROR_OUT_OF_MEMORY;
  void* m = std::malloc(bytes);
  if (m == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = reinterpret_cast<CUdeviceptr>(m);
  allocations[*p] = {bytes, current_device};
  used[current_device] += bytes;
  return CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = allocations.find(p);
  if (it == allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  used[it->second.device] -= it->second.bytes;
  allocations.erase(it);
  std::free(reinterpret_cast<void*>(p));
  return CUDA_SUCCESS;
}
CUresult cuMemHostAlloc(void** p, size_t bytes, unsigned int) {
  *p = std::malloc(bytes);
  return *p != nullptr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult cuMemFreeHost(void* p) { std::free(p); return CUDA_SUCCESS; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  drain(s);
  std::memcpy(reinterpret_cast<void*>(dst), src, n);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  drain(s);
  std::memcpy(dst, reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  drain(s);
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  drain(s);
  std::memset(reinterpret_cast<void*>(dst), v, n);
  return CUDA_SUCCESS;
}
CUresult cuStreamCreate(CUstream* s, unsigned int) { *s = new_handle<CUstream>(); return CUDA_SUCCESS; }
CUresult cuStreamDestroy_v2(CUstream s) { drain(s); return CUDA_SUCCESS; }
CUresult cuStreamSynchronize(CUstream s) { drain(s); return CUDA_SUCCESS; }
CUresult cuStreamQuery(CUstream s) { return stream_busy(s) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS; }
CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned int) { return CUDA_SUCCESS; }
CUresult cuEventCreate(CUevent* e, unsigned int) { *e = new_handle<CUevent>(); return CUDA_SUCCESS; }
CUresult cuEventRecord(CUevent, CUstream s) { drain(s); return CUDA_SUCCESS; }
CUresult cuEventSynchronize(CUevent) { return CUDA_SUCCESS; }
CUresult cuEventQuery(CUevent) { return CUDA_SUCCESS; }
CUresult cuEventElapsedTime(float* ms, CUevent, CUevent) { *ms = 0; return CUDA_SUCCESS; }
CUresult cuEventDestroy_v2(CUevent) { return CUDA_SUCCESS; }
CUresult cuModuleLoadData(CUmodule* m, const void* image) {
  if (mcx::fake_cuda::is_host_kernel_image(image)) {
    std::string error;
    const size_t id = mcx::fake_cuda::load_host_module(image, &error);
    if (id == 0) {
      std::fprintf(stderr, "fake cuda: cannot load a host kernel image: %s\n", error.c_str());
      return CUDA_ERROR_INVALID_IMAGE;
    }
    *m = new_handle<CUmodule>();
    std::lock_guard<std::mutex> lock(mu);
    host_modules[*m] = id;
    return CUDA_SUCCESS;
  }
  const auto* bytes = static_cast<const char*>(image);
  const bool elf = std::memcmp(bytes, "\x7f" "ELF", 4) == 0;
  const bool ptx = std::strstr(bytes, ".entry") != nullptr;
  if (!elf && !ptx) return CUDA_ERROR_INVALID_IMAGE;
  *m = new_handle<CUmodule>();
  return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule m) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = host_modules.find(m);
  if (it != host_modules.end()) {
    std::erase_if(host_kernels, [&](const auto& k) { return k.second.module == it->second; });
    mcx::fake_cuda::unload_host_module(it->second);
    host_modules.erase(it);
  }
  return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  size_t host_module = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = host_modules.find(m);
    if (it != host_modules.end()) host_module = it->second;
  }
  mcx::fake_cuda::KernelEntry entry = nullptr;
  if (host_module != 0) {
    entry = mcx::fake_cuda::host_kernel(host_module, name);
    if (entry == nullptr) return CUDA_ERROR_NOT_FOUND;
  }
  *f = new_handle<CUfunction>();
  if (entry != nullptr) {
    std::lock_guard<std::mutex> lock(mu);
    host_kernels[*f] = {host_module, entry};
  }
  return CUDA_SUCCESS;
}
CUresult cuFuncGetAttribute(int* v, CUfunction_attribute, CUfunction) { *v = 0; return CUDA_SUCCESS; }
CUresult cuFuncSetAttribute(CUfunction, CUfunction_attribute, int) { return CUDA_SUCCESS; }
CUresult cuLaunchKernel(CUfunction f, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                        unsigned int, CUstream s, void** params, void**) {
  drain(s);
  mcx::fake_cuda::KernelEntry entry = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = host_kernels.find(f);
    if (it != host_kernels.end()) entry = it->second.entry;
  }
  if (entry == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  entry(params);  // one thread covers the grid (a kernel's grid-stride loop)
  return CUDA_SUCCESS;
}

// For stand-in libraries linked against this driver: work they run on their own threads holds the stream until
// released (see the top of this file).
void mcx_fake_cuda_stream_hold(CUstream s) {
  std::lock_guard<std::mutex> lock(stream_mu);
  ++held[s];
}
void mcx_fake_cuda_stream_release(CUstream s) {
  {
    std::lock_guard<std::mutex> lock(stream_mu);
    --held[s];
  }
  stream_released.notify_all();
}

// Every function above by its base name, as a CUDA 13 driver answers cuGetProcAddress.
CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int, cuuint64_t, CUdriverProcAddressQueryResult* status) {
  static const std::map<std::string, void*> table = {
#define FAKE(name, fn) {name, reinterpret_cast<void*>(&fn)}
      FAKE("cuInit", cuInit), FAKE("cuDriverGetVersion", cuDriverGetVersion), FAKE("cuGetErrorName", cuGetErrorName),
      FAKE("cuGetErrorString", cuGetErrorString), FAKE("cuDeviceGetCount", cuDeviceGetCount),
      FAKE("cuDeviceGet", cuDeviceGet), FAKE("cuDeviceGetName", cuDeviceGetName), FAKE("cuDeviceGetUuid", cuDeviceGetUuid_v2),
      FAKE("cuDeviceGetAttribute", cuDeviceGetAttribute), FAKE("cuDeviceTotalMem", cuDeviceTotalMem_v2),
      FAKE("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain),
      FAKE("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2), FAKE("cuCtxSetCurrent", cuCtxSetCurrent),
      FAKE("cuCtxSynchronize", cuCtxSynchronize), FAKE("cuMemGetInfo", cuMemGetInfo_v2),
      FAKE("cuMemAlloc", cuMemAlloc_v2), FAKE("cuMemFree", cuMemFree_v2), FAKE("cuMemHostAlloc", cuMemHostAlloc),
      FAKE("cuMemFreeHost", cuMemFreeHost), FAKE("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2),
      FAKE("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2), FAKE("cuMemcpyDtoDAsync", cuMemcpyDtoDAsync_v2),
      FAKE("cuMemsetD8Async", cuMemsetD8Async), FAKE("cuStreamCreate", cuStreamCreate),
      FAKE("cuStreamDestroy", cuStreamDestroy_v2), FAKE("cuStreamSynchronize", cuStreamSynchronize),
      FAKE("cuStreamWaitEvent", cuStreamWaitEvent), FAKE("cuStreamQuery", cuStreamQuery),
      FAKE("cuEventCreate", cuEventCreate), FAKE("cuEventRecord", cuEventRecord),
      FAKE("cuEventSynchronize", cuEventSynchronize), FAKE("cuEventQuery", cuEventQuery),
      FAKE("cuEventElapsedTime", cuEventElapsedTime), FAKE("cuEventDestroy", cuEventDestroy_v2),
      FAKE("cuModuleLoadData", cuModuleLoadData), FAKE("cuModuleUnload", cuModuleUnload),
      FAKE("cuModuleGetFunction", cuModuleGetFunction), FAKE("cuFuncGetAttribute", cuFuncGetAttribute),
      FAKE("cuFuncSetAttribute", cuFuncSetAttribute), FAKE("cuLaunchKernel", cuLaunchKernel),
#undef FAKE
  };
  auto it = table.find(symbol);
  if (it == table.end()) {
    *pfn = nullptr;
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = it->second;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}
// NOLINTEND(readability-identifier-naming)
}
