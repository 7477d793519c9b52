#include "mcx/backend/cuda/codegen/window_kernels.h"

#include "absl/strings/str_cat.h"
#include "mcx/backend/cuda/codegen/kernel_emitters.h"
#include "mcx/core/error.h"
#include "mcx/kernelgen/element_emitter.h"

namespace mcx::cuda::codegen {
namespace {

int64_t product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

}  // namespace

absl::Status emit_kernel(const ReduceWindowKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target) {
  const size_t rank = spec.in.size();
  if (spec.out.size() != rank || spec.window.size() != rank || spec.strides.size() != rank ||
      spec.padding_low.size() != rank || spec.reduce == ReduceOp::kProd || is_bool(spec.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("reduce_window kernel of a rank-", rank, " ",
                                                   std::string(dtype_short_name(spec.dtype)),
                                                   " array: expected a sum, max or min of a number array with a "
                                                   "result dim, window, stride and low padding per dim"));
  }
  kernelgen::ElementEmitter e(m.getContext(), m, *target.math);
  llvm::IRBuilder<>& b = e.builder();
  llvm::Type* i64 = b.getInt64Ty();
  const std::vector<int64_t> in_strides = contiguous_strides(spec.in);
  const bool floating = is_floating(spec.dtype);
  const bool is_signed = is_signed_integer(spec.dtype);
  return emit_grid_stride_kernel(
      m, b, target, name, {b.getPtrTy(), b.getPtrTy(), i64}, i64, [&](llvm::Function* f, llvm::Value* o) -> absl::Status {
        const std::vector<llvm::Value*> c = row_major_coordinates(b, o, spec.out);
        llvm::Type* acc_ty = e.compute_type(spec.dtype);
        llvm::Value* identity;
        if (spec.reduce == ReduceOp::kSum) {
          identity = llvm::Constant::getNullValue(acc_ty);
        } else if (floating) {
          identity = llvm::ConstantFP::getInfinity(acc_ty, spec.reduce == ReduceOp::kMax);
        } else {
          const unsigned bits = acc_ty->getIntegerBitWidth();
          const bool max = spec.reduce == ReduceOp::kMax;
          identity = llvm::ConstantInt::get(acc_ty, is_signed ? (max ? llvm::APInt::getSignedMinValue(bits)
                                                                     : llvm::APInt::getSignedMaxValue(bits))
                                                              : (max ? llvm::APInt::getMinValue(bits)
                                                                     : llvm::APInt::getMaxValue(bits)));
        }
        llvm::IRBuilder<> entry(&f->getEntryBlock(), f->getEntryBlock().begin());
        llvm::AllocaInst* acc = entry.CreateAlloca(acc_ty);
        b.CreateStore(identity, acc);
        // An empty x: every window is padding.
        const int64_t positions = product(spec.in) == 0 ? 0 : product(spec.window);
        MCX_RETURN_IF_ERROR(e.counted_loop(f, b.getInt64(positions), false, [&](llvm::Value* w) -> absl::Status {
          const std::vector<llvm::Value*> k = row_major_coordinates(b, w, spec.window);
          llvm::Value* inside = b.getTrue();
          llvm::Value* at = b.getInt64(0);
          for (size_t d = 0; d < rank; ++d) {
            llvm::Value* pos = b.CreateSub(b.CreateAdd(b.CreateMul(c[d], b.getInt64(spec.strides[d])), k[d]),
                                           b.getInt64(static_cast<uint64_t>(spec.padding_low[d])));
            inside = b.CreateAnd(inside, b.CreateAnd(b.CreateICmpSGE(pos, b.getInt64(0)),
                                                     b.CreateICmpSLT(pos, b.getInt64(spec.in[d]))));
            at = b.CreateAdd(at, b.CreateMul(pos, b.getInt64(in_strides[d])));
          }
          // Padding is the identity: skipped.
          llvm::Value* safe = b.CreateSelect(inside, at, b.getInt64(0));
          llvm::Value* v = e.load_elem(f->getArg(0), spec.dtype, safe);
          llvm::Value* a = b.CreateLoad(acc_ty, acc);
          llvm::Value* combined;
          if (spec.reduce == ReduceOp::kSum) {
            combined = floating ? b.CreateFAdd(a, v) : b.CreateAdd(a, v);
          } else if (floating) {  // v replaces a when better or NaN: a NaN, once in, stays
            llvm::Value* better = spec.reduce == ReduceOp::kMax ? b.CreateFCmpOGT(v, a) : b.CreateFCmpOLT(v, a);
            combined = b.CreateSelect(b.CreateOr(better, b.CreateFCmpUNO(v, v)), v, a);
          } else {
            const bool max = spec.reduce == ReduceOp::kMax;
            llvm::Value* better = max ? (is_signed ? b.CreateICmpSGT(v, a) : b.CreateICmpUGT(v, a))
                                      : (is_signed ? b.CreateICmpSLT(v, a) : b.CreateICmpULT(v, a));
            combined = b.CreateSelect(better, v, a);
          }
          b.CreateStore(b.CreateSelect(inside, combined, a), acc);
          return absl::OkStatus();
        }));
        e.store_elem(f->getArg(1), spec.dtype, o, b.CreateLoad(acc_ty, acc));
        return absl::OkStatus();
      });
}

absl::Status emit_kernel(const ConvKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target) {
  const size_t rank = spec.lhs.size();
  const size_t spatial = rank - 2;
  if (rank < 2 || spec.rhs.size() != rank || spec.out.size() != rank || spec.lhs_spec.size() != rank ||
      spec.rhs_spec.size() != rank || spec.out_spec.size() != rank || spec.strides.size() != spatial ||
      spec.lhs_dilation.size() != spatial || spec.rhs_dilation.size() != spatial ||
      spec.padding_low.size() != spatial || spec.feature_groups < 1 || !is_floating(spec.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("conv kernel of rank-", rank, " ",
                                                   std::string(dtype_short_name(spec.dtype)),
                                                   " operands: expected float operands of one rank >= 2, "
                                                   "dimension numbers of that rank and one stride, dilation and "
                                                   "low padding per spatial dim"));
  }
  kernelgen::ElementEmitter e(m.getContext(), m, *target.math);
  llvm::IRBuilder<>& b = e.builder();
  llvm::Type* i64 = b.getInt64Ty();
  const std::vector<int64_t> lhs_strides = contiguous_strides(spec.lhs);
  const std::vector<int64_t> rhs_strides = contiguous_strides(spec.rhs);
  const int64_t out_features = spec.out[spec.out_spec[1]];
  const int64_t group_in = spec.rhs[spec.rhs_spec[1]];  // input features per group
  const int64_t group_out = out_features / spec.feature_groups;
  // The contracted index space: the group's input features, then the window's positions (row-major).
  std::vector<int64_t> contracted = {group_in};
  for (size_t s = 0; s < spatial; ++s) contracted.push_back(spec.rhs[spec.rhs_spec[2 + s]]);
  return emit_grid_stride_kernel(
      m, b, target, name, {b.getPtrTy(), b.getPtrTy(), b.getPtrTy(), i64}, i64,
      [&](llvm::Function* f, llvm::Value* o) -> absl::Status {
        const std::vector<llvm::Value*> c = row_major_coordinates(b, o, spec.out);
        llvm::Value* batch = c[spec.out_spec[0]];
        llvm::Value* feature = c[spec.out_spec[1]];
        llvm::Value* group = b.CreateUDiv(feature, b.getInt64(std::max<int64_t>(group_out, 1)));
        llvm::Type* acc_ty = e.compute_type(spec.dtype);
        llvm::IRBuilder<> entry(&f->getEntryBlock(), f->getEntryBlock().begin());
        llvm::AllocaInst* acc = entry.CreateAlloca(acc_ty);
        b.CreateStore(llvm::ConstantFP::get(acc_ty, 0.0), acc);
        llvm::Value* lhs_base = b.CreateMul(batch, b.getInt64(lhs_strides[spec.lhs_spec[0]]));
        llvm::Value* rhs_base = b.CreateMul(feature, b.getInt64(rhs_strides[spec.rhs_spec[0]]));
        // An empty operand: an empty sum (zeros), as the CPU's.
        const int64_t terms = product(spec.lhs) == 0 || product(spec.rhs) == 0 ? 0 : product(contracted);
        MCX_RETURN_IF_ERROR(e.counted_loop(f, b.getInt64(terms), false, [&](llvm::Value* t) -> absl::Status {
          const std::vector<llvm::Value*> k = row_major_coordinates(b, t, contracted);
          llvm::Value* in_feature = b.CreateAdd(b.CreateMul(group, b.getInt64(group_in)), k[0]);
          llvm::Value* l_at = b.CreateAdd(lhs_base, b.CreateMul(in_feature, b.getInt64(lhs_strides[spec.lhs_spec[1]])));
          llvm::Value* r_at = b.CreateAdd(rhs_base, b.CreateMul(k[0], b.getInt64(rhs_strides[spec.rhs_spec[1]])));
          llvm::Value* inside = b.getTrue();
          for (size_t s = 0; s < spatial; ++s) {
            // The position in lhs dilated and padded, then in lhs itself.
            llvm::Value* pos = b.CreateSub(b.CreateAdd(b.CreateMul(c[spec.out_spec[2 + s]], b.getInt64(spec.strides[s])),
                                                       b.CreateMul(k[1 + s], b.getInt64(spec.rhs_dilation[s]))),
                                           b.getInt64(static_cast<uint64_t>(spec.padding_low[s])));
            llvm::Value* dil = b.getInt64(spec.lhs_dilation[s]);
            llvm::Value* q = b.CreateSDiv(pos, dil);
            inside = b.CreateAnd(inside, b.CreateAnd(b.CreateICmpSGE(pos, b.getInt64(0)),
                                                     b.CreateAnd(b.CreateICmpEQ(b.CreateSRem(pos, dil), b.getInt64(0)),
                                                                 b.CreateICmpSLT(q, b.getInt64(spec.lhs[spec.lhs_spec[2 + s]])))));
            l_at = b.CreateAdd(l_at, b.CreateMul(q, b.getInt64(lhs_strides[spec.lhs_spec[2 + s]])));
            r_at = b.CreateAdd(r_at, b.CreateMul(k[1 + s], b.getInt64(rhs_strides[spec.rhs_spec[2 + s]])));
          }
          llvm::Value* l = e.load_elem(f->getArg(0), spec.dtype, b.CreateSelect(inside, l_at, b.getInt64(0)));
          llvm::Value* r = e.load_elem(f->getArg(1), spec.dtype, r_at);
          llvm::Value* a = b.CreateLoad(acc_ty, acc);
          b.CreateStore(b.CreateSelect(inside, b.CreateFAdd(a, b.CreateFMul(l, r)), a), acc);
          return absl::OkStatus();
        }));
        e.store_elem(f->getArg(2), spec.dtype, o, b.CreateLoad(acc_ty, acc));
        return absl::OkStatus();
      });
}

}  // namespace mcx::cuda::codegen
