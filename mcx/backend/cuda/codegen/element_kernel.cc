#include "mcx/backend/cuda/codegen/element_kernel.h"

#include <cstdlib>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "llvm/IR/LLVMContext.h"
#include "mcx/backend/cuda/codegen/kernel_emitters.h"
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
  if (!spec.out_strides.empty() && spec.out_strides.size() != rank) {
    return absl::InvalidArgumentError(absl::StrCat("element kernel has ", spec.out_strides.size(),
                                                   " output strides; expected one per dim (", rank, ")"));
  }
  for (int o : spec.outputs) {
    if (o < 0 || o >= static_cast<int>(spec.nodes.size())) {
      return absl::InvalidArgumentError(absl::StrCat("element kernel output ", o, " is not a node (", spec.nodes.size(), " nodes)"));
    }
  }
  return absl::OkStatus();
}

class ElementKernelEmitter {
 public:
  ElementKernelEmitter(const ElementKernelSpec& spec, llvm::Module& m, const KernelTarget& target)
      : spec_(spec), m_(m), target_(target), e_(m.getContext(), m, *target.math), b_(e_.builder()) {
    int64_t extent = element_count(spec.dims);
    for (const ElementKernelLeaf& leaf : spec.leaves) {  // the farthest element a leaf reads, plus one
      int64_t far = leaf.offset;
      for (size_t d = 0; d < spec.dims.size(); ++d) far += (spec.dims[d] - 1) * std::abs(leaf.strides[d]);
      extent = std::max(extent, far + 1);
    }
    if (!spec.out_strides.empty()) {
      int64_t far = spec.out_offset;
      for (size_t d = 0; d < spec.dims.size(); ++d) far += (spec.dims[d] - 1) * spec.out_strides[d];
      extent = std::max(extent, far + 1);
    }
    wide_ = extent > std::numeric_limits<int32_t>::max();
    index_ty_ = wide_ ? b_.getInt64Ty() : b_.getInt32Ty();
  }

  absl::Status emit(const std::string& name) {
    std::vector<llvm::Type*> params(spec_.leaves.size() + spec_.outputs.size(), b_.getPtrTy());
    params.push_back(b_.getInt64Ty());
    return emit_grid_stride_kernel(m_, b_, target_, name, params, index_ty_, [&](llvm::Function* f, llvm::Value* i) {
      // An output over a leaf is read before it is written, per element: the pointers do not alias otherwise.
      for (size_t k = 0; k + 1 < params.size(); ++k) f->getArg(k)->addAttr(llvm::Attribute::NoAlias);
      return body(f, i);
    });
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
        if (coords.empty()) coords = row_major_coordinates(b_, i, spec_.dims);
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
    llvm::Value* at = i;
    if (!spec_.out_strides.empty()) {
      if (coords.empty()) coords = row_major_coordinates(b_, i, spec_.dims);
      at = llvm::ConstantInt::get(index_ty_, static_cast<uint64_t>(spec_.out_offset));
      for (size_t d = 0; d < spec_.dims.size(); ++d) {
        at = b_.CreateAdd(at, b_.CreateMul(coords[d], llvm::ConstantInt::get(index_ty_, static_cast<uint64_t>(spec_.out_strides[d]))));
      }
    }
    for (size_t j = 0; j < spec_.outputs.size(); ++j) {
      const int node = spec_.outputs[j];
      e_.store_elem(f->getArg(num_leaves + j), spec_.nodes[node].dtype, widen_index(at), values[num_leaves + node]);
    }
    return absl::OkStatus();
  }

  llvm::Value* widen_index(llvm::Value* v) { return wide_ ? v : b_.CreateZExt(v, b_.getInt64Ty()); }

  const ElementKernelSpec& spec_;
  llvm::Module& m_;
  const KernelTarget& target_;
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

absl::Status emit_kernel(const ElementKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target) {
  MCX_RETURN_IF_ERROR(check_spec(spec));
  return ElementKernelEmitter(spec, m, target).emit(name);
}

}  // namespace mcx::cuda::codegen
