#include "mcx/backend/cuda/codegen/nvptx_compiler.h"

#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Linker/Linker.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Triple.h"
#include "llvm/Transforms/IPO/Internalize.h"
#include "mcx/backend/cuda/codegen/libdevice.h"
#include "mcx/core/error.h"
#include "mcx/kernelgen/optimize.h"

namespace mcx::cuda::codegen {
namespace {

constexpr const char* kTriple = "nvptx64-nvidia-cuda";

absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> target_machine(int arch) {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(kTriple, error);
  if (target == nullptr) {
    return absl::InternalError(absl::StrCat("LLVM has no NVPTX target (", error, "): mcx's LLVM was built without it"));
  }
  llvm::TargetOptions options;  // IEEE arithmetic: no fast-math, FMA contraction off (as the CPU's code)
  options.AllowFPOpFusion = llvm::FPOpFusion::Strict;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      kTriple, absl::StrCat("sm_", arch), kPtxFeatures, options, std::nullopt, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  if (tm == nullptr) return absl::InternalError(absl::StrCat("LLVM cannot make an NVPTX target for sm_", arch));
  return tm;
}

// Links the libdevice functions m calls into m and makes them internal, so the optimiser inlines them and drops
// the rest.
absl::Status link_libdevice(llvm::Module& m) {
  const std::string_view bc = libdevice_bitcode();
  llvm::MemoryBufferRef buffer(llvm::StringRef(bc.data(), bc.size()), "libdevice.10.bc");
  llvm::Expected<std::unique_ptr<llvm::Module>> lib = llvm::parseBitcodeFile(buffer, m.getContext());
  if (!lib) return absl::InternalError(absl::StrCat("cannot read libdevice: ", llvm::toString(lib.takeError())));
  (*lib)->setTargetTriple(m.getTargetTriple());
  (*lib)->setDataLayout(m.getDataLayout());
  const bool failed = llvm::Linker::linkModules(
      m, std::move(*lib), llvm::Linker::Flags::LinkOnlyNeeded,
      [](llvm::Module& linked, const llvm::StringSet<>& from_libdevice) {
        llvm::internalizeModule(linked, [&](const llvm::GlobalValue& gv) {
          return !gv.hasName() || !from_libdevice.contains(gv.getName());
        });
      });
  if (failed) return absl::InternalError("linking libdevice into the kernel module failed");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> module_to_ptx(llvm::Module& m, int arch) {
  MCX_ASSIGN_OR_RETURN(std::unique_ptr<llvm::TargetMachine> tm, target_machine(arch));
  m.setTargetTriple(kTriple);
  m.setDataLayout(tm->createDataLayout());
  // libdevice asks __nvvm_reflect("__CUDA_FTZ"): 0 keeps subnormals, as the CPU does.
  m.addModuleFlag(llvm::Module::Override, "nvvm-reflect-ftz", uint32_t{0});
  std::string verify_errors;
  llvm::raw_string_ostream verify_os(verify_errors);
  if (llvm::verifyModule(m, &verify_os)) {
    return absl::InvalidArgumentError(absl::StrCat("generated GPU kernel module does not verify: ", verify_errors));
  }
  MCX_RETURN_IF_ERROR(link_libdevice(m));

  kernelgen::optimize_o3(m, *tm);

  std::string ptx;
  {
    llvm::raw_string_ostream os(ptx);
    llvm::buffer_ostream bos(os);
    llvm::legacy::PassManager codegen;
    if (tm->addPassesToEmitFile(codegen, bos, nullptr, llvm::CodeGenFileType::AssemblyFile)) {
      return absl::InternalError("the NVPTX target cannot emit PTX");
    }
    codegen.run(m);
  }
  return ptx;
}

}  // namespace mcx::cuda::codegen
