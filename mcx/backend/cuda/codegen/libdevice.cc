#include "mcx/backend/cuda/codegen/libdevice.h"

#ifndef MCX_CUDA_LIBDEVICE_PATH
#error "MCX_CUDA_LIBDEVICE_PATH (the toolkit's nvvm/libdevice/libdevice.10.bc) is set by mcx/CMakeLists.txt"
#endif

// The file's bytes in read-only data, between two hidden symbols.
asm(".pushsection .rodata.mcx_cuda_libdevice,\"a\"\n"
    ".balign 16\n"
    ".globl mcx_cuda_libdevice_begin\n"
    ".hidden mcx_cuda_libdevice_begin\n"
    "mcx_cuda_libdevice_begin:\n"
    ".incbin \"" MCX_CUDA_LIBDEVICE_PATH "\"\n"
    ".globl mcx_cuda_libdevice_end\n"
    ".hidden mcx_cuda_libdevice_end\n"
    "mcx_cuda_libdevice_end:\n"
    ".popsection\n");

extern "C" {
// NOLINTBEGIN(readability-identifier-naming): symbols defined by the assembly above.
__attribute__((visibility("hidden"))) extern const char mcx_cuda_libdevice_begin[];
__attribute__((visibility("hidden"))) extern const char mcx_cuda_libdevice_end[];
// NOLINTEND(readability-identifier-naming)
}

namespace mcx::cuda::codegen {

std::string_view libdevice_bitcode() {
  return {mcx_cuda_libdevice_begin, static_cast<size_t>(mcx_cuda_libdevice_end - mcx_cuda_libdevice_begin)};
}

}  // namespace mcx::cuda::codegen
