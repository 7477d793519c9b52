// The LLVM side of the code generator, behind a header without LLVM types, so that only
// llvm_compiler.cc and fused_emitter.cc include LLVM headers (each such file costs ~10 s and ~0.8 GB to
// compile). Built without LLVM, llvm_disabled.cc provides these functions (every compile is Unimplemented).
// Private to mcx/backend/cpu/codegen.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "mcx/backend/cpu/codegen/fused_kernel.h"

namespace mcx::cpu::codegen {

// Emits g as a function named `symbol`, optimises it for the host and links it into the process-wide JIT.
// The caller guarantees unsupported_reason(g) is empty and that each symbol is compiled at most once.
// Thread-safe (concurrent compiles each use their own LLVM context).
absl::StatusOr<FusedKernelFn> llvm_compile_fused(const FusedGroup& g, const std::string& symbol);

// See target_description() in fused_kernel.h.
std::string llvm_target_description();

}  // namespace mcx::cpu::codegen
