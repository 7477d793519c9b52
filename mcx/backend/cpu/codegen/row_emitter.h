// RowProgram -> LLVM IR (one function per program; the calling convention is RowKernelFn in row_program.h).
// Includes LLVM headers: included only by llvm_compiler.cc. Private to mcx/backend/cpu/codegen.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "mcx/backend/cpu/codegen/fused_emitter.h"
#include "mcx/backend/cpu/row_program.h"

namespace mcx::cpu::codegen {

// Emits `void symbol(ptr values, ptr row_strides, i64 rows, i64 cols)` into a new module of ctx.
// Unimplemented for a node the element rules do not cover (the caller then runs the region step by step).
absl::StatusOr<std::unique_ptr<llvm::Module>> emit_row_module(const RowProgram& rp, const std::string& symbol,
                                                              llvm::LLVMContext& ctx, const VectorVariants& variants);

}  // namespace mcx::cpu::codegen
