// The shape every generated GPU kernel shares: a kernel entry point (annotated for the NVPTX target) whose last
// parameter is an i64 count n, and a grid-stride loop in which each thread handles i = global thread index,
// i + total threads, ... < n, so any launch grid covers the work. Includes LLVM headers: private to
// mcx/backend/cuda/codegen.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Module.h"
#include "mcx/backend/cuda/codegen/ptx_kernel.h"

namespace mcx::cuda::codegen {

// Kernel `name` for sm_<arch>: emit() fills a fresh module with it, which is then compiled to PTX
// (nvptx_compiler.h).
absl::StatusOr<PtxKernel> generate_kernel(const std::string& name, int arch,
                                          const std::function<absl::Status(llvm::LLVMContext&, llvm::Module&)>& emit);

// Declares kernel `name` in m with `params` (the last must be i64: n) and emits its body: body(f, i) for each
// index i of type index_ty (i32 or i64; n is truncated to it). Leaves b's insertion point at the kernel's end.
absl::Status emit_grid_stride_kernel(llvm::Module& m, llvm::IRBuilder<>& b, const std::string& name,
                                     const std::vector<llvm::Type*>& params, llvm::Type* index_ty,
                                     const std::function<absl::Status(llvm::Function*, llvm::Value*)>& body);

// The row-major coordinates of linear index i over dims (constant divisors), in i's type.
std::vector<llvm::Value*> row_major_coordinates(llvm::IRBuilder<>& b, llvm::Value* i, const std::vector<int64_t>& dims);

}  // namespace mcx::cuda::codegen
