#include "mcx/backend/cpu/codegen/math_helpers.h"

#include <cmath>

#include "mcx/backend/cpu/vmath.h"

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

extern "C" {
// NOLINTBEGIN(readability-identifier-naming): C symbols named for the JIT.
using mcx::cpu::VFn;
using mcx::cpu::codegen::one;
float mcx_cg_expf(float x) { return one<VFn::kExp>(x); }
float mcx_cg_logf(float x) { return one<VFn::kLog>(x); }
float mcx_cg_log1pf(float x) { return one<VFn::kLog1p>(x); }
float mcx_cg_expm1f(float x) { return one<VFn::kExpm1>(x); }
float mcx_cg_tanhf(float x) { return one<VFn::kTanh>(x); }
float mcx_cg_sinf(float x) { return one<VFn::kSin>(x); }
float mcx_cg_cosf(float x) { return one<VFn::kCos>(x); }
float mcx_cg_erff(float x) { return std::erf(x); }
float mcx_cg_powf(float x, float y) {
  float r;
  mcx::cpu::vpow(&x, &y, &r, 1);
  return r;
}
double mcx_cg_exp(double x) { return one<VFn::kExp>(x); }
double mcx_cg_log(double x) { return one<VFn::kLog>(x); }
double mcx_cg_log1p(double x) { return one<VFn::kLog1p>(x); }
double mcx_cg_expm1(double x) { return one<VFn::kExpm1>(x); }
double mcx_cg_tanh(double x) { return one<VFn::kTanh>(x); }
double mcx_cg_sin(double x) { return one<VFn::kSin>(x); }
double mcx_cg_cos(double x) { return one<VFn::kCos>(x); }
double mcx_cg_erf(double x) { return std::erf(x); }
double mcx_cg_pow(double x, double y) {
  double r;
  mcx::cpu::vpow(&x, &y, &r, 1);
  return r;
}
// NOLINTEND(readability-identifier-naming)
}

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
      // The interpreter computes erf with the scalar libm function: no vector variant, same values.
      {"mcx_cg_erff", reinterpret_cast<void*>(&mcx_cg_erff), "", 1, false},
      {"mcx_cg_powf", reinterpret_cast<void*>(&mcx_cg_powf), "powf", 2, false},
      {"mcx_cg_exp", reinterpret_cast<void*>(&mcx_cg_exp), "exp", 1, true},
      {"mcx_cg_log", reinterpret_cast<void*>(&mcx_cg_log), "log", 1, true},
      {"mcx_cg_log1p", reinterpret_cast<void*>(&mcx_cg_log1p), "log1p", 1, true},
      {"mcx_cg_expm1", reinterpret_cast<void*>(&mcx_cg_expm1), "expm1", 1, true},
      {"mcx_cg_tanh", reinterpret_cast<void*>(&mcx_cg_tanh), "tanh", 1, true},
      {"mcx_cg_sin", reinterpret_cast<void*>(&mcx_cg_sin), "sin", 1, true},
      {"mcx_cg_cos", reinterpret_cast<void*>(&mcx_cg_cos), "cos", 1, true},
      {"mcx_cg_erf", reinterpret_cast<void*>(&mcx_cg_erf), "", 1, true},
      {"mcx_cg_pow", reinterpret_cast<void*>(&mcx_cg_pow), "pow", 2, true},
  };
  return kHelpers;
}

}  // namespace mcx::cpu::codegen
