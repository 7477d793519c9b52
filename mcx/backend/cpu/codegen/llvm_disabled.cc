// Stand-ins for llvm_compiler.cc in a build without LLVM (MCX_WITH_LLVM=OFF or llvm-19-dev missing):
// every group runs on the interpreter.
#include "mcx/backend/cpu/codegen/llvm_compiler.h"

namespace mcx::cpu::codegen {

absl::StatusOr<FusedKernelFn> llvm_compile_fused(const FusedGroup&, const std::string&) {
  return absl::UnimplementedError("[codegen] this build has no LLVM code generator (MCX_WITH_LLVM=OFF)");
}

std::string llvm_target_description() { return "none"; }

}  // namespace mcx::cpu::codegen
