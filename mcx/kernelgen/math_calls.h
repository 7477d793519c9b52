// How generated code computes the math functions the per-element rules need (element_emitter.h). Each
// backend supplies its own: the CPU calls its interpreter's vector math (so generated code and the
// interpreter agree bit for bit), the GPU calls CUDA's libdevice. The rules themselves (which function, on
// which value, with which special cases around it) are shared.
//
// Includes LLVM headers: private to the code generators. Implementations are immutable once made and may
// be shared by emitters on several threads.
#pragma once

#include <string_view>

#include "llvm/ADT/ArrayRef.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Module.h"

namespace mcx::kernelgen {

enum class MathFn { kExp, kLog, kLog1p, kExpm1, kTanh, kSin, kCos, kErf, kErfc, kErfInv, kPow };

// The function's name in C's math library spelling ("exp", "erf_inv" for the inverse error function).
std::string_view math_fn_name(MathFn fn);
// Arguments the function takes (2 for pow, else 1).
int math_fn_arity(MathFn fn);

class MathCalls {
 public:
  virtual ~MathCalls() = default;
  // Emits fn(args) at b's insertion point in m; args are all float or all double (one per arity).
  virtual llvm::Value* call(llvm::IRBuilder<>& b, llvm::Module& m, MathFn fn,
                            llvm::ArrayRef<llvm::Value*> args) const = 0;
};

// A call of an external function `name` that reads and writes no memory and always returns (declared in m
// on first use, the type taken from the arguments).
llvm::CallInst* call_pure_function(llvm::IRBuilder<>& b, llvm::Module& m, std::string_view name,
                                   llvm::ArrayRef<llvm::Value*> args);

}  // namespace mcx::kernelgen
