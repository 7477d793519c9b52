// Stand-ins for llvm_compiler.cc in a build without LLVM (MCX_WITH_LLVM=OFF or llvm-19-dev missing):
// every group runs on the interpreter.
#include "mcx/backend/cpu/codegen/llvm_compiler.h"

namespace mcx::cpu::codegen {

namespace {
absl::Status no_llvm() {
  return absl::UnimplementedError("[codegen] this build has no LLVM code generator (MCX_WITH_LLVM=OFF)");
}
}  // namespace

absl::StatusOr<std::string> llvm_compile_object(const KernelSource&, const std::string&) { return no_llvm(); }
absl::StatusOr<void*> llvm_load_object(std::string_view, const std::string&) { return no_llvm(); }

std::string llvm_target_description() { return "none"; }

}  // namespace mcx::cpu::codegen
