// IR emission for fused element-wise groups: one function with one loop over the elements, each iteration
// computing every node of the group (element_emitter.h has the per-node rules).
#include "mcx/backend/cpu/codegen/fused_emitter.h"

#include "mcx/backend/cpu/codegen/cpu_math_calls.h"
#include "mcx/kernelgen/element_emitter.h"
#include "mcx/core/error.h"

namespace mcx::cpu::codegen {

using kernelgen::ElementEmitter;
namespace {

absl::Status emit_fused(ElementEmitter& e, llvm::Module& m, const FusedGroup& g, const std::string& symbol) {
  llvm::IRBuilder<>& b = e.builder();
  llvm::Type* ptr = b.getPtrTy();
  llvm::FunctionType* fty = llvm::FunctionType::get(b.getVoidTy(), {ptr, ptr, b.getInt64Ty()}, false);
  llvm::Function* f = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, symbol, m);
  f->setDoesNotThrow();
  llvm::Argument* leaves_arg = f->getArg(0);
  llvm::Argument* outs_arg = f->getArg(1);
  llvm::Argument* n = f->getArg(2);
  leaves_arg->addAttr(llvm::Attribute::NoAlias);
  outs_arg->addAttr(llvm::Attribute::NoAlias);

  b.SetInsertPoint(llvm::BasicBlock::Create(e.context(), "entry", f));
  const int num_leaves = static_cast<int>(g.leaf_dtypes.size());
  std::vector<llvm::Value*> leaf_ptr, out_ptr;
  for (int k = 0; k < num_leaves; ++k) {
    leaf_ptr.push_back(b.CreateLoad(ptr, b.CreateConstInBoundsGEP1_64(ptr, leaves_arg, k)));
  }
  for (size_t j = 0; j < g.outputs.size(); ++j) {
    out_ptr.push_back(b.CreateLoad(ptr, b.CreateConstInBoundsGEP1_64(ptr, outs_arg, j)));
  }
  MCX_RETURN_IF_ERROR(e.counted_loop(f, n, /*parallel=*/true, [&](llvm::Value* i) -> absl::Status {
    // Every leaf is read before any output is written: an output may be the storage of a leaf.
    std::vector<llvm::Value*> leaves;
    for (int k = 0; k < num_leaves; ++k) leaves.push_back(e.load_elem(leaf_ptr[k], g.leaf_dtypes[k], i));
    MCX_ASSIGN_OR_RETURN(std::vector<llvm::Value*> slot, e.emit_nodes(g.nodes, std::move(leaves), g.leaf_dtypes));
    for (size_t j = 0; j < g.outputs.size(); ++j) {
      const int s = num_leaves + g.outputs[j];
      e.store_elem(out_ptr[j], g.nodes[g.outputs[j]].dtype, i, slot[s]);
    }
    return absl::OkStatus();
  }));
  b.CreateRetVoid();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<llvm::Module>> emit_fused_module(const FusedGroup& g, const std::string& symbol,
                                                                llvm::LLVMContext& ctx,
                                                                const VectorVariants& variants) {
  auto m = std::make_unique<llvm::Module>(symbol, ctx);
  const CpuMathCalls math(variants);
  ElementEmitter e(ctx, *m, math);
  MCX_RETURN_IF_ERROR(emit_fused(e, *m, g, symbol));
  return m;
}

}  // namespace mcx::cpu::codegen
