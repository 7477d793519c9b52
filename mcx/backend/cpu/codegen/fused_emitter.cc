// IR emission for fused element-wise groups. Each node's rule mirrors the interpreter's kernel for the
// same op and dtype in elementwise.cc (same operations in the same order, the same special cases for
// NaN, integer division by zero and saturating conversions), so the two agree bit for bit; the tests in
// tests/backend/codegen_test.cc compare them over every op and dtype.
#include "mcx/backend/cpu/codegen/fused_emitter.h"

#include "absl/strings/str_cat.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/Metadata.h"
#include "llvm/Transforms/Utils/ModuleUtils.h"
#include "mcx/core/error.h"

namespace mcx::cpu::codegen {
namespace {

using ir::OpKind;

bool is_16bit_float(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }

// float16 and bfloat16 values are computed in float, as in the interpreter: a leaf is widened when it is
// loaded, a node of a 16-bit dtype rounds its float result to that dtype and back (the interpreter's
// round_to_storage after every such node), and an output is narrowed when it is stored. The conversions are
// core/dtype.cc's integer algorithms written out in IR (not LLVM's fpext/fptrunc), so NaN payloads and every
// rounding agree with the interpreter bit for bit.

class Emitter {
 public:
  Emitter(llvm::LLVMContext& ctx, llvm::Module& m, const VectorVariants& variants)
      : ctx_(ctx), m_(m), b_(ctx), variants_(variants) {}

  absl::Status emit(const FusedGroup& g, const std::string& symbol);

 private:
  // Type of a value while computing (bool is i1) and in memory (bool is one byte).
  llvm::Type* compute_type(DType t) {
    switch (t) {
      case DType::kBool: return b_.getInt1Ty();
      case DType::kInt8: case DType::kUInt8: return b_.getInt8Ty();
      case DType::kInt16: return b_.getInt16Ty();
      case DType::kInt32: case DType::kUInt32: return b_.getInt32Ty();
      case DType::kInt64: return b_.getInt64Ty();
      case DType::kFloat64: return b_.getDoubleTy();
      default: return b_.getFloatTy();
    }
  }
  llvm::Type* memory_type(DType t) {
    if (is_bool(t)) return b_.getInt8Ty();
    return is_16bit_float(t) ? b_.getInt16Ty() : compute_type(t);
  }

  llvm::Value* load_elem(llvm::Value* base, DType t, llvm::Value* i) {
    llvm::Type* mt = memory_type(t);
    llvm::LoadInst* v = b_.CreateAlignedLoad(mt, b_.CreateInBoundsGEP(mt, base, i),
                                             llvm::Align(dtype_size(t)));
    v->setMetadata(llvm::LLVMContext::MD_access_group, access_group_);
    if (is_16bit_float(t)) return widen(t, v);
    return is_bool(t) ? b_.CreateICmpNE(v, b_.getInt8(0)) : static_cast<llvm::Value*>(v);
  }
  void store_elem(llvm::Value* base, DType t, llvm::Value* i, llvm::Value* v) {
    llvm::Type* mt = memory_type(t);
    if (is_bool(t)) v = b_.CreateZExt(v, mt);
    if (is_16bit_float(t)) v = narrow(t, v);
    llvm::StoreInst* s = b_.CreateAlignedStore(v, b_.CreateInBoundsGEP(mt, base, i), llvm::Align(dtype_size(t)));
    s->setMetadata(llvm::LLVMContext::MD_access_group, access_group_);
  }

  llvm::Constant* u32(uint32_t v) { return b_.getInt32(v); }
  llvm::Value* float_of_bits(llvm::Value* bits) { return b_.CreateBitCast(bits, b_.getFloatTy()); }
  llvm::Value* bits_of_float(llvm::Value* f) { return b_.CreateBitCast(f, b_.getInt32Ty()); }

  // The i16 bits of a float16 or bfloat16 as a float (core/dtype.cc half_to_float, bfloat16_to_float).
  llvm::Value* widen(DType t, llvm::Value* bits16) {
    llvm::Value* h = b_.CreateZExt(bits16, b_.getInt32Ty());
    if (t == DType::kBFloat16) return float_of_bits(b_.CreateShl(h, 16));
    llvm::Value* sign = b_.CreateShl(b_.CreateAnd(h, u32(0x8000u)), 16);
    llvm::Value* exp = b_.CreateAnd(b_.CreateLShr(h, 10), u32(0x1fu));
    llvm::Value* mant = b_.CreateAnd(h, u32(0x3ffu));
    // exp == 0: mant * 2^-24, exact, with the sign (so 0x8000 is -0).
    llvm::Value* sub = bits_of_float(b_.CreateFMul(b_.CreateUIToFP(mant, b_.getFloatTy()),
                                                   llvm::ConstantFP::get(b_.getFloatTy(), 0x1p-24)));
    llvm::Value* subnormal = b_.CreateOr(sign, sub);
    llvm::Value* inf_nan = b_.CreateOr(b_.CreateOr(sign, u32(0x7f800000u)), b_.CreateShl(mant, 13));
    llvm::Value* normal = b_.CreateOr(b_.CreateOr(sign, b_.CreateShl(b_.CreateAdd(exp, u32(112)), 23)),
                                      b_.CreateShl(mant, 13));
    llvm::Value* bits = b_.CreateSelect(b_.CreateICmpEQ(exp, u32(0)), subnormal,
                                        b_.CreateSelect(b_.CreateICmpEQ(exp, u32(31)), inf_nan, normal));
    return float_of_bits(bits);
  }

  // A float rounded to float16 or bfloat16, as i16 bits (core/dtype.cc float_to_half, float_to_bfloat16:
  // round to nearest even, overflow to inf, NaN quieted with its top payload bits kept).
  llvm::Value* narrow(DType t, llvm::Value* f) {
    llvm::Value* x = bits_of_float(f);
    if (t == DType::kBFloat16) {
      llvm::Value* nan = b_.CreateICmpUGT(b_.CreateAnd(x, u32(0x7fffffffu)), u32(0x7f800000u));
      llvm::Value* quiet = b_.CreateOr(b_.CreateLShr(x, 16), u32(0x0040u));
      llvm::Value* bias = b_.CreateAdd(u32(0x7fffu), b_.CreateAnd(b_.CreateLShr(x, 16), u32(1)));
      llvm::Value* rounded = b_.CreateLShr(b_.CreateAdd(x, bias), 16);
      return b_.CreateTrunc(b_.CreateSelect(nan, quiet, rounded), b_.getInt16Ty());
    }
    llvm::Value* sign = b_.CreateAnd(x, u32(0x80000000u));
    llvm::Value* mag = b_.CreateXor(x, sign);
    llvm::Value* nan_bits = b_.CreateOr(u32(0x7e00u), b_.CreateAnd(b_.CreateLShr(mag, 13), u32(0x3ffu)));
    llvm::Value* big = b_.CreateSelect(b_.CreateICmpUGT(mag, u32(0x7f800000u)), nan_bits, u32(0x7c00u));
    const uint32_t magic = (127 - 15 + 23 - 10 + 1) << 23;  // 0.5 in the half's subnormal ulp scale
    llvm::Value* g = b_.CreateFAdd(float_of_bits(mag), float_of_bits(u32(magic)));
    llvm::Value* small = b_.CreateSub(bits_of_float(g), u32(magic));
    llvm::Value* odd = b_.CreateAnd(b_.CreateLShr(mag, 13), u32(1));
    llvm::Value* rebased = b_.CreateAdd(b_.CreateAdd(mag, u32(static_cast<uint32_t>(15 - 127) << 23)), u32(0xfffu));
    llvm::Value* normal = b_.CreateLShr(b_.CreateAdd(rebased, odd), 13);
    llvm::Value* out = b_.CreateSelect(b_.CreateICmpUGE(mag, u32(0x47800000u)), big,
                                       b_.CreateSelect(b_.CreateICmpULT(mag, u32(0x38800000u)), small, normal));
    return b_.CreateTrunc(b_.CreateOr(out, b_.CreateLShr(sign, 16)), b_.getInt16Ty());
  }

  llvm::Constant* fconst(DType t, double v) { return llvm::ConstantFP::get(compute_type(t), v); }
  llvm::Constant* iconst(DType t, int64_t v) {
    return llvm::ConstantInt::get(compute_type(t), static_cast<uint64_t>(v), /*IsSigned=*/true);
  }

  // A call of a math helper; the call site lists the helper's vector variants for the vectoriser.
  llvm::Value* call_helper(std::string_view name, std::initializer_list<llvm::Value*> args);

  // The interpreter's NaN-propagating max/min (elementwise.cc max_nan/min_nan): NaN in a wins, then NaN
  // in b, then the comparison (which keeps b on ties, so max(-0, +0) is +0 and max(+0, -0) is -0).
  llvm::Value* float_max_min(llvm::Value* a, llvm::Value* c, bool is_max) {
    llvm::Value* a_nan = b_.CreateFCmpUNO(a, a);
    llvm::Value* c_nan = b_.CreateFCmpUNO(c, c);
    llvm::Value* pick_a = is_max ? b_.CreateFCmpOGT(a, c) : b_.CreateFCmpOLT(a, c);
    return b_.CreateSelect(a_nan, a, b_.CreateSelect(c_nan, c, b_.CreateSelect(pick_a, a, c)));
  }
  llvm::Value* max_min(DType t, llvm::Value* a, llvm::Value* c, bool is_max) {
    if (is_floating(t)) return float_max_min(a, c, is_max);
    if (is_bool(t)) return is_max ? b_.CreateOr(a, c) : b_.CreateAnd(a, c);
    llvm::Value* pick_a;
    if (is_signed_integer(t)) pick_a = is_max ? b_.CreateICmpSGT(a, c) : b_.CreateICmpSLT(a, c);
    else pick_a = is_max ? b_.CreateICmpUGT(a, c) : b_.CreateICmpULT(a, c);
    return b_.CreateSelect(pick_a, a, c);
  }

  absl::StatusOr<llvm::Value*> unary(OpKind k, DType t, llvm::Value* x);
  absl::StatusOr<llvm::Value*> binary(OpKind k, DType t, llvm::Value* a, llvm::Value* c);
  absl::StatusOr<llvm::Value*> compare(OpKind k, DType operand, llvm::Value* a, llvm::Value* c);
  absl::StatusOr<llvm::Value*> convert(DType from, DType to, llvm::Value* x);
  absl::StatusOr<llvm::Value*> node(const FusedNode& n, const std::vector<llvm::Value*>& args,
                                    const std::vector<DType>& arg_dtypes);

  absl::Status no_rule(OpKind k, DType t) {
    return absl::UnimplementedError(absl::StrCat("[codegen] no rule for ", std::string(ir::op_name(k)), " on ",
                                                 std::string(dtype_short_name(t))));
  }

  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  llvm::IRBuilder<> b_;
  const VectorVariants& variants_;
  llvm::MDNode* access_group_ = nullptr;
};

llvm::Value* Emitter::call_helper(std::string_view name, std::initializer_list<llvm::Value*> args) {
  llvm::Type* t = (*args.begin())->getType();
  std::vector<llvm::Type*> params(args.size(), t);
  llvm::FunctionType* fty = llvm::FunctionType::get(t, params, false);
  llvm::Function* f = m_.getFunction(name);
  if (f == nullptr) {
    f = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, std::string(name), m_);
    f->setDoesNotThrow();
    f->setDoesNotAccessMemory();
    f->setWillReturn();
  }
  llvm::CallInst* call = b_.CreateCall(f, std::vector<llvm::Value*>(args));
  call->setDoesNotAccessMemory();
  auto it = variants_.find(name);
  if (it == variants_.end() || it->second.empty()) return call;
  std::string mappings;
  for (const VectorVariant& v : it->second) {
    // Declare the vector function (kept alive through llvm.compiler.used so that nothing removes the
    // declaration before the vectoriser looks for it).
    if (m_.getFunction(v.symbol) == nullptr) {
      llvm::Type* vt = llvm::FixedVectorType::get(t, v.width);
      std::vector<llvm::Type*> vparams(args.size(), vt);
      llvm::Function* vf = llvm::Function::Create(llvm::FunctionType::get(vt, vparams, false),
                                                  llvm::Function::ExternalLinkage, v.symbol, m_);
      vf->setDoesNotThrow();
      vf->setDoesNotAccessMemory();
      vf->setWillReturn();
      llvm::appendToCompilerUsed(m_, {vf});
    }
    if (!mappings.empty()) mappings += ",";
    absl::StrAppend(&mappings, "_ZGV_LLVM_N", v.width, std::string(args.size(), 'v'), "_", std::string(name), "(",
                    v.symbol, ")");
  }
  call->addFnAttr(llvm::Attribute::get(ctx_, "vector-function-abi-variant", mappings));
  return call;
}

absl::StatusOr<llvm::Value*> Emitter::unary(OpKind k, DType t, llvm::Value* x) {
  const bool d = t == DType::kFloat64;
  auto helper = [&](const char* f) { return call_helper(absl::StrCat("mcx_cg_", f, d ? "" : "f"), {x}); };
  if (is_floating(t)) {
    switch (k) {
      case OpKind::kExp: return helper("exp");
      case OpKind::kLog: return helper("log");
      case OpKind::kLog1p: return helper("log1p");
      case OpKind::kExpm1: return helper("expm1");
      case OpKind::kTanh: return helper("tanh");
      case OpKind::kSin: return helper("sin");
      case OpKind::kCos: return helper("cos");
      case OpKind::kErf: return helper("erf");
      case OpKind::kErfc: return helper("erfc");
      case OpKind::kErfInv: return helper("erf_inv");
      case OpKind::kLogistic: {  // 1 / (1 + exp(-x)), as vmath computes it
        llvm::Value* e = call_helper(absl::StrCat("mcx_cg_exp", d ? "" : "f"), {b_.CreateFNeg(x)});
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

absl::StatusOr<llvm::Value*> Emitter::binary(OpKind k, DType t, llvm::Value* a, llvm::Value* c) {
  if (k == OpKind::kMax || k == OpKind::kMin) return max_min(t, a, c, k == OpKind::kMax);
  if (is_floating(t)) {
    switch (k) {
      case OpKind::kAdd: return b_.CreateFAdd(a, c);
      case OpKind::kSub: return b_.CreateFSub(a, c);
      case OpKind::kMul: return b_.CreateFMul(a, c);
      case OpKind::kDiv: return b_.CreateFDiv(a, c);
      case OpKind::kRem: return b_.CreateFRem(a, c);  // fmod
      case OpKind::kPow: return call_helper(t == DType::kFloat64 ? "mcx_cg_pow" : "mcx_cg_powf", {a, c});
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

absl::StatusOr<llvm::Value*> Emitter::compare(OpKind k, DType t, llvm::Value* a, llvm::Value* c) {
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

absl::StatusOr<llvm::Value*> Emitter::convert(DType from, DType to, llvm::Value* x) {
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

absl::StatusOr<llvm::Value*> Emitter::node(const FusedNode& n, const std::vector<llvm::Value*>& args,
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

absl::Status Emitter::emit(const FusedGroup& g, const std::string& symbol) {
  llvm::Type* ptr = b_.getPtrTy();
  llvm::FunctionType* fty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, b_.getInt64Ty()}, false);
  llvm::Function* f = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, symbol, m_);
  f->setDoesNotThrow();
  llvm::Argument* leaves_arg = f->getArg(0);
  llvm::Argument* outs_arg = f->getArg(1);
  llvm::Argument* n = f->getArg(2);
  leaves_arg->addAttr(llvm::Attribute::NoAlias);
  outs_arg->addAttr(llvm::Attribute::NoAlias);

  llvm::BasicBlock* entry = llvm::BasicBlock::Create(ctx_, "entry", f);
  llvm::BasicBlock* loop = llvm::BasicBlock::Create(ctx_, "loop", f);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx_, "exit", f);
  access_group_ = llvm::MDNode::getDistinct(ctx_, {});

  b_.SetInsertPoint(entry);
  const int num_leaves = static_cast<int>(g.leaf_dtypes.size());
  std::vector<llvm::Value*> leaf_ptr, out_ptr;
  for (int k = 0; k < num_leaves; ++k) {
    leaf_ptr.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, leaves_arg, k)));
  }
  for (size_t j = 0; j < g.outputs.size(); ++j) {
    out_ptr.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, outs_arg, j)));
  }
  b_.CreateCondBr(b_.CreateICmpSGT(n, b_.getInt64(0)), loop, exit);

  b_.SetInsertPoint(loop);
  llvm::PHINode* i = b_.CreatePHI(b_.getInt64Ty(), 2, "i");
  i->addIncoming(b_.getInt64(0), entry);
  // Every leaf is read before any output is written: an output may be the storage of a leaf.
  std::vector<llvm::Value*> slot;
  std::vector<DType> slot_dtype;
  for (int k = 0; k < num_leaves; ++k) {
    slot.push_back(load_elem(leaf_ptr[k], g.leaf_dtypes[k], i));
    slot_dtype.push_back(g.leaf_dtypes[k]);
  }
  for (const FusedNode& nd : g.nodes) {
    std::vector<llvm::Value*> args;
    std::vector<DType> arg_dtypes;
    for (int a : nd.args) {
      args.push_back(slot[a]);
      arg_dtypes.push_back(slot_dtype[a]);
    }
    MCX_ASSIGN_OR_RETURN(llvm::Value * v, node(nd, args, arg_dtypes));
    if (is_16bit_float(nd.dtype)) v = widen(nd.dtype, narrow(nd.dtype, v));  // round_to_storage
    slot.push_back(v);
    slot_dtype.push_back(nd.dtype);
  }
  for (size_t j = 0; j < g.outputs.size(); ++j) {
    const int s = num_leaves + g.outputs[j];
    store_elem(out_ptr[j], slot_dtype[s], i, slot[s]);
  }
  llvm::Value* next = b_.CreateAdd(i, b_.getInt64(1), "next", /*HasNUW=*/true, /*HasNSW=*/true);
  i->addIncoming(next, loop);
  llvm::BranchInst* br = b_.CreateCondBr(b_.CreateICmpEQ(next, n), exit, loop);
  // The loop's identity: iterations are independent (parallel accesses), so it may be vectorised.
  llvm::Metadata* parallel[] = {llvm::MDString::get(ctx_, "llvm.loop.parallel_accesses"), access_group_};
  llvm::TempMDTuple self = llvm::MDNode::getTemporary(ctx_, {});
  llvm::MDNode* loop_id = llvm::MDNode::getDistinct(ctx_, {self.get(), llvm::MDNode::get(ctx_, parallel)});
  loop_id->replaceOperandWith(0, loop_id);
  br->setMetadata(llvm::LLVMContext::MD_loop, loop_id);

  b_.SetInsertPoint(exit);
  b_.CreateRetVoid();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<llvm::Module>> emit_fused_module(const FusedGroup& g, const std::string& symbol,
                                                                llvm::LLVMContext& ctx,
                                                                const VectorVariants& variants) {
  auto m = std::make_unique<llvm::Module>(symbol, ctx);
  Emitter e(ctx, *m, variants);
  MCX_RETURN_IF_ERROR(e.emit(g, symbol));
  return m;
}

}  // namespace mcx::cpu::codegen
