#include "mcx/backend/cpu/codegen/math_helpers.h"

#include <cmath>

#include "mcx/backend/cpu/vmath.h"
#include "mcx/core/special_functions.h"

namespace mcx::cpu::codegen {
namespace {

template <VFn F, typename T>
T one(T x) {
  T y;
  vmath(F, &x, &y, 1);
  return y;
}

}  // namespace
}  // namespace mcx::cpu::codegen

// Each name in a float ("...f") and a double version; erf is scalar libm in the interpreter too.
#define MCX_CG_UNARY(name, fn)                             \
  float mcx_cg_##name##f(float x) { return one<fn>(x); } \
  double mcx_cg_##name(double x) { return one<fn>(x); }

extern "C" {
// NOLINTBEGIN(readability-identifier-naming): C symbols named for the JIT.
using mcx::cpu::VFn;
using mcx::cpu::codegen::one;
MCX_CG_UNARY(exp, VFn::kExp)
MCX_CG_UNARY(log, VFn::kLog)
MCX_CG_UNARY(log1p, VFn::kLog1p)
MCX_CG_UNARY(expm1, VFn::kExpm1)
MCX_CG_UNARY(tanh, VFn::kTanh)
MCX_CG_UNARY(sin, VFn::kSin)
MCX_CG_UNARY(cos, VFn::kCos)
float mcx_cg_erff(float x) { return std::erf(x); }
double mcx_cg_erf(double x) { return std::erf(x); }
float mcx_cg_erfcf(float x) { return std::erfc(x); }
double mcx_cg_erfc(double x) { return std::erfc(x); }
float mcx_cg_erf_invf(float x) { return static_cast<float>(mcx::erf_inv(static_cast<double>(x))); }
double mcx_cg_erf_inv(double x) { return mcx::erf_inv(x); }
float mcx_cg_powf(float x, float y) {
  float r;
  mcx::cpu::vpow(&x, &y, &r, 1);
  return r;
}
double mcx_cg_pow(double x, double y) {
  double r;
  mcx::cpu::vpow(&x, &y, &r, 1);
  return r;
}
// NOLINTEND(readability-identifier-naming)
}
#undef MCX_CG_UNARY

namespace mcx::cpu::codegen {

const std::vector<MathHelper>& math_helpers() {
  static const std::vector<MathHelper> kHelpers = {
      {"mcx_cg_expf", reinterpret_cast<void*>(&mcx_cg_expf), "expf", 1, false},
      {"mcx_cg_logf", reinterpret_cast<void*>(&mcx_cg_logf), "logf", 1, false},
      {"mcx_cg_log1pf", reinterpret_cast<void*>(&mcx_cg_log1pf), "log1pf", 1, false},
      {"mcx_cg_expm1f", reinterpret_cast<void*>(&mcx_cg_expm1f), "expm1f", 1, false},
      {"mcx_cg_tanhf", reinterpret_cast<void*>(&mcx_cg_tanhf), "tanhf", 1, false},
      {"mcx_cg_sinf", reinterpret_cast<void*>(&mcx_cg_sinf), "sinf", 1, false},
      {"mcx_cg_cosf", reinterpret_cast<void*>(&mcx_cg_cosf), "cosf", 1, false},
      // The interpreter computes erf and erfc with the scalar libm functions and erf_inv with
      // core/special_functions.h: no vector variants, same values.
      {"mcx_cg_erff", reinterpret_cast<void*>(&mcx_cg_erff), "", 1, false},
      {"mcx_cg_erfcf", reinterpret_cast<void*>(&mcx_cg_erfcf), "", 1, false},
      {"mcx_cg_erf_invf", reinterpret_cast<void*>(&mcx_cg_erf_invf), "", 1, false},
      {"mcx_cg_powf", reinterpret_cast<void*>(&mcx_cg_powf), "powf", 2, false},
      {"mcx_cg_exp", reinterpret_cast<void*>(&mcx_cg_exp), "exp", 1, true},
      {"mcx_cg_log", reinterpret_cast<void*>(&mcx_cg_log), "log", 1, true},
      {"mcx_cg_log1p", reinterpret_cast<void*>(&mcx_cg_log1p), "log1p", 1, true},
      {"mcx_cg_expm1", reinterpret_cast<void*>(&mcx_cg_expm1), "expm1", 1, true},
      {"mcx_cg_tanh", reinterpret_cast<void*>(&mcx_cg_tanh), "tanh", 1, true},
      {"mcx_cg_sin", reinterpret_cast<void*>(&mcx_cg_sin), "sin", 1, true},
      {"mcx_cg_cos", reinterpret_cast<void*>(&mcx_cg_cos), "cos", 1, true},
      {"mcx_cg_erf", reinterpret_cast<void*>(&mcx_cg_erf), "", 1, true},
      {"mcx_cg_erfc", reinterpret_cast<void*>(&mcx_cg_erfc), "", 1, true},
      {"mcx_cg_erf_inv", reinterpret_cast<void*>(&mcx_cg_erf_inv), "", 1, true},
      {"mcx_cg_pow", reinterpret_cast<void*>(&mcx_cg_pow), "pow", 2, true},
  };
  return kHelpers;
}

}  // namespace mcx::cpu::codegen
