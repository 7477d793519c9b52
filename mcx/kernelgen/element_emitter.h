// The IR for one element of an element-wise op: the per-element rules every generated kernel is made from,
// on every platform (the CPU's fused-group and row-kernel emitters, the GPU's kernel emitter). Each node's
// rule mirrors the CPU interpreter's kernel for the same op and dtype (same operations in the same order, the
// same special cases for NaN, integer division by zero and saturating conversions), so the CPU's generated
// code and its interpreter agree bit for bit (tests/backend/codegen_test.cc compares them over every op and
// dtype). Math functions (exp, log, pow...) are the one part a platform supplies (math_calls.h).
//
// float16 and bfloat16 values are computed in float, as in the interpreter: a leaf is widened when it is
// loaded, a node of a 16-bit dtype rounds its float result to that dtype and back (the interpreter's
// round_to_storage after every such node), and an output is narrowed when it is stored. The conversions are
// core/dtype.cc's integer algorithms written out in IR (not LLVM's fpext/fptrunc), so NaN payloads and every
// rounding agree with the interpreter bit for bit.
//
// Includes LLVM headers: included only by the code generators' emitters. Not thread-safe (one per module
// being emitted).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Metadata.h"
#include "llvm/IR/Module.h"
#include "mcx/core/dtype.h"
#include "mcx/ir/op.h"
#include "mcx/kernelgen/element_node.h"
#include "mcx/kernelgen/math_calls.h"

namespace mcx::kernelgen {

inline bool is_16bit_float(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }

class ElementEmitter {
 public:
  // math: how this platform computes math functions; must outlive the emitter.
  ElementEmitter(llvm::LLVMContext& ctx, llvm::Module& m, const MathCalls& math)
      : ctx_(ctx), m_(m), b_(ctx), math_(math) {}

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

  // fn(args) as this platform computes it.
  llvm::Value* math(MathFn fn, llvm::ArrayRef<llvm::Value*> args) { return math_.call(b_, m_, fn, args); }

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

  absl::StatusOr<llvm::Value*> unary(ir::OpKind k, DType t, llvm::Value* x);
  absl::StatusOr<llvm::Value*> binary(ir::OpKind k, DType t, llvm::Value* a, llvm::Value* c);
  absl::StatusOr<llvm::Value*> compare(ir::OpKind k, DType operand, llvm::Value* a, llvm::Value* c);
  absl::StatusOr<llvm::Value*> convert(DType from, DType to, llvm::Value* x);
  absl::StatusOr<llvm::Value*> node(const ElementNode& n, const std::vector<llvm::Value*>& args,
                                    const std::vector<DType>& arg_dtypes);

  // The values of nodes (slots: the leaves' values first, then each node's), each node of a 16-bit dtype
  // rounded as the interpreter stores it. Returns every slot's value.
  absl::StatusOr<std::vector<llvm::Value*>> emit_nodes(const std::vector<ElementNode>& nodes,
                                                       std::vector<llvm::Value*> slots,
                                                       std::vector<DType> slot_dtypes);

  // Emits `for (i = 0; i < n; ++i) body(i)` at the insertion point of function f, and leaves the insertion
  // point after the loop. parallel: the iterations are independent (every load and store body makes
  // carries the loop's access group), so the vectoriser needs no alias checks.
  absl::Status counted_loop(llvm::Function* f, llvm::Value* n, bool parallel,
                            const std::function<absl::Status(llvm::Value* i)>& body);

  // Loads and stores made after this carry `group` as their access group (a loop's parallel-access
  // metadata names it); null: none.
  llvm::IRBuilder<>& builder() { return b_; }
  llvm::LLVMContext& context() { return ctx_; }

  absl::Status no_rule(ir::OpKind k, DType t) {
    return absl::UnimplementedError(absl::StrCat("[kernelgen] no rule for ", std::string(ir::op_name(k)), " on ",
                                                 std::string(dtype_short_name(t))));
  }

 private:
  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  llvm::IRBuilder<> b_;
  const MathCalls& math_;
  llvm::MDNode* access_group_ = nullptr;
};

}  // namespace mcx::kernelgen
