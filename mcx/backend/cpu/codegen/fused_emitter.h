// FusedGroup -> LLVM IR (one function per group; the calling convention is FusedKernelFn in
// fused_kernel.h). Includes LLVM headers: included only by llvm_compiler.cc. Private to
// mcx/backend/cpu/codegen.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "mcx/backend/cpu/fusion.h"

namespace mcx::cpu::codegen {

// A vector version of a math helper (math_helpers.h) that the loop vectoriser may call instead of the
// scalar helper: `symbol` takes and returns `width` lanes (libmvec's _ZGV<isa>N<width>v[v]_<name>).
struct VectorVariant {
  int width;
  std::string symbol;
};
using VectorVariants = std::map<std::string, std::vector<VectorVariant>, std::less<>>;  // by helper name

// Emits `void symbol(ptr leaves, ptr outs, i64 n)` into a new module of ctx. The element loop carries
// parallel-access metadata (every iteration touches only element i), so the vectoriser needs no runtime
// alias checks. No fast-math flags: arithmetic is IEEE and in the interpreter's order. Unimplemented for a
// node the emitter has no rule for (the caller falls back to the interpreter).
absl::StatusOr<std::unique_ptr<llvm::Module>> emit_fused_module(const FusedGroup& g, const std::string& symbol,
                                                                llvm::LLVMContext& ctx,
                                                                const VectorVariants& variants);

}  // namespace mcx::cpu::codegen
