#include "mcx/backend/cuda/codegen/sort_kernel.h"

#include "absl/strings/str_cat.h"
#include "mcx/backend/cuda/codegen/kernel_emitters.h"
#include "mcx/core/error.h"
#include "mcx/kernelgen/element_emitter.h"

namespace mcx::cuda::codegen {

int64_t bitonic_padded_length(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

absl::Status emit_kernel(const SortPassKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target) {
  if (spec.padded < spec.length || (spec.padded & (spec.padded - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("sort pass kernel padded to ", spec.padded,
                                                   "; expected a power of two >= the length ", spec.length));
  }
  kernelgen::ElementEmitter e(m.getContext(), m, *target.math);
  llvm::IRBuilder<>& b = e.builder();
  llvm::Type* i64 = b.getInt64Ty();
  const bool floating = is_floating(spec.dtype);
  const bool is_signed = is_signed_integer(spec.dtype);
  // Whether key x sorts before key y in ascending order: NaN above every number.
  auto key_less = [&](llvm::Value* x, llvm::Value* y) -> llvm::Value* {
    if (floating) return b.CreateOr(b.CreateFCmpOLT(x, y), b.CreateAnd(b.CreateFCmpORD(x, x), b.CreateFCmpUNO(y, y)));
    return is_signed ? b.CreateICmpSLT(x, y) : b.CreateICmpULT(x, y);
  };
  return emit_grid_stride_kernel(
      m, b, target, name, {b.getPtrTy(), b.getPtrTy(), i64, i64, i64}, i64,
      [&](llvm::Function* f, llvm::Value* p) -> absl::Status {
        llvm::Value* j = f->getArg(2);
        llvm::Value* k = f->getArg(3);
        llvm::Value* half = b.getInt64(spec.padded / 2);
        llvm::Value* line = b.CreateUDiv(p, half);
        llvm::Value* q = b.CreateURem(p, half);
        // The pair (i, i + j): i has bit j clear.
        llvm::Value* i = b.CreateAdd(b.CreateMul(b.CreateUDiv(q, j), b.CreateMul(j, b.getInt64(2))), b.CreateURem(q, j));
        llvm::Value* l = b.CreateAdd(i, j);
        llvm::Value* up = b.CreateICmpEQ(b.CreateAnd(i, k), b.getInt64(0));
        llvm::Value* row = b.CreateMul(line, b.getInt64(spec.padded));
        llvm::Value* at_i = b.CreateAdd(row, i);
        llvm::Value* at_l = b.CreateAdd(row, l);
        llvm::Value* pi = e.load_elem(f->getArg(1), DType::kInt32, at_i);
        llvm::Value* pl = e.load_elem(f->getArg(1), DType::kInt32, at_l);
        // The keys' line starts at (line / k2) * length * k2 + line % k2, a position v at + v * k2.
        llvm::Value* base = b.CreateAdd(b.CreateMul(b.CreateUDiv(line, b.getInt64(spec.inner)),
                                                    b.getInt64(spec.length * spec.inner)),
                                        b.CreateURem(line, b.getInt64(spec.inner)));
        llvm::Value* length = b.getInt32(static_cast<uint32_t>(spec.length));
        auto key_of = [&](llvm::Value* v, llvm::Value* valid) {
          llvm::Value* safe = b.CreateZExt(b.CreateSelect(valid, v, b.getInt32(0)), i64);
          return e.load_elem(f->getArg(0), spec.dtype, b.CreateAdd(base, b.CreateMul(safe, b.getInt64(spec.inner))));
        };
        llvm::Value* vi = b.CreateICmpULT(pi, length);
        llvm::Value* vl = b.CreateICmpULT(pl, length);
        llvm::Value* ki = key_of(pi, vi);
        llvm::Value* kl = key_of(pl, vl);
        // Whether (key a, position a) comes before (key b, position b): padding last, then by key (in the
        // spec's direction), then by position.
        auto before = [&](llvm::Value* ka, llvm::Value* pa, llvm::Value* va, llvm::Value* kb, llvm::Value* pb,
                          llvm::Value* vb) {
          llvm::Value* a_first = spec.descending ? key_less(kb, ka) : key_less(ka, kb);
          llvm::Value* b_first = spec.descending ? key_less(ka, kb) : key_less(kb, ka);
          llvm::Value* by_key = b.CreateOr(a_first, b.CreateAnd(b.CreateNot(b_first), b.CreateICmpULT(pa, pb)));
          llvm::Value* both = b.CreateAnd(va, vb);
          llvm::Value* neither = b.CreateNot(b.CreateOr(va, vb));
          return b.CreateOr(b.CreateAnd(va, b.CreateNot(vb)),
                            b.CreateOr(b.CreateAnd(both, by_key), b.CreateAnd(neither, b.CreateICmpULT(pa, pb))));
        };
        llvm::Value* l_before_i = before(kl, pl, vl, ki, pi, vi);
        llvm::Value* i_before_l = before(ki, pi, vi, kl, pl, vl);
        llvm::Value* swap = b.CreateSelect(up, l_before_i, i_before_l);
        e.store_elem(f->getArg(1), DType::kInt32, at_i, b.CreateSelect(swap, pl, pi));
        e.store_elem(f->getArg(1), DType::kInt32, at_l, b.CreateSelect(swap, pi, pl));
        return absl::OkStatus();
      });
}

}  // namespace mcx::cuda::codegen
