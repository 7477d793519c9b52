#include "mcx/backend/cuda/codegen/reduce_kernel.h"

#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "llvm/IR/LLVMContext.h"
#include "mcx/backend/cuda/codegen/kernel_emitters.h"
#include "mcx/core/error.h"
#include "mcx/kernelgen/element_emitter.h"

namespace mcx::cuda::codegen {
namespace {

using ir::OpKind;

bool is_arg(OpKind k) { return k == OpKind::kArgMax || k == OpKind::kArgMin; }

absl::Status check_spec(const ReduceKernelSpec& spec) {
  if (spec.kind != OpKind::kReduceSum && spec.kind != OpKind::kReduceProd && spec.kind != OpKind::kReduceMax &&
      spec.kind != OpKind::kReduceMin && !is_arg(spec.kind)) {
    return absl::InvalidArgumentError(absl::StrCat("reduce kernel of ", std::string(ir::op_name(spec.kind)),
                                                   ": expected reduce_sum, reduce_prod, reduce_max, reduce_min, "
                                                   "argmax or argmin"));
  }
  if (is_arg(spec.kind) && spec.axes.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(ir::op_name(spec.kind)), " kernel over ",
                                                   spec.axes.size(), " axes; expected one"));
  }
  for (size_t k = 0; k < spec.axes.size(); ++k) {
    const int64_t a = spec.axes[k];
    if (a < 0 || a >= static_cast<int64_t>(spec.dims.size()) || (k > 0 && a <= spec.axes[k - 1])) {
      return absl::InvalidArgumentError(absl::StrCat("reduce kernel axes [", absl::StrJoin(spec.axes, ","),
                                                     "]: expected sorted unique axes of a rank-", spec.dims.size(),
                                                     " array"));
    }
  }
  return absl::OkStatus();
}

class ReduceKernelEmitter {
 public:
  ReduceKernelEmitter(const ReduceKernelSpec& spec, llvm::Module& m, const KernelTarget& target)
      : spec_(spec), m_(m), target_(target), e_(m.getContext(), m, *target.math), b_(e_.builder()) {
    const std::vector<int64_t> strides = contiguous_strides(spec.dims);
    std::vector<bool> reduced(spec.dims.size(), false);
    for (int64_t a : spec.axes) reduced[a] = true;
    for (size_t d = 0; d < spec.dims.size(); ++d) {
      (reduced[d] ? reduced_dims_ : kept_dims_).push_back(spec.dims[d]);
      (reduced[d] ? reduced_strides_ : kept_strides_).push_back(strides[d]);
    }
  }

  absl::Status emit(const std::string& name) {
    llvm::Type* i64 = b_.getInt64Ty();
    return emit_grid_stride_kernel(m_, b_, target_, name, {b_.getPtrTy(), b_.getPtrTy(), i64}, i64,
                                   [&](llvm::Function* f, llvm::Value* o) { return body(f, o); });
  }

 private:
  // Output element o: its reduced elements accumulated in order.
  absl::Status body(llvm::Function* f, llvm::Value* o) {
    llvm::Value* base = b_.getInt64(0);
    const std::vector<llvm::Value*> kept = row_major_coordinates(b_, o, kept_dims_);
    for (size_t k = 0; k < kept.size(); ++k) base = b_.CreateAdd(base, b_.CreateMul(kept[k], b_.getInt64(kept_strides_[k])));
    if (is_arg(spec_.kind)) return arg_body(f, o, base);
    llvm::Type* acc_ty = e_.compute_type(spec_.dtype);
    // The accumulator lives in a stack slot across the inner loop (the optimiser keeps it in a register).
    llvm::IRBuilder<> entry(&f->getEntryBlock(), f->getEntryBlock().begin());
    llvm::AllocaInst* acc = entry.CreateAlloca(acc_ty);
    b_.CreateStore(identity(acc_ty), acc);
    int64_t count = 1;
    for (int64_t d : reduced_dims_) count *= d;
    MCX_RETURN_IF_ERROR(e_.counted_loop(f, b_.getInt64(count), /*parallel=*/false, [&](llvm::Value* r) -> absl::Status {
      llvm::Value* at = base;
      const std::vector<llvm::Value*> rc = row_major_coordinates(b_, r, reduced_dims_);
      for (size_t j = 0; j < rc.size(); ++j) at = b_.CreateAdd(at, b_.CreateMul(rc[j], b_.getInt64(reduced_strides_[j])));
      llvm::Value* x = e_.load_elem(f->getArg(0), spec_.dtype, at);
      b_.CreateStore(apply(b_.CreateLoad(acc_ty, acc), x), acc);
      return absl::OkStatus();
    }));
    llvm::Value* result = b_.CreateLoad(acc_ty, acc);
    if (spec_.stored_as.has_value() && *spec_.stored_as != spec_.dtype) {
      MCX_ASSIGN_OR_RETURN(result, e_.convert(spec_.dtype, *spec_.stored_as, result));
    }
    e_.store_elem(f->getArg(1), spec_.stored_as.value_or(spec_.dtype), o, result);
    return absl::OkStatus();
  }

  // arg_max/arg_min: the best value and its index, element 0 first; a NaN, once best, is never replaced.
  absl::Status arg_body(llvm::Function* f, llvm::Value* o, llvm::Value* base) {
    const bool max = spec_.kind == OpKind::kArgMax;
    const int64_t r = reduced_dims_.empty() ? 1 : reduced_dims_[0];
    const int64_t stride = reduced_strides_.empty() ? 0 : reduced_strides_[0];
    llvm::Type* i64 = b_.getInt64Ty();
    llvm::Type* acc_ty = e_.compute_type(spec_.dtype);
    llvm::IRBuilder<> entry(&f->getEntryBlock(), f->getEntryBlock().begin());
    llvm::AllocaInst* best = entry.CreateAlloca(acc_ty);
    llvm::AllocaInst* best_i = entry.CreateAlloca(i64);
    b_.CreateStore(b_.getInt64(0), best_i);
    if (r > 0) {
      b_.CreateStore(e_.load_elem(f->getArg(0), spec_.dtype, base), best);
      MCX_RETURN_IF_ERROR(e_.counted_loop(f, b_.getInt64(r - 1), /*parallel=*/false, [&](llvm::Value* k) -> absl::Status {
        llvm::Value* j = b_.CreateAdd(k, b_.getInt64(1));
        llvm::Value* cur = e_.load_elem(f->getArg(0), spec_.dtype, b_.CreateAdd(base, b_.CreateMul(j, b_.getInt64(stride))));
        llvm::Value* now = b_.CreateLoad(acc_ty, best);
        llvm::Value* take;
        if (is_floating(spec_.dtype)) {
          llvm::Value* better = max ? b_.CreateFCmpOGT(cur, now) : b_.CreateFCmpOLT(cur, now);
          take = b_.CreateAnd(b_.CreateFCmpORD(now, now), b_.CreateOr(b_.CreateFCmpUNO(cur, cur), better));
        } else if (is_bool(spec_.dtype) || !is_signed_integer(spec_.dtype)) {
          take = max ? b_.CreateICmpUGT(cur, now) : b_.CreateICmpULT(cur, now);
        } else {
          take = max ? b_.CreateICmpSGT(cur, now) : b_.CreateICmpSLT(cur, now);
        }
        b_.CreateStore(b_.CreateSelect(take, cur, now), best);
        b_.CreateStore(b_.CreateSelect(take, j, b_.CreateLoad(i64, best_i)), best_i);
        return absl::OkStatus();
      }));
    }
    MCX_ASSIGN_OR_RETURN(llvm::Value * index, e_.convert(DType::kInt64, spec_.index_dtype, b_.CreateLoad(i64, best_i)));
    e_.store_elem(f->getArg(1), spec_.index_dtype, o, index);
    return absl::OkStatus();
  }

  llvm::Value* identity(llvm::Type* t) {
    const bool floating = is_floating(spec_.dtype);
    const bool boolean = is_bool(spec_.dtype);
    switch (spec_.kind) {
      case OpKind::kReduceSum:
        return floating ? llvm::ConstantFP::get(t, 0.0) : llvm::ConstantInt::get(t, 0);
      case OpKind::kReduceProd:
        return floating ? llvm::ConstantFP::get(t, 1.0) : llvm::ConstantInt::get(t, 1);
      case OpKind::kReduceMax:
        if (floating) return llvm::ConstantFP::getInfinity(t, /*Negative=*/true);
        if (boolean || !is_signed_integer(spec_.dtype)) return llvm::ConstantInt::get(t, 0);
        return llvm::ConstantInt::get(t, llvm::APInt::getSignedMinValue(t->getIntegerBitWidth()));
      default:  // min
        if (floating) return llvm::ConstantFP::getInfinity(t, /*Negative=*/false);
        if (boolean || !is_signed_integer(spec_.dtype)) return llvm::ConstantInt::getAllOnesValue(t);
        return llvm::ConstantInt::get(t, llvm::APInt::getSignedMaxValue(t->getIntegerBitWidth()));
    }
  }

  // acc (op) x, as the CPU's reduction ops apply it.
  llvm::Value* apply(llvm::Value* acc, llvm::Value* x) {
    const bool floating = is_floating(spec_.dtype);
    const bool boolean = is_bool(spec_.dtype);
    const bool is_signed = is_signed_integer(spec_.dtype);
    switch (spec_.kind) {
      case OpKind::kReduceSum:
        return floating ? b_.CreateFAdd(acc, x) : boolean ? b_.CreateOr(acc, x) : b_.CreateAdd(acc, x);
      case OpKind::kReduceProd:
        return floating ? b_.CreateFMul(acc, x) : boolean ? b_.CreateAnd(acc, x) : b_.CreateMul(acc, x);
      case OpKind::kReduceMax:
      case OpKind::kReduceMin: {
        const bool max = spec_.kind == OpKind::kReduceMax;
        if (boolean) return max ? b_.CreateOr(acc, x) : b_.CreateAnd(acc, x);
        if (floating) {  // a NaN accumulator sticks; a NaN x wins the comparison's false branch
          llvm::Value* keep = b_.CreateOr(b_.CreateFCmpUNO(acc, acc), max ? b_.CreateFCmpOGT(acc, x) : b_.CreateFCmpOLT(acc, x));
          return b_.CreateSelect(keep, acc, x);
        }
        llvm::Value* keep = max ? (is_signed ? b_.CreateICmpSGT(acc, x) : b_.CreateICmpUGT(acc, x))
                                : (is_signed ? b_.CreateICmpSLT(acc, x) : b_.CreateICmpULT(acc, x));
        return b_.CreateSelect(keep, acc, x);
      }
      default:
        return acc;
    }
  }

  const ReduceKernelSpec& spec_;
  llvm::Module& m_;
  const KernelTarget& target_;
  kernelgen::ElementEmitter e_;
  llvm::IRBuilder<>& b_;
  std::vector<int64_t> kept_dims_, kept_strides_, reduced_dims_, reduced_strides_;
};

}  // namespace

absl::Status emit_kernel(const ReduceKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target) {
  MCX_RETURN_IF_ERROR(check_spec(spec));
  return ReduceKernelEmitter(spec, m, target).emit(name);
}

}  // namespace mcx::cuda::codegen
