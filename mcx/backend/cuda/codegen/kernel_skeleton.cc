#include "mcx/backend/cuda/codegen/kernel_skeleton.h"

#include <memory>

#include "llvm/IR/IntrinsicsNVPTX.h"
#include "llvm/IR/LLVMContext.h"
#include "mcx/backend/cuda/codegen/libdevice_math_calls.h"
#include "mcx/backend/cuda/codegen/nvptx_compiler.h"
#include "mcx/core/error.h"

namespace mcx::cuda::codegen {

namespace {

// The host's entry point `name(void** params)`: loads each parameter through its pointer and calls kernel.
void emit_host_entry(llvm::Module& m, const std::string& name, llvm::Function* kernel) {
  llvm::LLVMContext& ctx = m.getContext();
  llvm::IRBuilder<> b(ctx);
  llvm::Function* entry = llvm::Function::Create(llvm::FunctionType::get(b.getVoidTy(), {b.getPtrTy()}, false),
                                                 llvm::Function::ExternalLinkage, name, m);
  b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", entry));
  std::vector<llvm::Value*> args;
  for (llvm::Argument& a : kernel->args()) {
    llvm::Value* slot = b.CreateConstInBoundsGEP1_64(b.getPtrTy(), entry->getArg(0), a.getArgNo());
    args.push_back(b.CreateLoad(a.getType(), b.CreateLoad(b.getPtrTy(), slot)));
  }
  b.CreateCall(kernel, args);
  b.CreateRetVoid();
}

}  // namespace

absl::StatusOr<PtxKernel> generate_kernel(const std::string& name, int arch, const KernelEmitter& emit) {
  llvm::LLVMContext ctx;
  auto m = std::make_unique<llvm::Module>(name, ctx);
  const LibdeviceMathCalls libdevice;
  MCX_RETURN_IF_ERROR(emit(*m, KernelTarget{true, &libdevice}));
  MCX_ASSIGN_OR_RETURN(std::string ptx, module_to_ptx(*m, arch));
  return PtxKernel{name, std::move(ptx), arch};
}

absl::Status emit_grid_stride_kernel(llvm::Module& m, llvm::IRBuilder<>& b, const KernelTarget& target,
                                     const std::string& name, const std::vector<llvm::Type*>& params,
                                     llvm::Type* index_ty,
                                     const std::function<absl::Status(llvm::Function*, llvm::Value*)>& body) {
  llvm::LLVMContext& ctx = m.getContext();
  llvm::Function* f = llvm::Function::Create(llvm::FunctionType::get(b.getVoidTy(), params, false),
                                             target.gpu ? llvm::Function::ExternalLinkage
                                                        : llvm::Function::InternalLinkage,
                                             target.gpu ? name : name + ".kernel", m);
  f->setDoesNotThrow();
  if (target.gpu) {
    // A kernel entry point (LLVM 19 reads kernels from nvvm.annotations).
    llvm::Metadata* kernel_md[] = {llvm::ValueAsMetadata::get(f), llvm::MDString::get(ctx, "kernel"),
                                   llvm::ValueAsMetadata::get(b.getInt32(1))};
    m.getOrInsertNamedMetadata("nvvm.annotations")->addOperand(llvm::MDNode::get(ctx, kernel_md));
  } else {
    emit_host_entry(m, name, f);
  }

  llvm::BasicBlock* entry = llvm::BasicBlock::Create(ctx, "entry", f);
  llvm::BasicBlock* loop = llvm::BasicBlock::Create(ctx, "loop", f);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx, "exit", f);
  b.SetInsertPoint(entry);
  // The thread's place in the grid; on the host, the one thread of a one-thread grid.
  auto sreg = [&](llvm::Intrinsic::ID id, uint64_t on_host) -> llvm::Value* {
    if (!target.gpu) return llvm::ConstantInt::get(index_ty, on_host);
    return b.CreateZExt(b.CreateIntrinsic(id, {}, {}), index_ty);
  };
  llvm::Value* tid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x, 0);
  llvm::Value* ntid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x, 1);
  llvm::Value* ctaid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x, 0);
  llvm::Value* nctaid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x, 1);
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
