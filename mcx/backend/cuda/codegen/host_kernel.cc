// generate_host_kernel (kernel_source.h): the kernel emitted for the host target, verified, optimised with the
// -O3 pipeline for a generic x86-64 and written as bitcode.
#include <memory>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "mcx/backend/cuda/codegen/kernel_emitters.h"
#include "mcx/core/error.h"
#include "mcx/kernelgen/optimize.h"

namespace mcx::cuda::codegen {
namespace {

constexpr const char* kHostTriple = "x86_64-unknown-linux-gnu";

// The host's C library functions ("expf", "exp", ...); the inverse error function, which C lacks, through
// mcx_emulated_erfinv[f], which the runner of emulated kernels defines.
class HostMathCalls final : public kernelgen::MathCalls {
 public:
  llvm::Value* call(llvm::IRBuilder<>& b, llvm::Module& m, kernelgen::MathFn fn,
                    llvm::ArrayRef<llvm::Value*> args) const override {
    const bool is_double = args.front()->getType()->isDoubleTy();
    const std::string stem =
        fn == kernelgen::MathFn::kErfInv ? "mcx_emulated_erfinv" : std::string(kernelgen::math_fn_name(fn));
    return kernelgen::call_pure_function(b, m, absl::StrCat(stem, is_double ? "" : "f"), args);
  }
};

absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> host_target_machine() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86Target();
    LLVMInitializeX86TargetMC();
  });
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(kHostTriple, error);
  if (target == nullptr) return absl::InternalError(absl::StrCat("LLVM has no x86-64 target (", error, ")"));
  llvm::TargetOptions options;  // IEEE arithmetic, no contraction: as the GPU's code
  options.AllowFPOpFusion = llvm::FPOpFusion::Strict;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(kHostTriple, "x86-64", "", options, std::nullopt,
                                                                      std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (tm == nullptr) return absl::InternalError("LLVM cannot make an x86-64 target");
  return tm;
}

}  // namespace

absl::StatusOr<std::string> generate_host_kernel(const KernelSource& source, const std::string& name) {
  MCX_ASSIGN_OR_RETURN(std::unique_ptr<llvm::TargetMachine> tm, host_target_machine());
  llvm::LLVMContext ctx;
  llvm::Module m(name, ctx);
  m.setTargetTriple(kHostTriple);
  m.setDataLayout(tm->createDataLayout());
  const HostMathCalls math;
  MCX_RETURN_IF_ERROR(emit_kernel(source, name, m, KernelTarget{false, &math}));
  std::string verify_errors;
  llvm::raw_string_ostream verify_os(verify_errors);
  if (llvm::verifyModule(m, &verify_os)) {
    return absl::InvalidArgumentError(absl::StrCat("generated host kernel module does not verify: ", verify_errors));
  }
  kernelgen::optimize_o3(m, *tm);
  std::string bitcode;
  llvm::raw_string_ostream os(bitcode);
  llvm::WriteBitcodeToFile(m, os);
  os.flush();
  return bitcode;
}

}  // namespace mcx::cuda::codegen
