// The LLVM side of the code generator, behind a header without LLVM types, so that only
// llvm_compiler.cc and the emitters include LLVM headers (each such file costs ~10 s and ~0.8 GB to
// compile). Built without LLVM, llvm_disabled.cc provides these functions (every compile is Unimplemented).
// Private to mcx/backend/cpu/codegen.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "mcx/backend/cpu/codegen/kernel_registry.h"

namespace mcx::cpu::codegen {

// Emits src as a function named `symbol`, optimises it for the host and compiles it to a relocatable object
// file (the kernel's serialised form: its bytes may be kept and loaded by another process on the same
// target). The caller guarantees that the generator takes src (unsupported_reason, row_unsupported_reason).
// Thread-safe (each compile uses its own LLVM context and TargetMachine).
absl::StatusOr<std::string> llvm_compile_object(const KernelSource& src, const std::string& symbol);

// Links an object made by llvm_compile_object (in this or another process with the same
// target_description()) into the process-wide JIT and returns its kernel. Each symbol may be loaded at
// most once per process (the caller's registry ensures it). Errors: Internal with LLVM's message (a
// damaged object, a missing symbol).
absl::StatusOr<void*> llvm_load_object(std::string_view object, const std::string& symbol);

// See target_description() in fused_kernel.h.
std::string llvm_target_description();

}  // namespace mcx::cpu::codegen
