#include "mcx/backend/cuda/codegen/kernel_skeleton.h"

#include <memory>

#include "llvm/IR/IntrinsicsNVPTX.h"
#include "llvm/IR/LLVMContext.h"
#include "mcx/backend/cuda/codegen/nvptx_compiler.h"
#include "mcx/core/error.h"

namespace mcx::cuda::codegen {

absl::StatusOr<PtxKernel> generate_kernel(const std::string& name, int arch,
                                          const std::function<absl::Status(llvm::LLVMContext&, llvm::Module&)>& emit) {
  llvm::LLVMContext ctx;
  auto m = std::make_unique<llvm::Module>(name, ctx);
  MCX_RETURN_IF_ERROR(emit(ctx, *m));
  MCX_ASSIGN_OR_RETURN(std::string ptx, module_to_ptx(*m, arch));
  return PtxKernel{name, std::move(ptx), arch};
}

absl::Status emit_grid_stride_kernel(llvm::Module& m, llvm::IRBuilder<>& b, const std::string& name,
                                     const std::vector<llvm::Type*>& params, llvm::Type* index_ty,
                                     const std::function<absl::Status(llvm::Function*, llvm::Value*)>& body) {
  llvm::LLVMContext& ctx = m.getContext();
  llvm::Function* f = llvm::Function::Create(llvm::FunctionType::get(b.getVoidTy(), params, false),
                                             llvm::Function::ExternalLinkage, name, m);
  f->setDoesNotThrow();
  // A kernel entry point (LLVM 19 reads kernels from nvvm.annotations).
  llvm::Metadata* kernel_md[] = {llvm::ValueAsMetadata::get(f), llvm::MDString::get(ctx, "kernel"),
                                 llvm::ValueAsMetadata::get(b.getInt32(1))};
  m.getOrInsertNamedMetadata("nvvm.annotations")->addOperand(llvm::MDNode::get(ctx, kernel_md));

  llvm::BasicBlock* entry = llvm::BasicBlock::Create(ctx, "entry", f);
  llvm::BasicBlock* loop = llvm::BasicBlock::Create(ctx, "loop", f);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx, "exit", f);
  b.SetInsertPoint(entry);
  auto sreg = [&](llvm::Intrinsic::ID id) { return b.CreateZExt(b.CreateIntrinsic(id, {}, {}), index_ty); };
  llvm::Value* tid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
  llvm::Value* ntid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x);
  llvm::Value* ctaid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
  llvm::Value* nctaid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
  llvm::Value* first = b.CreateAdd(b.CreateMul(ctaid, ntid, "", true, true), tid, "", true, true);
  llvm::Value* step = b.CreateMul(nctaid, ntid, "", true, true);
  llvm::Value* n = b.CreateTrunc(f->getArg(params.size() - 1), index_ty);
  b.CreateCondBr(b.CreateICmpULT(first, n), loop, exit);

  b.SetInsertPoint(loop);
  llvm::PHINode* i = b.CreatePHI(index_ty, 2, "i");
  i->addIncoming(first, entry);
  MCX_RETURN_IF_ERROR(body(f, i));
  llvm::Value* next = b.CreateAdd(i, step, "next", /*HasNUW=*/true);
  i->addIncoming(next, b.GetInsertBlock());
  b.CreateCondBr(b.CreateICmpULT(next, n), loop, exit);
  b.SetInsertPoint(exit);
  b.CreateRetVoid();
  return absl::OkStatus();
}

std::vector<llvm::Value*> row_major_coordinates(llvm::IRBuilder<>& b, llvm::Value* i, const std::vector<int64_t>& dims) {
  std::vector<llvm::Value*> c(dims.size());
  llvm::Type* t = i->getType();
  llvm::Value* rest = i;
  for (size_t d = dims.size(); d-- > 0;) {
    llvm::Value* extent = llvm::ConstantInt::get(t, dims[d]);
    c[d] = d == 0 ? rest : b.CreateURem(rest, extent);
    if (d > 0) rest = b.CreateUDiv(rest, extent);
  }
  return c;
}

}  // namespace mcx::cuda::codegen
