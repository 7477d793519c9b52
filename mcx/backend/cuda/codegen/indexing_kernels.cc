#include "mcx/backend/cuda/codegen/indexing_kernels.h"

#include "absl/strings/str_cat.h"
#include "mcx/backend/cuda/codegen/kernel_emitters.h"
#include "mcx/core/error.h"
#include "mcx/kernelgen/element_emitter.h"

namespace mcx::cuda::codegen {
namespace {

// Element 0 of an integer array as i64 (sign- or zero-extended as its dtype says).
absl::StatusOr<llvm::Value*> load_index(kernelgen::ElementEmitter& e, llvm::Value* base, DType dtype, llvm::Value* at) {
  if (!is_integer(dtype) || is_bool(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("an index of dtype ", std::string(dtype_short_name(dtype)),
                                                   "; expected an integer dtype"));
  }
  return e.convert(dtype, DType::kInt64, e.load_elem(base, dtype, at));
}

llvm::Value* clamp(llvm::IRBuilder<>& b, llvm::Value* v, int64_t lo, int64_t hi) {
  llvm::Value* low = b.getInt64(static_cast<uint64_t>(lo));
  llvm::Value* high = b.getInt64(static_cast<uint64_t>(hi));
  llvm::Value* above = b.CreateSelect(b.CreateICmpSLT(v, low), low, v);
  return b.CreateSelect(b.CreateICmpSGT(above, high), high, above);
}

}  // namespace

absl::Status emit_kernel(const TakeKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target) {
  kernelgen::ElementEmitter e(m.getContext(), m, *target.math);
  llvm::IRBuilder<>& b = e.builder();
  llvm::Type* i64 = b.getInt64Ty();
  return emit_grid_stride_kernel(
      m, b, target, name, {b.getPtrTy(), b.getPtrTy(), b.getPtrTy(), i64}, i64,
      [&](llvm::Function* f, llvm::Value* i) -> absl::Status {
        if (spec.rows == 0) {  // nothing to take: zeros, as the CPU's
          e.store_elem(f->getArg(2), spec.dtype, i, llvm::Constant::getNullValue(e.compute_type(spec.dtype)));
          return absl::OkStatus();
        }
        llvm::Value* which = b.CreateUDiv(i, b.getInt64(spec.row_size));
        llvm::Value* column = b.CreateURem(i, b.getInt64(spec.row_size));
        MCX_ASSIGN_OR_RETURN(llvm::Value * index, load_index(e, f->getArg(1), spec.index_dtype, which));
        llvm::Value* row = clamp(b, index, 0, spec.rows - 1);
        llvm::Value* from = b.CreateAdd(b.CreateMul(row, b.getInt64(spec.row_size)), column);
        e.store_elem(f->getArg(2), spec.dtype, i, e.load_elem(f->getArg(0), spec.dtype, from));
        return absl::OkStatus();
      });
}

absl::Status emit_kernel(const ScatterAddKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target) {
  if (spec.rows == 0) return absl::InvalidArgumentError("scatter_add kernel into an array without rows");
  kernelgen::ElementEmitter e(m.getContext(), m, *target.math);
  llvm::IRBuilder<>& b = e.builder();
  llvm::Type* i64 = b.getInt64Ty();
  return emit_grid_stride_kernel(
      m, b, target, name, {b.getPtrTy(), b.getPtrTy(), b.getPtrTy(), i64}, i64,
      [&](llvm::Function* f, llvm::Value* column) -> absl::Status {
        return e.counted_loop(f, b.getInt64(spec.indices), /*parallel=*/false, [&](llvm::Value* u) -> absl::Status {
          MCX_ASSIGN_OR_RETURN(llvm::Value * index, load_index(e, f->getArg(1), spec.index_dtype, u));
          llvm::Value* row = clamp(b, index, 0, spec.rows - 1);
          llvm::Value* to = b.CreateAdd(b.CreateMul(row, b.getInt64(spec.row_size)), column);
          llvm::Value* from = b.CreateAdd(b.CreateMul(u, b.getInt64(spec.row_size)), column);
          llvm::Value* x = e.load_elem(f->getArg(2), spec.dtype, to);
          llvm::Value* y = e.load_elem(f->getArg(0), spec.dtype, from);
          e.store_elem(f->getArg(2), spec.dtype, to, is_floating(spec.dtype) ? b.CreateFAdd(x, y) : b.CreateAdd(x, y));
          return absl::OkStatus();
        });
      });
}

absl::Status emit_kernel(const DynamicWindowKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target) {
  const size_t rank = spec.array.size();
  if (spec.window.size() != rank || spec.start_dtypes.size() != rank) {
    return absl::InvalidArgumentError(absl::StrCat("dynamic window kernel of a rank-", rank, " array with a rank-",
                                                   spec.window.size(), " window and ", spec.start_dtypes.size(),
                                                   " start indices"));
  }
  kernelgen::ElementEmitter e(m.getContext(), m, *target.math);
  llvm::IRBuilder<>& b = e.builder();
  llvm::Type* i64 = b.getInt64Ty();
  std::vector<llvm::Type*> params(rank + 2, b.getPtrTy());
  params.push_back(i64);
  const std::vector<int64_t> strides = contiguous_strides(spec.array);
  return emit_grid_stride_kernel(m, b, target, name, params, i64, [&](llvm::Function* f, llvm::Value* i) -> absl::Status {
    const std::vector<llvm::Value*> c = row_major_coordinates(b, i, spec.window);
    llvm::Value* at = b.getInt64(0);
    for (size_t d = 0; d < rank; ++d) {
      MCX_ASSIGN_OR_RETURN(llvm::Value * start, load_index(e, f->getArg(1 + d), spec.start_dtypes[d], b.getInt64(0)));
      start = clamp(b, start, 0, std::max<int64_t>(0, spec.array[d] - spec.window[d]));
      at = b.CreateAdd(at, b.CreateMul(b.CreateAdd(start, c[d]), b.getInt64(strides[d])));
    }
    llvm::Value* out = f->getArg(rank + 1);
    if (spec.write) {
      e.store_elem(out, spec.dtype, at, e.load_elem(f->getArg(0), spec.dtype, i));
    } else {
      e.store_elem(out, spec.dtype, i, e.load_elem(f->getArg(0), spec.dtype, at));
    }
    return absl::OkStatus();
  });
}

absl::Status emit_kernel(const PadKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target) {
  const size_t rank = spec.in.size();
  if (spec.out.size() != rank || spec.low.size() != rank || spec.interior.size() != rank) {
    return absl::InvalidArgumentError(absl::StrCat("pad kernel of a rank-", rank, " array with ", spec.out.size(),
                                                   " result dims, ", spec.low.size(), " low edges and ",
                                                   spec.interior.size(), " interior paddings"));
  }
  kernelgen::ElementEmitter e(m.getContext(), m, *target.math);
  llvm::IRBuilder<>& b = e.builder();
  llvm::Type* i64 = b.getInt64Ty();
  const std::vector<int64_t> strides = contiguous_strides(spec.in);
  return emit_grid_stride_kernel(
      m, b, target, name, {b.getPtrTy(), b.getPtrTy(), b.getPtrTy(), i64}, i64,
      [&](llvm::Function* f, llvm::Value* i) -> absl::Status {
        const std::vector<llvm::Value*> c = row_major_coordinates(b, i, spec.out);
        // Result coordinate c holds x's element j where c = low + j * (interior + 1), 0 <= j < in.
        llvm::Value* inside = b.getTrue();
        llvm::Value* at = b.getInt64(0);
        for (size_t d = 0; d < rank; ++d) {
          const int64_t step = spec.interior[d] + 1;
          llvm::Value* shifted = b.CreateSub(c[d], b.getInt64(static_cast<uint64_t>(spec.low[d])));
          llvm::Value* j = b.CreateSDiv(shifted, b.getInt64(step));
          llvm::Value* on_grid = b.CreateICmpEQ(b.CreateSRem(shifted, b.getInt64(step)), b.getInt64(0));
          llvm::Value* in_range = b.CreateAnd(b.CreateICmpSGE(shifted, b.getInt64(0)),
                                              b.CreateICmpSLT(j, b.getInt64(spec.in[d])));
          inside = b.CreateAnd(inside, b.CreateAnd(on_grid, in_range));
          at = b.CreateAdd(at, b.CreateMul(j, b.getInt64(strides[d])));
        }
        llvm::Value* value = e.load_elem(f->getArg(1), spec.dtype, b.getInt64(0));
        // x is read only where an element lands (at is out of range elsewhere).
        llvm::BasicBlock* from_x = llvm::BasicBlock::Create(m.getContext(), "from_x", f);
        llvm::BasicBlock* done = llvm::BasicBlock::Create(m.getContext(), "done", f);
        llvm::BasicBlock* here = b.GetInsertBlock();
        b.CreateCondBr(inside, from_x, done);
        b.SetInsertPoint(from_x);
        llvm::Value* x = e.load_elem(f->getArg(0), spec.dtype, at);
        b.CreateBr(done);
        b.SetInsertPoint(done);
        llvm::PHINode* v = b.CreatePHI(x->getType(), 2);
        v->addIncoming(value, here);
        v->addIncoming(x, from_x);
        e.store_elem(f->getArg(2), spec.dtype, i, v);
        return absl::OkStatus();
      });
}

}  // namespace mcx::cuda::codegen
