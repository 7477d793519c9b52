// LLVM's -O3 module pipeline for a target, as every platform's code generator runs it over its kernels: the
// target's own passes registered through its TargetMachine (NVVM reflection on the GPU), the target's library
// info from its triple. Includes LLVM headers: private to the code generators. Thread-safe for distinct
// modules.
#pragma once

#include "llvm/IR/Module.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Target/TargetMachine.h"

namespace mcx::kernelgen {

void optimize_o3(llvm::Module& m, llvm::TargetMachine& tm, const llvm::PipelineTuningOptions& tuning = {});

}  // namespace mcx::kernelgen
