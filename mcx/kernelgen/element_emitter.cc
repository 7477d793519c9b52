#include "mcx/kernelgen/element_emitter.h"

#include "llvm/IR/Intrinsics.h"
#include "mcx/core/error.h"

namespace mcx::kernelgen {

using ir::OpKind;

absl::StatusOr<llvm::Value*> ElementEmitter::unary(OpKind k, DType t, llvm::Value* x) {
  if (is_floating(t)) {
    switch (k) {
      case OpKind::kExp: return math(MathFn::kExp, {x});
      case OpKind::kLog: return math(MathFn::kLog, {x});
      case OpKind::kLog1p: return math(MathFn::kLog1p, {x});
      case OpKind::kExpm1: return math(MathFn::kExpm1, {x});
      case OpKind::kTanh: return math(MathFn::kTanh, {x});
      case OpKind::kSin: return math(MathFn::kSin, {x});
      case OpKind::kCos: return math(MathFn::kCos, {x});
      case OpKind::kErf: return math(MathFn::kErf, {x});
      case OpKind::kErfc: return math(MathFn::kErfc, {x});
      case OpKind::kErfInv: return math(MathFn::kErfInv, {x});
      case OpKind::kLogistic: {  // 1 / (1 + exp(-x)), as the interpreter's vmath computes it
        llvm::Value* e = math(MathFn::kExp, {b_.CreateFNeg(x)});
        return b_.CreateFDiv(fconst(t, 1.0), b_.CreateFAdd(fconst(t, 1.0), e));
      }
      case OpKind::kSqrt: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x);
      case OpKind::kRsqrt: return b_.CreateFDiv(fconst(t, 1.0), b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x));
      case OpKind::kFloor: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, x);
      case OpKind::kCeil: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, x);
      case OpKind::kRound: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::round, x);  // half away from zero
      case OpKind::kNeg: return b_.CreateFNeg(x);
      case OpKind::kAbs: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
      case OpKind::kSign:  // x > 0 ? 1 : (x < 0 ? -1 : x): keeps -0, +0 and NaN
        return b_.CreateSelect(b_.CreateFCmpOGT(x, fconst(t, 0.0)), fconst(t, 1.0),
                               b_.CreateSelect(b_.CreateFCmpOLT(x, fconst(t, 0.0)), fconst(t, -1.0), x));
      case OpKind::kStopGradient: case OpKind::kRematBarrier: return x;
      default: return no_rule(k, t);
    }
  }
  if (is_bool(t)) {
    switch (k) {
      case OpKind::kNot: return b_.CreateXor(x, b_.getTrue());
      case OpKind::kAbs: case OpKind::kSign: case OpKind::kStopGradient: case OpKind::kRematBarrier: return x;
      default: return no_rule(k, t);
    }
  }
  llvm::Value* zero = iconst(t, 0);
  switch (k) {
    case OpKind::kNeg: return b_.CreateSub(zero, x);  // wraps
    case OpKind::kAbs:
      return is_signed_integer(t) ? b_.CreateSelect(b_.CreateICmpSLT(x, zero), b_.CreateSub(zero, x), x) : x;
    case OpKind::kSign: {  // (x > 0) - (x < 0)
      llvm::Type* it = compute_type(t);
      llvm::Value* pos = b_.CreateZExt(is_signed_integer(t) ? b_.CreateICmpSGT(x, zero) : b_.CreateICmpUGT(x, zero), it);
      if (!is_signed_integer(t)) return pos;
      return b_.CreateSub(pos, b_.CreateZExt(b_.CreateICmpSLT(x, zero), it));
    }
    case OpKind::kNot: return b_.CreateNot(x);
    case OpKind::kStopGradient: case OpKind::kRematBarrier: return x;
    default: return no_rule(k, t);
  }
}

absl::StatusOr<llvm::Value*> ElementEmitter::binary(OpKind k, DType t, llvm::Value* a, llvm::Value* c) {
  if (k == OpKind::kMax || k == OpKind::kMin) return max_min(t, a, c, k == OpKind::kMax);
  if (is_floating(t)) {
    switch (k) {
      case OpKind::kAdd: return b_.CreateFAdd(a, c);
      case OpKind::kSub: return b_.CreateFSub(a, c);
      case OpKind::kMul: return b_.CreateFMul(a, c);
      case OpKind::kDiv: return b_.CreateFDiv(a, c);
      case OpKind::kRem: return b_.CreateFRem(a, c);  // fmod
      case OpKind::kPow: return math(MathFn::kPow, {a, c});
      default: return no_rule(k, t);
    }
  }
  if (is_bool(t)) {  // arithmetic in {0, 1} saturated to bool
    switch (k) {
      case OpKind::kAdd: case OpKind::kOr: return b_.CreateOr(a, c);
      case OpKind::kMul: case OpKind::kAnd: return b_.CreateAnd(a, c);
      case OpKind::kSub: case OpKind::kXor: return b_.CreateXor(a, c);
      default: return no_rule(k, t);
    }
  }
  const bool s = is_signed_integer(t);
  switch (k) {
    case OpKind::kAdd: return b_.CreateAdd(a, c);  // wrapping: no nsw/nuw
    case OpKind::kSub: return b_.CreateSub(a, c);
    case OpKind::kMul: return b_.CreateMul(a, c);
    case OpKind::kAnd: return b_.CreateAnd(a, c);
    case OpKind::kOr: return b_.CreateOr(a, c);
    case OpKind::kXor: return b_.CreateXor(a, c);
    case OpKind::kDiv:
    case OpKind::kRem: {
      // x / 0 = -1 and x % 0 = x; MIN / -1 = MIN and MIN % -1 = 0 (elementwise.cc int_div / int_rem). The
      // divisor is made safe first, so the (scalarised) division never traps.
      llvm::Value* by_zero = b_.CreateICmpEQ(c, iconst(t, 0));
      llvm::Value* unsafe = by_zero;
      if (s) {
        const unsigned bits = compute_type(t)->getIntegerBitWidth();
        llvm::Value* min = llvm::ConstantInt::get(compute_type(t), llvm::APInt::getSignedMinValue(bits));
        unsafe = b_.CreateOr(unsafe, b_.CreateAnd(b_.CreateICmpEQ(a, min), b_.CreateICmpEQ(c, iconst(t, -1))));
      }
      llvm::Value* safe_c = b_.CreateSelect(unsafe, iconst(t, 1), c);
      if (k == OpKind::kDiv) {
        llvm::Value* q = s ? b_.CreateSDiv(a, safe_c) : b_.CreateUDiv(a, safe_c);  // MIN / 1 = MIN
        return b_.CreateSelect(by_zero, iconst(t, -1), q);
      }
      llvm::Value* r = s ? b_.CreateSRem(a, safe_c) : b_.CreateURem(a, safe_c);  // MIN % 1 = 0
      return b_.CreateSelect(by_zero, a, r);
    }
    default: return no_rule(k, t);
  }
}

absl::StatusOr<llvm::Value*> ElementEmitter::compare(OpKind k, DType t, llvm::Value* a, llvm::Value* c) {
  using P = llvm::CmpInst::Predicate;
  P p;
  if (is_floating(t)) {  // ordered, except != (true when either is NaN), as in C++
    switch (k) {
      case OpKind::kEq: p = P::FCMP_OEQ; break;
      case OpKind::kNe: p = P::FCMP_UNE; break;
      case OpKind::kLt: p = P::FCMP_OLT; break;
      case OpKind::kLe: p = P::FCMP_OLE; break;
      case OpKind::kGt: p = P::FCMP_OGT; break;
      case OpKind::kGe: p = P::FCMP_OGE; break;
      default: return no_rule(k, t);
    }
    return b_.CreateFCmp(p, a, c);
  }
  const bool s = is_signed_integer(t);
  switch (k) {
    case OpKind::kEq: p = P::ICMP_EQ; break;
    case OpKind::kNe: p = P::ICMP_NE; break;
    case OpKind::kLt: p = s ? P::ICMP_SLT : P::ICMP_ULT; break;
    case OpKind::kLe: p = s ? P::ICMP_SLE : P::ICMP_ULE; break;
    case OpKind::kGt: p = s ? P::ICMP_SGT : P::ICMP_UGT; break;
    case OpKind::kGe: p = s ? P::ICMP_SGE : P::ICMP_UGE; break;
    default: return no_rule(k, t);
  }
  return b_.CreateICmp(p, a, c);
}

absl::StatusOr<llvm::Value*> ElementEmitter::convert(DType from, DType to, llvm::Value* x) {
  llvm::Type* tt = compute_type(to);
  if (from == to) return x;
  if (is_bool(to)) {  // x != 0 (NaN converts to true)
    return is_floating(from) ? b_.CreateFCmpUNE(x, fconst(from, 0.0)) : b_.CreateICmpNE(x, iconst(from, 0));
  }
  if (is_bool(from)) return is_floating(to) ? b_.CreateUIToFP(x, tt) : b_.CreateZExt(x, tt);
  if (is_floating(from) && is_floating(to)) return b_.CreateFPCast(x, tt);
  if (is_floating(from)) {  // saturating, NaN -> 0 (elementwise.cc convert_value)
    const auto id = is_signed_integer(to) ? llvm::Intrinsic::fptosi_sat : llvm::Intrinsic::fptoui_sat;
    return b_.CreateIntrinsic(id, {tt, x->getType()}, {x});
  }
  if (is_floating(to)) return is_signed_integer(from) ? b_.CreateSIToFP(x, tt) : b_.CreateUIToFP(x, tt);
  return b_.CreateIntCast(x, tt, /*isSigned=*/is_signed_integer(from));
}

absl::StatusOr<llvm::Value*> ElementEmitter::node(const ElementNode& n, const std::vector<llvm::Value*>& args,
                                           const std::vector<DType>& arg_dtypes) {
  switch (n.kind) {
    case OpKind::kConvert: return convert(n.operand_dtype, n.dtype, args[0]);
    case OpKind::kIsFinite: {
      if (!is_floating(n.operand_dtype)) return no_rule(n.kind, n.operand_dtype);
      llvm::Value* mag = b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, args[0]);
      return b_.CreateFCmpONE(mag, llvm::ConstantFP::getInfinity(compute_type(n.operand_dtype)));
    }
    case OpKind::kEq: case OpKind::kNe: case OpKind::kLt:
    case OpKind::kLe: case OpKind::kGt: case OpKind::kGe:
      return compare(n.kind, arg_dtypes[0], args[0], args[1]);
    case OpKind::kSelect: return b_.CreateSelect(args[0], args[1], args[2]);
    case OpKind::kClamp:  // min(max(x, lo), hi) with the interpreter's max/min
      return max_min(n.dtype, max_min(n.dtype, args[1], args[0], true), args[2], false);
    case OpKind::kAdd: case OpKind::kSub: case OpKind::kMul: case OpKind::kDiv: case OpKind::kRem:
    case OpKind::kPow: case OpKind::kMax: case OpKind::kMin: case OpKind::kAnd: case OpKind::kOr:
    case OpKind::kXor:
      return binary(n.kind, n.dtype, args[0], args[1]);
    default:
      if (args.size() != 1) return no_rule(n.kind, n.dtype);
      return unary(n.kind, n.dtype, args[0]);
  }
}

absl::StatusOr<std::vector<llvm::Value*>> ElementEmitter::emit_nodes(const std::vector<ElementNode>& nodes,
                                                                     std::vector<llvm::Value*> slots,
                                                                     std::vector<DType> slot_dtypes) {
  for (const ElementNode& nd : nodes) {
    std::vector<llvm::Value*> args;
    std::vector<DType> arg_dtypes;
    for (int a : nd.args) {
      args.push_back(slots[a]);
      arg_dtypes.push_back(slot_dtypes[a]);
    }
    MCX_ASSIGN_OR_RETURN(llvm::Value * v, node(nd, args, arg_dtypes));
    if (is_16bit_float(nd.dtype)) v = widen(nd.dtype, narrow(nd.dtype, v));  // round_to_storage
    slots.push_back(v);
    slot_dtypes.push_back(nd.dtype);
  }
  return slots;
}

absl::Status ElementEmitter::counted_loop(llvm::Function* f, llvm::Value* n, bool parallel,
                                          const std::function<absl::Status(llvm::Value* i)>& body) {
  llvm::BasicBlock* before = b_.GetInsertBlock();
  llvm::BasicBlock* loop = llvm::BasicBlock::Create(ctx_, "loop", f);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx_, "after_loop", f);
  b_.CreateCondBr(b_.CreateICmpSGT(n, b_.getInt64(0)), loop, exit);
  b_.SetInsertPoint(loop);
  llvm::PHINode* i = b_.CreatePHI(b_.getInt64Ty(), 2, "i");
  i->addIncoming(b_.getInt64(0), before);
  llvm::MDNode* saved_group = access_group_;
  access_group_ = parallel ? llvm::MDNode::getDistinct(ctx_, {}) : nullptr;
  llvm::MDNode* group = access_group_;
  absl::Status st = body(i);
  access_group_ = saved_group;
  MCX_RETURN_IF_ERROR(st);
  // The body may have added blocks: the latch is wherever it ended.
  llvm::Value* next = b_.CreateAdd(i, b_.getInt64(1), "next", /*HasNUW=*/true, /*HasNSW=*/true);
  i->addIncoming(next, b_.GetInsertBlock());
  llvm::BranchInst* br = b_.CreateCondBr(b_.CreateICmpEQ(next, n), exit, loop);
  if (parallel) {
    // The loop's identity: iterations are independent (parallel accesses), so it may be vectorised.
    llvm::Metadata* accesses[] = {llvm::MDString::get(ctx_, "llvm.loop.parallel_accesses"), group};
    llvm::TempMDTuple self = llvm::MDNode::getTemporary(ctx_, {});
    llvm::MDNode* loop_id = llvm::MDNode::getDistinct(ctx_, {self.get(), llvm::MDNode::get(ctx_, accesses)});
    loop_id->replaceOperandWith(0, loop_id);
    br->setMetadata(llvm::LLVMContext::MD_loop, loop_id);
  }
  b_.SetInsertPoint(exit);
  return absl::OkStatus();
}

}  // namespace mcx::kernelgen
