// The shape every generated GPU kernel shares: a kernel entry point (annotated for the NVPTX target) whose last
// parameter is an i64 count n, and a grid-stride loop in which each thread handles i = global thread index,
// i + total threads, ... < n, so any launch grid covers the work; and the target a kernel is generated for (the
// GPU, or the host emulating it: host_kernel.h). Includes LLVM headers: private to mcx/backend/cuda/codegen.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Module.h"
#include "mcx/backend/cuda/codegen/ptx_kernel.h"
#include "mcx/kernelgen/math_calls.h"

namespace mcx::cuda::codegen {

// Where a kernel is generated for. The GPU: the thread's position read from NVVM's special registers, math
// through libdevice. The host, emulating the GPU to test the kernels' logic without one: the kernel runs as one
// thread (its grid-stride loop covers all n), math through the host's C library, and the entry point is
// `void name(void** params)`, taking its parameters as cuLaunchKernel does (an array of pointers to each).
struct KernelTarget {
  bool gpu = true;
  const kernelgen::MathCalls* math = nullptr;  // never null
};

// Fills m (whose context is m.getContext()) with one kernel named `name` for the target.
using KernelEmitter = std::function<absl::Status(llvm::Module& m, const KernelTarget& target)>;

// Kernel `name` for sm_<arch>: emit() fills a fresh module with it, which is then compiled to PTX
// (nvptx_compiler.h).
absl::StatusOr<PtxKernel> generate_kernel(const std::string& name, int arch, const KernelEmitter& emit);

// Declares kernel `name` in m with `params` (the last must be i64: n) and emits its body: body(f, i) for each
// index i of type index_ty (i32 or i64; n is truncated to it). Leaves b's insertion point at the kernel's end
// (on the host, inside the kernel: the entry point taking the parameter array is added around it).
absl::Status emit_grid_stride_kernel(llvm::Module& m, llvm::IRBuilder<>& b, const KernelTarget& target,
                                     const std::string& name, const std::vector<llvm::Type*>& params,
                                     llvm::Type* index_ty,
                                     const std::function<absl::Status(llvm::Function*, llvm::Value*)>& body);

// The row-major coordinates of linear index i over dims (constant divisors), in i's type.
std::vector<llvm::Value*> row_major_coordinates(llvm::IRBuilder<>& b, llvm::Value* i, const std::vector<int64_t>& dims);

}  // namespace mcx::cuda::codegen
