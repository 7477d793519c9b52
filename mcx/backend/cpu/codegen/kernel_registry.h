// The process-wide registry of generated kernels (fused_kernel.cc), for every kind of kernel source: one kernel
// per signature, looked up in the kernel store, shared between the processes of a job, or compiled, then
// linked into the JIT. compile_fused / load_fused (fused_kernel.h) and compile_rows / load_rows
// (row_kernel.h) are its two clients. Private to mcx/backend/cpu/codegen. Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include "absl/status/statusor.h"
#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/backend/cpu/row_program.h"

namespace mcx::cpu::codegen {

// What a kernel is generated from; the caller keeps it alive for the call.
using KernelSource = std::variant<const FusedGroup*, const RowProgram*>;

// Why the generator does not take a source, or "" when it does; asked once per signature.
using UnsupportedReason = std::function<std::string()>;

// The kernel of signature `sig` (a canonical description of src without its dims): already in this process,
// else from the store, a peer or compiled. The first time a signature is met, `unsupported` decides whether
// it is generated at all (if not: Unimplemented, remembered for the signature). Errors as compile_fused.
absl::StatusOr<std::shared_ptr<const GeneratedKernel>> compile_kernel(const KernelSource& src, const std::string& sig,
                                                                      const UnsupportedReason& unsupported);

// As compile_kernel, but linked from `object` (a serialised executable's) when not already in this process.
absl::StatusOr<std::shared_ptr<const GeneratedKernel>> load_kernel(const KernelSource& src, const std::string& sig,
                                                                   const UnsupportedReason& unsupported,
                                                                   std::string_view object);

}  // namespace mcx::cpu::codegen
