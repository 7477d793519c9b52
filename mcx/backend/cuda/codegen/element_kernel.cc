#include "mcx/backend/cuda/codegen/element_kernel.h"

#include <cstdlib>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "llvm/IR/LLVMContext.h"
#include "mcx/backend/cuda/codegen/libdevice_math_calls.h"
#include "mcx/backend/cuda/codegen/nvptx_compiler.h"
#include "mcx/core/error.h"
#include "mcx/kernelgen/element_emitter.h"

namespace mcx::cuda::codegen {
namespace {

using kernelgen::ElementEmitter;

int64_t element_count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

absl::Status check_spec(const ElementKernelSpec& spec) {
  const size_t rank = spec.dims.size();
  for (size_t k = 0; k < spec.leaves.size(); ++k) {
    if (spec.leaves[k].strides.size() != rank) {
      return absl::InvalidArgumentError(absl::StrCat("element kernel leaf ", k, " has ", spec.leaves[k].strides.size(),
                                                     " strides; expected one per dim (", rank, ")"));
    }
  }
  int slots = static_cast<int>(spec.leaves.size());
  for (size_t i = 0; i < spec.nodes.size(); ++i, ++slots) {
    for (int a : spec.nodes[i].args) {
      if (a < 0 || a >= slots) {
        return absl::InvalidArgumentError(absl::StrCat("element kernel node ", i, " reads slot ", a, "; expected a slot below ", slots));
      }
    }
  }
  if (spec.outputs.empty()) return absl::InvalidArgumentError("element kernel has no outputs");
  for (int o : spec.outputs) {
    if (o < 0 || o >= static_cast<int>(spec.nodes.size())) {
      return absl::InvalidArgumentError(absl::StrCat("element kernel output ", o, " is not a node (", spec.nodes.size(), " nodes)"));
    }
  }
  return absl::OkStatus();
}

class ElementKernelEmitter {
 public:
  ElementKernelEmitter(const ElementKernelSpec& spec, llvm::LLVMContext& ctx, llvm::Module& m)
      : spec_(spec), m_(m), e_(ctx, m, math_), b_(e_.builder()) {
    int64_t extent = element_count(spec.dims);
    for (const ElementKernelLeaf& leaf : spec.leaves) {  // the farthest element a leaf reads, plus one
      int64_t far = leaf.offset;
      for (size_t d = 0; d < spec.dims.size(); ++d) far += (spec.dims[d] - 1) * std::abs(leaf.strides[d]);
      extent = std::max(extent, far + 1);
    }
    wide_ = extent > std::numeric_limits<int32_t>::max();
    index_ty_ = wide_ ? b_.getInt64Ty() : b_.getInt32Ty();
  }

  absl::Status emit(const std::string& name) {
    llvm::Type* ptr = b_.getPtrTy();
    std::vector<llvm::Type*> params(spec_.leaves.size() + spec_.outputs.size(), ptr);
    params.push_back(b_.getInt64Ty());
    llvm::Function* f = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), params, false),
                                               llvm::Function::ExternalLinkage, name, m_);
    f->setDoesNotThrow();
    for (size_t k = 0; k + 1 < params.size(); ++k) {
      f->getArg(k)->addAttr(llvm::Attribute::NoAlias);  // an output over a leaf is read before written, per element
    }
    // A kernel entry point (LLVM 19 reads kernels from nvvm.annotations).
    llvm::LLVMContext& ctx = m_.getContext();
    llvm::Metadata* kernel_md[] = {llvm::ValueAsMetadata::get(f), llvm::MDString::get(ctx, "kernel"),
                                   llvm::ValueAsMetadata::get(b_.getInt32(1))};
    m_.getOrInsertNamedMetadata("nvvm.annotations")->addOperand(llvm::MDNode::get(ctx, kernel_md));

    llvm::BasicBlock* entry = llvm::BasicBlock::Create(ctx, "entry", f);
    llvm::BasicBlock* loop = llvm::BasicBlock::Create(ctx, "loop", f);
    llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx, "exit", f);
    b_.SetInsertPoint(entry);
    auto sreg = [&](llvm::Intrinsic::ID id) { return b_.CreateZExt(b_.CreateIntrinsic(id, {}, {}), index_ty_); };
    llvm::Value* tid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
    llvm::Value* ntid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x);
    llvm::Value* ctaid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
    llvm::Value* nctaid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
    llvm::Value* first = b_.CreateAdd(b_.CreateMul(ctaid, ntid, "", true, true), tid, "", true, true);
    llvm::Value* step = b_.CreateMul(nctaid, ntid, "", true, true);
    llvm::Value* n = b_.CreateTrunc(f->getArg(params.size() - 1), index_ty_);
    b_.CreateCondBr(b_.CreateICmpULT(first, n), loop, exit);

    b_.SetInsertPoint(loop);
    llvm::PHINode* i = b_.CreatePHI(index_ty_, 2, "i");
    i->addIncoming(first, entry);
    MCX_RETURN_IF_ERROR(body(f, i));
    llvm::Value* next = b_.CreateAdd(i, step, "next", /*HasNUW=*/true);
    i->addIncoming(next, b_.GetInsertBlock());
    b_.CreateCondBr(b_.CreateICmpULT(next, n), loop, exit);
    b_.SetInsertPoint(exit);
    b_.CreateRetVoid();
    return absl::OkStatus();
  }

 private:
  // Element i of the group: every leaf read, every node computed, the outputs stored.
  absl::Status body(llvm::Function* f, llvm::Value* i) {
    const std::vector<int64_t> contiguous = contiguous_strides(spec_.dims);
    std::vector<llvm::Value*> coords;  // i's coordinates, made once when some leaf needs them
    std::vector<llvm::Value*> slots;
    std::vector<DType> slot_dtypes;
    for (size_t k = 0; k < spec_.leaves.size(); ++k) {
      const ElementKernelLeaf& leaf = spec_.leaves[k];
      llvm::Value* at = i;
      if (leaf.strides != contiguous || leaf.offset != 0) {
        // offset + sum of coordinate * stride, wrapping (a negative stride is its two's complement).
        if (coords.empty()) coords = coordinates(i);
        at = llvm::ConstantInt::get(index_ty_, static_cast<uint64_t>(leaf.offset), /*IsSigned=*/true);
        for (size_t d = 0; d < spec_.dims.size(); ++d) {
          if (leaf.strides[d] == 0) continue;
          llvm::Value* stride = llvm::ConstantInt::get(index_ty_, static_cast<uint64_t>(leaf.strides[d]), true);
          at = b_.CreateAdd(at, b_.CreateMul(coords[d], stride));
        }
      }
      slots.push_back(e_.load_elem(f->getArg(k), leaf.dtype, widen_index(at)));
      slot_dtypes.push_back(leaf.dtype);
    }
    MCX_ASSIGN_OR_RETURN(std::vector<llvm::Value*> values, e_.emit_nodes(spec_.nodes, std::move(slots), slot_dtypes));
    const size_t num_leaves = spec_.leaves.size();
    for (size_t j = 0; j < spec_.outputs.size(); ++j) {
      const int node = spec_.outputs[j];
      e_.store_elem(f->getArg(num_leaves + j), spec_.nodes[node].dtype, widen_index(i), values[num_leaves + node]);
    }
    return absl::OkStatus();
  }

  // The row-major coordinates of element i over dims (constant divisors: the optimiser turns them into
  // multiplications).
  std::vector<llvm::Value*> coordinates(llvm::Value* i) {
    std::vector<llvm::Value*> c(spec_.dims.size());
    llvm::Value* rest = i;
    for (size_t d = spec_.dims.size(); d-- > 0;) {
      llvm::Value* extent = llvm::ConstantInt::get(index_ty_, spec_.dims[d]);
      c[d] = d == 0 ? rest : b_.CreateURem(rest, extent);
      if (d > 0) rest = b_.CreateUDiv(rest, extent);
    }
    return c;
  }

  llvm::Value* widen_index(llvm::Value* v) { return wide_ ? v : b_.CreateZExt(v, b_.getInt64Ty()); }

  const ElementKernelSpec& spec_;
  llvm::Module& m_;
  const LibdeviceMathCalls math_;
  ElementEmitter e_;
  llvm::IRBuilder<>& b_;
  bool wide_ = false;
  llvm::Type* index_ty_ = nullptr;
};

}  // namespace

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size());
  int64_t stride = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    s[d] = stride;
    stride *= dims[d];
  }
  return s;
}

absl::StatusOr<PtxKernel> generate_element_kernel(const ElementKernelSpec& spec, int arch, const std::string& name) {
  MCX_RETURN_IF_ERROR(check_spec(spec));
  llvm::LLVMContext ctx;
  auto m = std::make_unique<llvm::Module>(name, ctx);
  ElementKernelEmitter emitter(spec, ctx, *m);
  MCX_RETURN_IF_ERROR(emitter.emit(name));
  MCX_ASSIGN_OR_RETURN(std::string ptx, module_to_ptx(*m, arch));
  return PtxKernel{name, std::move(ptx), arch};
}

}  // namespace mcx::cuda::codegen
