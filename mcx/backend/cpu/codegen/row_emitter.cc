// IR emission for row kernels (row_kernel.h). The function loops over rows; for each row it runs the program's
// stages in order: an element-wise stage over a full row is an inner loop marked parallel (the vectoriser
// widens it), a row-scalar stage is straight-line code, and a reduction calls a helper function that
// accumulates in the interpreter's order (reduce_fastmath.cc), written out with explicit vectors so that
// no reassociation is needed to vectorise it.
#include "mcx/backend/cpu/codegen/row_emitter.h"

#include <map>

#include "mcx/backend/cpu/codegen/cpu_math_calls.h"
#include "mcx/kernelgen/element_emitter.h"
#include "mcx/core/error.h"

namespace mcx::cpu::codegen {

using kernelgen::ElementEmitter;
using kernelgen::is_16bit_float;
namespace {

using ir::OpKind;
using Storage = RowProgram::Storage;

constexpr int64_t kRowChunk = 8192;  // reduce_fastmath.cc: elements of a row reduced as one run
constexpr int kLanes = 16;           // reduce_fastmath.cc reduce_run: independent accumulators

// reduce_fastmath.cc minmax_run's vector width in bytes on this host (its run-time ISA choice).
int minmax_vector_bytes() {
  if (__builtin_cpu_supports("avx512f")) return 64;
  if (__builtin_cpu_supports("avx2")) return 32;
  return 16;
}

class RowEmitter {
 public:
  RowEmitter(ElementEmitter& e, llvm::Module& m, const RowProgram& rp)
      : e_(e), b_(e.builder()), m_(m), rp_(rp) {}

  absl::Status emit(const std::string& symbol) {
    for (size_t s = 0; s < rp_.stages.size(); ++s) {
      const RowProgram::Stage& st = rp_.stages[s];
      if (st.kind != RowProgram::Stage::Kind::kReduce) continue;
      MCX_ASSIGN_OR_RETURN(reducers_[static_cast<int>(s)],
                           emit_chunk_reducer(st.reduce_kind, rp_.values[st.args[0]].dtype,
                                              symbol + "_reduce" + std::to_string(s)));
    }
    llvm::Type* ptr = b_.getPtrTy();
    llvm::Type* i64 = b_.getInt64Ty();
    llvm::FunctionType* fty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, i64, i64}, false);
    llvm::Function* f = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, symbol, m_);
    f->setDoesNotThrow();
    f->getArg(0)->addAttr(llvm::Attribute::NoAlias);
    f->getArg(1)->addAttr(llvm::Attribute::NoAlias);
    llvm::Value* rows = f->getArg(2);
    cols_ = f->getArg(3);
    b_.SetInsertPoint(llvm::BasicBlock::Create(e_.context(), "entry", f));
    const size_t nv = rp_.values.size();
    base_.assign(nv, nullptr);
    stride_.assign(nv, nullptr);
    for (size_t v = 0; v < nv; ++v) {
      if (rp_.values[v].storage == Storage::kRegister) continue;
      base_[v] = b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, f->getArg(0), v));
      stride_[v] = b_.CreateLoad(i64, b_.CreateConstInBoundsGEP1_64(i64, f->getArg(1), v));
    }
    MCX_RETURN_IF_ERROR(e_.counted_loop(f, rows, /*parallel=*/false, [&](llvm::Value* r) -> absl::Status {
      row_.assign(nv, nullptr);
      reg_.assign(nv, nullptr);
      for (size_t v = 0; v < nv; ++v) {
        if (base_[v] == nullptr) continue;
        llvm::Type* mt = e_.memory_type(rp_.values[v].dtype);
        row_[v] = b_.CreateInBoundsGEP(mt, base_[v], b_.CreateMul(r, stride_[v]));
      }
      for (size_t s = 0; s < rp_.stages.size(); ++s) MCX_RETURN_IF_ERROR(stage(f, static_cast<int>(s)));
      return absl::OkStatus();
    }));
    b_.CreateRetVoid();
    return absl::OkStatus();
  }

 private:
  // A row scalar's value (compute type): its register, else loaded from its row.
  llvm::Value* scalar(int v) {
    if (reg_[v] == nullptr) reg_[v] = e_.load_elem(row_[v], rp_.values[v].dtype, b_.getInt64(0));
    return reg_[v];
  }

  absl::Status stage(llvm::Function* f, int s) {
    const RowProgram::Stage& st = rp_.stages[s];
    if (st.kind == RowProgram::Stage::Kind::kReduce) {
      const int src = st.args[0], dst = st.results[0];
      const DType t = rp_.values[dst].dtype;
      auto reducer = reducers_.find(s);
      if (reducer == reducers_.end()) return absl::InternalError("[codegen] a reduction stage without its reducer");
      llvm::Value* acc = b_.CreateCall(reducer->second, {row_[src], cols_});
      // from_compute: a 16-bit result is rounded to its dtype (kept widened, as every 16-bit value here).
      if (is_16bit_float(t)) acc = e_.widen(t, e_.narrow(t, acc));
      reg_[dst] = acc;
      if (rp_.values[dst].storage == Storage::kOutput) e_.store_elem(row_[dst], t, b_.getInt64(0), acc);
      return absl::OkStatus();
    }
    const int num_leaves = static_cast<int>(st.args.size());
    if (!st.full) {
      std::vector<llvm::Value*> leaves;
      for (int a : st.args) leaves.push_back(scalar(a));
      MCX_ASSIGN_OR_RETURN(std::vector<llvm::Value*> slot, e_.emit_nodes(st.group.nodes, leaves, st.group.leaf_dtypes));
      for (size_t j = 0; j < st.results.size(); ++j) {
        const int v = st.results[j];
        reg_[v] = slot[num_leaves + st.group.outputs[j]];
        if (rp_.values[v].storage == Storage::kOutput) {
          e_.store_elem(row_[v], rp_.values[v].dtype, b_.getInt64(0), reg_[v]);
        }
      }
      return absl::OkStatus();
    }
    // A full row: row-scalar leaves are loaded once, before the loop.
    std::vector<llvm::Value*> invariant(num_leaves, nullptr);
    for (int k = 0; k < num_leaves; ++k) {
      if (!rp_.values[st.args[k]].full) invariant[k] = scalar(st.args[k]);
    }
    return e_.counted_loop(f, cols_, /*parallel=*/true, [&](llvm::Value* i) -> absl::Status {
      std::vector<llvm::Value*> leaves;
      for (int k = 0; k < num_leaves; ++k) {
        const int v = st.args[k];
        leaves.push_back(invariant[k] != nullptr ? invariant[k] : e_.load_elem(row_[v], rp_.values[v].dtype, i));
      }
      MCX_ASSIGN_OR_RETURN(std::vector<llvm::Value*> slot, e_.emit_nodes(st.group.nodes, leaves, st.group.leaf_dtypes));
      for (size_t j = 0; j < st.results.size(); ++j) {
        const int v = st.results[j];
        e_.store_elem(row_[v], rp_.values[v].dtype, i, slot[num_leaves + st.group.outputs[j]]);
      }
      return absl::OkStatus();
    });
  }

  // ---- reductions, in reduce_fastmath.cc's order -------------------------------------------------------

  llvm::Type* acc_type(DType t) { return t == DType::kFloat64 ? b_.getDoubleTy() : b_.getFloatTy(); }

  llvm::Constant* init(OpKind k, llvm::Type* a) {
    switch (k) {
      case OpKind::kReduceSum: return llvm::ConstantFP::get(a, 0.0);
      case OpKind::kReduceProd: return llvm::ConstantFP::get(a, 1.0);
      case OpKind::kReduceMax: return llvm::ConstantFP::getInfinity(a, /*Negative=*/true);
      default: return llvm::ConstantFP::getInfinity(a, /*Negative=*/false);
    }
  }

  // Op::apply(a, b) (lane-wise on vectors): a + b, a * b, or max/min keeping a NaN in a:
  // (a != a || a > b) ? a : b.
  llvm::Value* apply(OpKind k, llvm::Value* a, llvm::Value* c) {
    switch (k) {
      case OpKind::kReduceSum: return b_.CreateFAdd(a, c);
      case OpKind::kReduceProd: return b_.CreateFMul(a, c);
      default: {
        llvm::Value* wins = k == OpKind::kReduceMax ? b_.CreateFCmpOGT(a, c) : b_.CreateFCmpOLT(a, c);
        return b_.CreateSelect(b_.CreateOr(b_.CreateFCmpUNO(a, a), wins), a, c);
      }
    }
  }

  // A new internal function `A name(ptr x, i64 n)`, the builder at its entry.
  llvm::Function* begin_reducer(llvm::Type* a, const std::string& name) {
    llvm::Function* f = llvm::Function::Create(llvm::FunctionType::get(a, {b_.getPtrTy(), b_.getInt64Ty()}, false),
                                               llvm::Function::InternalLinkage, name, m_);
    b_.SetInsertPoint(llvm::BasicBlock::Create(e_.context(), "entry", f));
    return f;
  }

  // `A name(ptr x, i64 n)`: the reduction of a whole row as reduce3 does it for one row: runs of at most
  // kRowChunk elements, each reduced by reduce_run (or minmax_run), combined left to right with apply.
  absl::StatusOr<llvm::Function*> emit_chunk_reducer(OpKind k, DType t, const std::string& name) {
    llvm::IRBuilderBase::InsertPointGuard guard(b_);
    const bool minmax = (k == OpKind::kReduceMax || k == OpKind::kReduceMin) &&
                        (t == DType::kFloat32 || t == DType::kFloat64);
    MCX_ASSIGN_OR_RETURN(llvm::Function * run,
                         minmax ? emit_minmax_run(k, t, name + "_run") : emit_lane_run(k, t, name + "_run"));
    llvm::Type* a = acc_type(t);
    llvm::Function* f = begin_reducer(a, name);
    llvm::Value* x = f->getArg(0);
    llvm::Value* n = f->getArg(1);
    llvm::Type* mt = e_.memory_type(t);
    llvm::Value* chunk = b_.getInt64(kRowChunk);
    llvm::AllocaInst* acc = b_.CreateAlloca(a);
    b_.CreateStore(b_.CreateCall(run, {x, b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, n, chunk)}), acc);
    // Chunks 1 .. ceil(n / kRowChunk) - 1.
    llvm::Value* more = b_.CreateSub(b_.CreateSDiv(b_.CreateAdd(n, b_.getInt64(kRowChunk - 1)), chunk), b_.getInt64(1));
    MCX_RETURN_IF_ERROR(e_.counted_loop(f, more, /*parallel=*/false, [&](llvm::Value* c) -> absl::Status {
      llvm::Value* lo = b_.CreateMul(b_.CreateAdd(c, b_.getInt64(1)), chunk);
      llvm::Value* len = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b_.CreateSub(n, lo), chunk);
      llvm::Value* part = b_.CreateCall(run, {b_.CreateInBoundsGEP(mt, x, lo), len});
      b_.CreateStore(apply(k, b_.CreateLoad(a, acc), part), acc);
      return absl::OkStatus();
    }));
    b_.CreateRet(b_.CreateLoad(a, acc));
    return f;
  }

  // reduce_run: 16 accumulators, acc[j] = apply(acc[j], x[i + j]) over whole runs of 16, the rest into
  // acc[0], acc[1], ..., then acc[j] = apply(acc[j], acc[j + w]) for w = 8, 4, 2, 1.
  absl::StatusOr<llvm::Function*> emit_lane_run(OpKind k, DType t, const std::string& name) {
    llvm::Type* a = acc_type(t);
    llvm::Type* vt = llvm::FixedVectorType::get(a, kLanes);
    llvm::Function* f = begin_reducer(a, name);
    llvm::Value* x = f->getArg(0);
    llvm::Value* n = f->getArg(1);
    llvm::AllocaInst* acc = b_.CreateAlloca(vt);
    b_.CreateStore(llvm::ConstantVector::getSplat(llvm::ElementCount::getFixed(kLanes), init(k, a)), acc);
    llvm::Value* blocks = b_.CreateSDiv(n, b_.getInt64(kLanes));
    MCX_RETURN_IF_ERROR(e_.counted_loop(f, blocks, /*parallel=*/false, [&](llvm::Value* blk) -> absl::Status {
      llvm::Value* i0 = b_.CreateMul(blk, b_.getInt64(kLanes));
      llvm::Value* v;
      if (t == DType::kFloat32 || t == DType::kFloat64) {
        v = b_.CreateAlignedLoad(vt, b_.CreateInBoundsGEP(a, x, i0), llvm::Align(dtype_size(t)));
      } else {
        v = llvm::PoisonValue::get(vt);
        for (int j = 0; j < kLanes; ++j) {
          v = b_.CreateInsertElement(v, e_.load_elem(x, t, b_.CreateAdd(i0, b_.getInt64(j))), j);
        }
      }
      b_.CreateStore(apply(k, b_.CreateLoad(vt, acc), v), acc);
      return absl::OkStatus();
    }));
    llvm::Value* done = b_.CreateMul(blocks, b_.getInt64(kLanes));
    MCX_RETURN_IF_ERROR(e_.counted_loop(f, b_.CreateSub(n, done), /*parallel=*/false, [&](llvm::Value* j) -> absl::Status {
      llvm::Value* xi = e_.load_elem(x, t, b_.CreateAdd(done, j));
      llvm::Value* lanes = b_.CreateLoad(vt, acc);
      llvm::Value* lane = apply(k, b_.CreateExtractElement(lanes, j), xi);
      b_.CreateStore(b_.CreateInsertElement(lanes, lane, j), acc);
      return absl::OkStatus();
    }));
    llvm::Value* v = b_.CreateLoad(vt, acc);
    for (int w = kLanes / 2; w >= 1; w /= 2) {
      std::vector<int> lo(w), hi(w);
      for (int j = 0; j < w; ++j) lo[j] = j, hi[j] = j + w;
      v = apply(k, b_.CreateShuffleVector(v, lo), b_.CreateShuffleVector(v, hi));
    }
    b_.CreateRet(b_.CreateExtractElement(v, uint64_t{0}));
    return f;
  }

  // minmax_run (float32/float64 max and min): K = 4 vector accumulators of the ISA's width W over whole runs
  // of K * W, `v > acc ? v : acc` per lane, NaNs tracked apart; the rest with apply into a scalar r; then the
  // accumulators combined as a tree and r = apply(r, that); any NaN gives the quiet NaN.
  absl::StatusOr<llvm::Function*> emit_minmax_run(OpKind k, DType t, const std::string& name) {
    constexpr int K = 4;
    const int W = minmax_vector_bytes() / dtype_size(t);
    llvm::Type* a = acc_type(t);
    llvm::Type* vt = llvm::FixedVectorType::get(a, W);
    llvm::Function* f = begin_reducer(a, name);
    llvm::Value* x = f->getArg(0);
    llvm::Value* n = f->getArg(1);
    const bool is_max = k == OpKind::kReduceMax;
    std::vector<llvm::AllocaInst*> acc(K), nan_seen(K);
    for (int q = 0; q < K; ++q) {
      acc[q] = b_.CreateAlloca(vt);
      nan_seen[q] = b_.CreateAlloca(vt);
      b_.CreateStore(llvm::ConstantVector::getSplat(llvm::ElementCount::getFixed(W), init(k, a)), acc[q]);
      b_.CreateStore(llvm::Constant::getNullValue(vt), nan_seen[q]);
    }
    llvm::AllocaInst* r = b_.CreateAlloca(a);
    llvm::AllocaInst* nan = b_.CreateAlloca(b_.getInt1Ty());
    b_.CreateStore(init(k, a), r);
    b_.CreateStore(b_.getFalse(), nan);
    llvm::Value* blocks = b_.CreateSDiv(n, b_.getInt64(K * W));
    MCX_RETURN_IF_ERROR(e_.counted_loop(f, blocks, /*parallel=*/false, [&](llvm::Value* blk) -> absl::Status {
      llvm::Value* i0 = b_.CreateMul(blk, b_.getInt64(K * W));
      for (int q = 0; q < K; ++q) {
        llvm::Value* p = b_.CreateInBoundsGEP(a, x, b_.CreateAdd(i0, b_.getInt64(q * W)));
        llvm::Value* v = b_.CreateAlignedLoad(vt, p, llvm::Align(dtype_size(t)));
        llvm::Value* cur = b_.CreateLoad(vt, acc[q]);
        llvm::Value* wins = is_max ? b_.CreateFCmpOGT(v, cur) : b_.CreateFCmpOLT(v, cur);
        b_.CreateStore(b_.CreateSelect(wins, v, cur), acc[q]);
        b_.CreateStore(b_.CreateSelect(b_.CreateFCmpUNO(v, v), v, b_.CreateLoad(vt, nan_seen[q])), nan_seen[q]);
      }
      return absl::OkStatus();
    }));
    llvm::Value* done = b_.CreateMul(blocks, b_.getInt64(K * W));
    MCX_RETURN_IF_ERROR(e_.counted_loop(f, b_.CreateSub(n, done), /*parallel=*/false, [&](llvm::Value* j) -> absl::Status {
      llvm::Value* xi = e_.load_elem(x, t, b_.CreateAdd(done, j));
      b_.CreateStore(b_.CreateOr(b_.CreateLoad(b_.getInt1Ty(), nan), b_.CreateFCmpUNO(xi, xi)), nan);
      b_.CreateStore(apply(k, b_.CreateLoad(a, r), xi), r);
      return absl::OkStatus();
    }));
    llvm::Value* any_nan = b_.CreateLoad(b_.getInt1Ty(), nan);
    for (int q = 0; q < K; ++q) {
      llvm::Value* nans = b_.CreateLoad(vt, nan_seen[q]);
      any_nan = b_.CreateOr(any_nan, b_.CreateOrReduce(b_.CreateFCmpUNO(nans, nans)));
    }
    // The accumulators (no NaN in them) as a tree, `a > b ? a : b` (ties keep b): pairs lane by lane, then
    // halves of the lanes; then the rest's r.
    auto pick = [&](llvm::Value* x, llvm::Value* y) {
      return b_.CreateSelect(is_max ? b_.CreateFCmpOGT(x, y) : b_.CreateFCmpOLT(x, y), x, y);
    };
    llvm::Value* v = pick(pick(b_.CreateLoad(vt, acc[0]), b_.CreateLoad(vt, acc[1])),
                          pick(b_.CreateLoad(vt, acc[2]), b_.CreateLoad(vt, acc[3])));
    for (int w = W / 2; w >= 1; w /= 2) {
      std::vector<int> lo(w), hi(w);
      for (int j = 0; j < w; ++j) lo[j] = j, hi[j] = j + w;
      v = pick(b_.CreateShuffleVector(v, lo), b_.CreateShuffleVector(v, hi));
    }
    llvm::Value* rv = apply(k, b_.CreateLoad(a, r), b_.CreateExtractElement(v, uint64_t{0}));
    b_.CreateRet(b_.CreateSelect(any_nan, llvm::ConstantFP::getQNaN(a), rv));
    return f;
  }

  ElementEmitter& e_;
  llvm::IRBuilder<>& b_;
  llvm::Module& m_;
  const RowProgram& rp_;
  std::map<int, llvm::Function*> reducers_;  // by stage index
  llvm::Value* cols_ = nullptr;
  std::vector<llvm::Value*> base_, stride_;  // per value: row 0 and the row stride (null for registers)
  std::vector<llvm::Value*> row_, reg_;      // per value, in the current row: its row's address, its register
};

}  // namespace

absl::StatusOr<std::unique_ptr<llvm::Module>> emit_row_module(const RowProgram& rp, const std::string& symbol,
                                                              llvm::LLVMContext& ctx, const VectorVariants& variants) {
  auto m = std::make_unique<llvm::Module>(symbol, ctx);
  const CpuMathCalls math(variants);
  ElementEmitter e(ctx, *m, math);
  MCX_RETURN_IF_ERROR(RowEmitter(e, *m, rp).emit(symbol));
  return m;
}

}  // namespace mcx::cpu::codegen
