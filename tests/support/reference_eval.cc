// Naive reference evaluator; see reference_eval.h for the exact semantics. Clarity over speed: every op
// is a loop over output elements with explicit index arithmetic.
#include "tests/support/reference_eval.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/core/shape.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/op.h"
#include "tests/support/reference_control_flow.h"
#include "tests/support/reference_window.h"
#include "tests/support/row_major.h"
#include "tests/support/spmd_reference.h"

namespace mcx::test {
namespace {

using ir::Attrs;
using ir::Instr;
using ir::OpKind;

// A value during evaluation: floating dtypes keep doubles already rounded to the dtype; integer and bool
// dtypes keep int64 already wrapped to the dtype.
struct RVal {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
  std::vector<double> f;
  std::vector<int64_t> i;

  bool fl() const { return is_floating(dtype); }
  int64_t size() const { return fl() ? static_cast<int64_t>(f.size()) : static_cast<int64_t>(i.size()); }
  double d(int64_t k) const { return fl() ? f[k] : static_cast<double>(i[k]); }
};

double round_to(DType t, double v) {
  switch (t) {
    case DType::kFloat64: return v;
    case DType::kFloat32: return static_cast<double>(static_cast<float>(v));
    case DType::kFloat16: return static_cast<double>(half_to_float(float_to_half(static_cast<float>(v))));
    case DType::kBFloat16:
      return static_cast<double>(bfloat16_to_float(float_to_bfloat16(static_cast<float>(v))));
    default: return v;
  }
}

int64_t wrap_to(DType t, int64_t v) {
  switch (t) {
    case DType::kBool: return v != 0 ? 1 : 0;
    case DType::kInt8: return static_cast<int8_t>(static_cast<uint8_t>(v));
    case DType::kInt16: return static_cast<int16_t>(static_cast<uint16_t>(v));
    case DType::kInt32: return static_cast<int32_t>(static_cast<uint32_t>(v));
    case DType::kUInt8: return static_cast<uint8_t>(v);
    case DType::kUInt32: return static_cast<uint32_t>(v);
    default: return v;
  }
}

RVal make(DType t, std::vector<int64_t> dims) {
  RVal r;
  r.dtype = t;
  r.dims = std::move(dims);
  int64_t n = element_count(r.dims);
  if (r.fl()) r.f.assign(n, 0.0); else r.i.assign(n, 0);
  return r;
}

// Saturating float -> integer conversion, NaN -> 0.
int64_t float_to_int(DType t, double v) {
  if (std::isnan(v)) return 0;
  if (t == DType::kBool) return v != 0.0 ? 1 : 0;
  double lo = 0, hi = 0;
  switch (t) {
    case DType::kInt8: lo = -128; hi = 127; break;
    case DType::kInt16: lo = -32768; hi = 32767; break;
    case DType::kInt32: lo = -2147483648.0; hi = 2147483647.0; break;
    case DType::kInt64: lo = -9223372036854775808.0; hi = 9223372036854775807.0; break;
    case DType::kUInt8: lo = 0; hi = 255; break;
    case DType::kUInt32: lo = 0; hi = 4294967295.0; break;
    default: break;
  }
  v = std::trunc(v);
  if (v <= lo) return t == DType::kInt64 ? std::numeric_limits<int64_t>::min() : static_cast<int64_t>(lo);
  if (v >= hi) return t == DType::kInt64 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(hi);
  return static_cast<int64_t>(v);
}

// Stores element k of r from a double (floats) or converts for integer dtypes.
void set_d(RVal& r, int64_t k, double v) {
  if (r.fl()) r.f[k] = round_to(r.dtype, v); else r.i[k] = float_to_int(r.dtype, v);
}
void set_i(RVal& r, int64_t k, int64_t v) {
  if (r.fl()) r.f[k] = round_to(r.dtype, static_cast<double>(v)); else r.i[k] = wrap_to(r.dtype, v);
}
void copy_elem(RVal& dst, int64_t dk, const RVal& src, int64_t sk) {
  if (dst.fl()) dst.f[dk] = src.f[sk]; else dst.i[dk] = src.i[sk];
}


// Builds out (already sized) by mapping each output multi-index to a source flat index, or -1 for fill.
void gather_into(RVal& out, const RVal& src, const std::function<int64_t(const std::vector<int64_t>&)>& map,
                 const RVal* fill) {
  for (int64_t k = 0; k < out.size(); ++k) {
    int64_t s = map(unravel(k, out.dims));
    if (s >= 0) copy_elem(out, k, src, s); else copy_elem(out, k, *fill, 0);
  }
}

absl::Status err(const Instr& in, std::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat("[reference_evaluate] ", std::string(ir::op_name(in.kind)), ": ", std::string(msg)));
}

RVal from_buffer(const Buffer& b) {
  RVal r = make(b.dtype(), b.dims());
  dispatch_dtype(b.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = b.data<T>();
    for (int64_t k = 0; k < r.size(); ++k) {
      if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
        r.f[k] = static_cast<double>(static_cast<float>(p[k]));
      } else if constexpr (std::is_floating_point_v<T>) {
        r.f[k] = static_cast<double>(p[k]);
      } else {
        r.i[k] = static_cast<int64_t>(p[k]);
      }
    }
  });
  return r;
}

Buffer to_buffer(const RVal& r) {
  Buffer b = Buffer::zeros(r.dtype, r.dims);
  dispatch_dtype(r.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = b.mutable_data<T>();
    for (int64_t k = 0; k < r.size(); ++k) {
      if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
        p[k] = T(static_cast<float>(r.f[k]));
      } else if constexpr (std::is_floating_point_v<T>) {
        p[k] = static_cast<T>(r.f[k]);
      } else if constexpr (std::is_same_v<T, bool>) {
        p[k] = r.i[k] != 0;
      } else {
        p[k] = static_cast<T>(r.i[k]);
      }
    }
  });
  return b;
}

// ---- elementwise -------------------------------------------------------------------------------------

// erf_inv by bisection on erfl in long double: slow, independent of the backend's Halley iteration.
double reference_erf_inv(double y) {
  if (std::isnan(y) || y < -1 || y > 1) return std::nan("");
  if (y == 0) return y;
  if (y == 1 || y == -1) return std::copysign(std::numeric_limits<double>::infinity(), y);
  const long double target = std::fabs(static_cast<long double>(y));
  // erf_inv(y) < 2 y below 0.5 (so tiny arguments keep their relative resolution); erfl(7) rounds to 1.
  long double lo = 0, hi = target < 0.5L ? 2 * target : 7;
  for (int i = 0; i < 200; ++i) {
    const long double mid = (lo + hi) / 2;
    // Compare through erfc above 0.5, where 1 - y is exact and erfcl keeps its relative accuracy.
    const bool below = target <= 0.5L ? erfl(mid) < target : erfcl(mid) > 1.0L - target;
    (below ? lo : hi) = mid;
  }
  const double x = static_cast<double>((lo + hi) / 2);
  return y < 0 ? -x : x;
}

double unary_float(OpKind k, double x) {
  switch (k) {
    case OpKind::kNeg: return -x;
    case OpKind::kAbs: return std::fabs(x);
    case OpKind::kSign: return std::isnan(x) ? x : (x > 0 ? 1.0 : (x < 0 ? -1.0 : x));
    case OpKind::kExp: return std::exp(x);
    case OpKind::kLog: return std::log(x);
    case OpKind::kLog1p: return std::log1p(x);
    case OpKind::kExpm1: return std::expm1(x);
    case OpKind::kTanh: return std::tanh(x);
    case OpKind::kLogistic: return 1.0 / (1.0 + std::exp(-x));
    case OpKind::kSqrt: return std::sqrt(x);
    case OpKind::kRsqrt: return 1.0 / std::sqrt(x);
    case OpKind::kFloor: return std::floor(x);
    case OpKind::kCeil: return std::ceil(x);
    case OpKind::kRound: return std::round(x);
    case OpKind::kSin: return std::sin(x);
    case OpKind::kCos: return std::cos(x);
    case OpKind::kErf: return std::erf(x);
    case OpKind::kErfc: return std::erfc(x);
    case OpKind::kErfInv: return reference_erf_inv(x);
    case OpKind::kStopGradient:
    case OpKind::kRematBarrier: return x;
    default: return std::nan("");
  }
}

absl::StatusOr<int64_t> unary_int(const Instr& in, DType t, int64_t x) {
  uint64_t ux = static_cast<uint64_t>(x);
  switch (in.kind) {
    case OpKind::kNeg: return static_cast<int64_t>(0 - ux);
    case OpKind::kAbs: return x < 0 ? static_cast<int64_t>(0 - ux) : x;
    case OpKind::kSign: return x > 0 ? 1 : (x < 0 ? -1 : 0);
    case OpKind::kNot: return t == DType::kBool ? (x == 0 ? 1 : 0) : static_cast<int64_t>(~ux);
    case OpKind::kStopGradient:
    case OpKind::kRematBarrier: return x;
    default: return err(in, absl::StrCat("not defined on ", std::string(dtype_name(t))));
  }
}

double binary_float(OpKind k, double x, double y) {
  switch (k) {
    case OpKind::kAdd: return x + y;
    case OpKind::kSub: return x - y;
    case OpKind::kMul: return x * y;
    case OpKind::kDiv: return x / y;
    case OpKind::kRem: return std::fmod(x, y);
    case OpKind::kPow: return std::pow(x, y);
    case OpKind::kMax: return (std::isnan(x) || std::isnan(y)) ? std::nan("") : (x > y ? x : y);
    case OpKind::kMin: return (std::isnan(x) || std::isnan(y)) ? std::nan("") : (x < y ? x : y);
    default: return std::nan("");
  }
}

int64_t int_pow(int64_t x, int64_t y) {
  if (y < 0) {
    if (x == 1) return 1;
    if (x == -1) return (y % 2 == 0) ? 1 : -1;
    return 0;
  }
  uint64_t result = 1, base = static_cast<uint64_t>(x);
  while (y > 0) {
    if (y & 1) result *= base;
    base *= base;
    y >>= 1;
  }
  return static_cast<int64_t>(result);
}

absl::StatusOr<int64_t> binary_int(const Instr& in, DType t, int64_t x, int64_t y) {
  uint64_t ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  switch (in.kind) {
    case OpKind::kAdd: return static_cast<int64_t>(ux + uy);
    case OpKind::kSub: return static_cast<int64_t>(ux - uy);
    case OpKind::kMul: return static_cast<int64_t>(ux * uy);
    case OpKind::kDiv:
      if (y == 0) return -1;  // wraps to all ones in every integer dtype
      if (x == kMin && y == -1) return kMin;
      return x / y;
    case OpKind::kRem:
      if (y == 0) return x;
      if (x == kMin && y == -1) return 0;
      return x % y;
    case OpKind::kPow: return int_pow(x, y);
    case OpKind::kMax: return x > y ? x : y;
    case OpKind::kMin: return x < y ? x : y;
    case OpKind::kAnd: return static_cast<int64_t>(ux & uy);
    case OpKind::kOr: return static_cast<int64_t>(ux | uy);
    case OpKind::kXor: return static_cast<int64_t>(ux ^ uy);
    default: return err(in, absl::StrCat("not defined on ", std::string(dtype_name(t))));
  }
}

template <typename T>
bool compare(OpKind k, T x, T y) {
  switch (k) {
    case OpKind::kEq: return x == y;
    case OpKind::kNe: return x != y;
    case OpKind::kLt: return x < y;
    case OpKind::kLe: return x <= y;
    case OpKind::kGt: return x > y;
    case OpKind::kGe: return x >= y;
    default: return false;
  }
}

absl::Status check_same_size(const Instr& in, const std::vector<const RVal*>& ops) {
  for (const RVal* o : ops) {
    if (o->dims != ops[0]->dims) return err(in, "operand dims differ");
  }
  return absl::OkStatus();
}

absl::StatusOr<RVal> eval_elementwise(const Instr& in, const std::vector<const RVal*>& ops, RVal out) {
  const ir::OpClass cls = ir::op_info(in.kind).op_class;
  MCX_RETURN_IF_ERROR(check_same_size(in, ops));
  if (ops.empty() || ops[0]->size() != out.size()) return err(in, "result size differs from operand size");
  const int64_t n = out.size();
  const RVal& x = *ops[0];
  if (in.kind == OpKind::kIsFinite) {
    for (int64_t k = 0; k < n; ++k) out.i[k] = x.fl() ? std::isfinite(x.f[k]) : 1;
    return out;
  }
  if (in.kind == OpKind::kSelect) {
    for (int64_t k = 0; k < n; ++k) copy_elem(out, k, ops[0]->i[k] ? *ops[1] : *ops[2], k);
    return out;
  }
  if (in.kind == OpKind::kClamp) {  // clamp(lo, x, hi) = min(max(x, lo), hi)
    const RVal &lo = *ops[0], &v = *ops[1], &hi = *ops[2];
    for (int64_t k = 0; k < n; ++k) {
      if (v.fl()) {
        set_d(out, k, binary_float(OpKind::kMin, binary_float(OpKind::kMax, v.f[k], lo.f[k]), hi.f[k]));
      } else {
        int64_t m = std::max(v.i[k], lo.i[k]);
        set_i(out, k, std::min(m, hi.i[k]));
      }
    }
    return out;
  }
  if (cls == ir::OpClass::kCompare) {
    const RVal& y = *ops[1];
    for (int64_t k = 0; k < n; ++k) {
      out.i[k] = x.fl() ? compare(in.kind, x.f[k], y.f[k]) : compare(in.kind, x.i[k], y.i[k]);
    }
    return out;
  }
  if (cls == ir::OpClass::kUnary) {
    for (int64_t k = 0; k < n; ++k) {
      if (x.fl()) {
        if (in.kind == OpKind::kNot) return err(in, "not defined on floating dtypes");
        set_d(out, k, unary_float(in.kind, x.f[k]));
      } else {
        MCX_ASSIGN_OR_RETURN(int64_t v, unary_int(in, x.dtype, x.i[k]));
        set_i(out, k, v);
      }
    }
    return out;
  }
  if (cls == ir::OpClass::kBinary) {
    const RVal& y = *ops[1];
    for (int64_t k = 0; k < n; ++k) {
      if (x.fl()) {
        set_d(out, k, binary_float(in.kind, x.f[k], y.f[k]));
      } else {
        MCX_ASSIGN_OR_RETURN(int64_t v, binary_int(in, x.dtype, x.i[k], y.i[k]));
        set_i(out, k, v);
      }
    }
    return out;
  }
  return err(in, "not an elementwise op");
}

// ---- threefry ----------------------------------------------------------------------------------------

uint32_t rotl(uint32_t v, int r) { return (v << r) | (v >> (32 - r)); }

}  // namespace

std::pair<uint32_t, uint32_t> threefry2x32_block(uint32_t k0, uint32_t k1, uint32_t x0, uint32_t x1) {
  static constexpr int kRot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  const uint32_t ks[3] = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu};
  uint32_t x[2] = {x0 + ks[0], x1 + ks[1]};
  for (int group = 0; group < 5; ++group) {
    for (int r : kRot[group % 2]) {
      x[0] += x[1];
      x[1] = rotl(x[1], r);
      x[1] ^= x[0];
    }
    // Key injection after every 4 rounds: s = group + 1.
    const uint32_t s = static_cast<uint32_t>(group + 1);
    x[0] += ks[s % 3];
    x[1] += ks[(s + 1) % 3] + s;
  }
  return {x[0], x[1]};
}

namespace {

// ---- structural ops ----------------------------------------------------------------------------------

absl::StatusOr<std::vector<int64_t>> ints(const Instr& in, std::string_view name) {
  return in.attrs.get_ints(name);
}
absl::StatusOr<std::vector<int64_t>> dims_attr(const Instr& in, std::string_view name) {
  MCX_ASSIGN_OR_RETURN(Shape s, in.attrs.get_dims(name));
  return to_concrete(s);
}

int64_t clampi(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Reduction over `dims` with an accumulator per output element.
absl::StatusOr<RVal> eval_reduce(const Instr& in, const RVal& x, RVal out) {
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> rdims, ints(in, "dimensions"));
  std::vector<bool> reduced(x.dims.size(), false);
  for (int64_t d : rdims) {
    if (d < 0 || d >= static_cast<int64_t>(x.dims.size())) return err(in, "reduction dimension out of range");
    reduced[d] = true;
  }
  const int64_t n = out.size();
  const bool fl = x.fl();
  std::vector<double> accf(n);
  std::vector<int64_t> acci(n);
  for (int64_t k = 0; k < n; ++k) {
    switch (in.kind) {
      case OpKind::kReduceSum: accf[k] = 0; acci[k] = 0; break;
      case OpKind::kReduceProd: accf[k] = 1; acci[k] = 1; break;
      case OpKind::kReduceMax:
        accf[k] = -std::numeric_limits<double>::infinity();
        acci[k] = std::numeric_limits<int64_t>::min();
        break;
      default:
        accf[k] = std::numeric_limits<double>::infinity();
        acci[k] = std::numeric_limits<int64_t>::max();
        break;
    }
  }
  for (int64_t k = 0; k < x.size(); ++k) {
    std::vector<int64_t> idx = unravel(k, x.dims), oidx, odims;
    for (size_t a = 0; a < idx.size(); ++a) {
      if (!reduced[a]) { oidx.push_back(idx[a]); odims.push_back(x.dims[a]); }
    }
    int64_t o = ravel(oidx, odims);
    if (fl) {
      double v = x.f[k];
      switch (in.kind) {
        case OpKind::kReduceSum: accf[o] += v; break;
        case OpKind::kReduceProd: accf[o] *= v; break;
        default: accf[o] = binary_float(in.kind == OpKind::kReduceMax ? OpKind::kMax : OpKind::kMin, accf[o], v);
      }
    } else {
      uint64_t a = static_cast<uint64_t>(acci[o]), v = static_cast<uint64_t>(x.i[k]);
      switch (in.kind) {
        case OpKind::kReduceSum: acci[o] = static_cast<int64_t>(a + v); break;
        case OpKind::kReduceProd: acci[o] = static_cast<int64_t>(a * v); break;
        case OpKind::kReduceMax: acci[o] = std::max(acci[o], x.i[k]); break;
        default: acci[o] = std::min(acci[o], x.i[k]); break;
      }
    }
  }
  if (out.dtype != x.dtype) return err(in, "result dtype differs from operand dtype");
  for (int64_t k = 0; k < n; ++k) {
    if (fl) {
      set_d(out, k, accf[k]);
    } else if (acci[k] == std::numeric_limits<int64_t>::min() || acci[k] == std::numeric_limits<int64_t>::max()) {
      // Empty max/min over a narrower integer type: its lowest/highest value.
      if (x.dtype == DType::kInt64 || in.kind == OpKind::kReduceSum || in.kind == OpKind::kReduceProd) {
        out.i[k] = wrap_to(out.dtype, acci[k]);
      } else {
        bool is_max = in.kind == OpKind::kReduceMax;
        int64_t lo = 0, hi = 0;
        switch (x.dtype) {
          case DType::kBool: lo = 0; hi = 1; break;
          case DType::kInt8: lo = -128; hi = 127; break;
          case DType::kInt16: lo = -32768; hi = 32767; break;
          case DType::kInt32: lo = std::numeric_limits<int32_t>::min(); hi = std::numeric_limits<int32_t>::max(); break;
          case DType::kUInt8: lo = 0; hi = 255; break;
          default: lo = 0; hi = std::numeric_limits<uint32_t>::max(); break;
        }
        out.i[k] = is_max ? lo : hi;
      }
    } else {
      out.i[k] = wrap_to(out.dtype, acci[k]);
    }
  }
  return out;
}

absl::StatusOr<RVal> eval_arg(const Instr& in, const RVal& x, RVal out) {
  MCX_ASSIGN_OR_RETURN(int64_t dim, in.attrs.get_int("dimension"));
  if (dim < 0 || dim >= static_cast<int64_t>(x.dims.size())) return err(in, "dimension out of range");
  const bool is_max = in.kind == OpKind::kArgMax;
  for (int64_t k = 0; k < out.size(); ++k) {
    std::vector<int64_t> oidx = unravel(k, out.dims);
    std::vector<int64_t> idx(oidx.begin(), oidx.begin() + dim);
    idx.push_back(0);
    idx.insert(idx.end(), oidx.begin() + dim, oidx.end());
    int64_t best = 0;
    double bestv = 0;
    bool best_nan = false;
    for (int64_t j = 0; j < x.dims[dim]; ++j) {
      idx[dim] = j;
      double v = x.d(ravel(idx, x.dims));
      if (x.fl() && !x.f.empty() && std::isnan(v)) {
        if (!best_nan) { best = j; best_nan = true; }
        continue;
      }
      if (best_nan) continue;
      if (j == 0 || (is_max ? v > bestv : v < bestv)) { best = j; bestv = v; }
    }
    if (!x.fl()) {  // exact integer comparison (doubles lose precision beyond 2^53)
      best = 0;
      for (int64_t j = 0; j < x.dims[dim]; ++j) {
        idx[dim] = j;
        int64_t v = x.i[ravel(idx, x.dims)];
        idx[dim] = best;
        int64_t bv = x.i[ravel(idx, x.dims)];
        if (is_max ? v > bv : v < bv) best = j;
      }
    }
    set_i(out, k, best);
  }
  return out;
}

absl::StatusOr<RVal> eval_dot(const Instr& in, const RVal& l, const RVal& r, RVal out) {
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> lb, ints(in, "lhs_batch"));
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> rb, ints(in, "rhs_batch"));
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> lc, ints(in, "lhs_contracting"));
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> rc, ints(in, "rhs_contracting"));
  if (lb.size() != rb.size() || lc.size() != rc.size()) return err(in, "batch/contracting arity differs");
  auto free_dims = [](int rank, const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    std::vector<int64_t> f;
    for (int d = 0; d < rank; ++d) {
      if (std::find(a.begin(), a.end(), d) == a.end() && std::find(b.begin(), b.end(), d) == b.end()) f.push_back(d);
    }
    return f;
  };
  std::vector<int64_t> lf = free_dims(static_cast<int>(l.dims.size()), lb, lc);
  std::vector<int64_t> rf = free_dims(static_cast<int>(r.dims.size()), rb, rc);
  std::vector<int64_t> cdims;
  for (size_t a = 0; a < lc.size(); ++a) {
    if (l.dims[lc[a]] != r.dims[rc[a]]) return err(in, "contracting dims differ");
    cdims.push_back(l.dims[lc[a]]);
  }
  const int64_t nc = element_count(cdims);
  // Flat offsets of every contracting multi-index in lhs and rhs, computed once (the rest of the index
  // is fixed per output element): with all other coordinates zero, ravel() gives exactly that offset.
  std::vector<int64_t> loff(nc), roff(nc);
  {
    std::vector<int64_t> li(l.dims.size(), 0), ri(r.dims.size(), 0);
    for (int64_t c = 0; c < nc; ++c) {
      std::vector<int64_t> ci = unravel(c, cdims);
      for (size_t a = 0; a < lc.size(); ++a) { li[lc[a]] = ci[a]; ri[rc[a]] = ci[a]; }
      loff[c] = ravel(li, l.dims);
      roff[c] = ravel(ri, r.dims);
    }
  }
  std::vector<int64_t> li(l.dims.size()), ri(r.dims.size());
  for (int64_t k = 0; k < out.size(); ++k) {
    std::vector<int64_t> o = unravel(k, out.dims);
    size_t p = 0;
    std::fill(li.begin(), li.end(), 0);
    std::fill(ri.begin(), ri.end(), 0);
    for (size_t a = 0; a < lb.size(); ++a, ++p) { li[lb[a]] = o[p]; ri[rb[a]] = o[p]; }
    for (int64_t d : lf) li[d] = o[p++];
    for (int64_t d : rf) ri[d] = o[p++];
    const int64_t lbase = ravel(li, l.dims), rbase = ravel(ri, r.dims);
    double accf = 0;
    uint64_t acci = 0;
    for (int64_t c = 0; c < nc; ++c) {
      const int64_t lk = lbase + loff[c], rk = rbase + roff[c];
      if (l.fl()) accf += l.f[lk] * r.f[rk];
      else acci += static_cast<uint64_t>(l.i[lk]) * static_cast<uint64_t>(r.i[rk]);
    }
    if (out.fl()) set_d(out, k, accf); else set_i(out, k, static_cast<int64_t>(acci));
  }
  return out;
}

absl::StatusOr<RVal> eval_threefry(const Instr& in, const RVal& key, const RVal& counts, RVal out) {
  if (key.size() != 2 || counts.dims.empty() || counts.dims.back() != 2) {
    return err(in, "expects key u32[2] and counts u32[..., 2]");
  }
  for (int64_t k = 0; k + 1 < counts.size(); k += 2) {
    auto [y0, y1] = threefry2x32_block(static_cast<uint32_t>(key.i[0]), static_cast<uint32_t>(key.i[1]),
                                       static_cast<uint32_t>(counts.i[k]), static_cast<uint32_t>(counts.i[k + 1]));
    out.i[k] = y0;
    out.i[k + 1] = y1;
  }
  return out;
}

RefArray to_ref(const RVal& v) {
  RefArray r{v.dims, std::vector<double>(static_cast<size_t>(v.size()))};
  for (int64_t k = 0; k < v.size(); ++k) r.values[k] = v.d(k);
  return r;
}

absl::StatusOr<RVal> eval_instr(const Instr& in, const std::vector<const RVal*>& ops) {
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> out_dims, to_concrete(in.type.shape));
  RVal out = make(in.type.dtype, out_dims);
  const int rank = static_cast<int>(out_dims.size());
  auto need = [&](size_t n) -> absl::Status {
    if (ops.size() < n) return err(in, absl::StrCat("expects ", n, " operands, got ", ops.size()));
    return absl::OkStatus();
  };
  if (in.kind != OpKind::kConvert && (ir::is_elementwise(in.kind) || in.kind == OpKind::kIsFinite)) {
    return eval_elementwise(in, ops, std::move(out));
  }
  if (ir::has_regions(in.kind)) {
    std::vector<Buffer> bufs;
    for (const RVal* v : ops) bufs.push_back(to_buffer(*v));
    MCX_ASSIGN_OR_RETURN(std::vector<Buffer> r, reference_control_flow(in, bufs));
    return from_buffer(r.at(static_cast<size_t>(ir::result_index(in))));
  }
  if (is_spmd_op(in.kind)) {  // partition 0 of 1
    std::vector<std::vector<Buffer>> bufs(1);
    for (const RVal* v : ops) bufs[0].push_back(to_buffer(*v));
    MCX_ASSIGN_OR_RETURN(std::vector<Buffer> r, spmd_reference_instr(in, 1, bufs));
    return from_buffer(r[0]);
  }
  switch (in.kind) {
    case OpKind::kConstant: {
      MCX_ASSIGN_OR_RETURN(Buffer b, in.attrs.get_buffer("value"));
      return from_buffer(b);
    }
    case OpKind::kIota: {
      MCX_ASSIGN_OR_RETURN(int64_t dim, in.attrs.get_int("dimension"));
      if (dim < 0 || dim >= rank) return err(in, "dimension out of range");
      for (int64_t k = 0; k < out.size(); ++k) set_i(out, k, unravel(k, out_dims)[dim]);
      return out;
    }
    case OpKind::kConvert: {
      MCX_RETURN_IF_ERROR(need(1));
      const RVal& x = *ops[0];
      for (int64_t k = 0; k < out.size(); ++k) {
        if (x.fl()) set_d(out, k, x.f[k]); else set_i(out, k, x.i[k]);
      }
      return out;
    }
    case OpKind::kBroadcastInDim: {
      MCX_RETURN_IF_ERROR(need(1));
      const RVal& x = *ops[0];
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> bd, ints(in, "broadcast_dimensions"));
      if (bd.size() != x.dims.size()) return err(in, "broadcast_dimensions size differs from operand rank");
      gather_into(out, x, [&](const std::vector<int64_t>& o) {
        std::vector<int64_t> s(x.dims.size());
        for (size_t a = 0; a < bd.size(); ++a) s[a] = x.dims[a] == 1 ? 0 : o[bd[a]];
        return ravel(s, x.dims);
      }, nullptr);
      return out;
    }
    case OpKind::kReshape: {
      MCX_RETURN_IF_ERROR(need(1));
      if (ops[0]->size() != out.size()) return err(in, "element count differs");
      RVal r = *ops[0];
      r.dims = out_dims;
      return r;
    }
    case OpKind::kTranspose: {
      MCX_RETURN_IF_ERROR(need(1));
      const RVal& x = *ops[0];
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> perm, ints(in, "permutation"));
      gather_into(out, x, [&](const std::vector<int64_t>& o) {
        std::vector<int64_t> s(x.dims.size());
        for (size_t a = 0; a < perm.size(); ++a) s[perm[a]] = o[a];
        return ravel(s, x.dims);
      }, nullptr);
      return out;
    }
    case OpKind::kSlice: {
      MCX_RETURN_IF_ERROR(need(1));
      const RVal& x = *ops[0];
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> start, dims_attr(in, "start"));
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> strides, ints(in, "strides"));
      gather_into(out, x, [&](const std::vector<int64_t>& o) {
        std::vector<int64_t> s(o.size());
        for (size_t a = 0; a < o.size(); ++a) s[a] = start[a] + o[a] * strides[a];
        return ravel(s, x.dims);
      }, nullptr);
      return out;
    }
    case OpKind::kDynamicSlice: {
      MCX_RETURN_IF_ERROR(need(1));
      const RVal& x = *ops[0];
      const int r = static_cast<int>(x.dims.size());
      MCX_RETURN_IF_ERROR(need(1 + r));
      std::vector<int64_t> start(r);
      for (int a = 0; a < r; ++a) start[a] = clampi(ops[1 + a]->i[0], 0, x.dims[a] - out_dims[a]);
      gather_into(out, x, [&](const std::vector<int64_t>& o) {
        std::vector<int64_t> s(o.size());
        for (size_t a = 0; a < o.size(); ++a) s[a] = start[a] + o[a];
        return ravel(s, x.dims);
      }, nullptr);
      return out;
    }
    case OpKind::kDynamicUpdateSlice: {
      MCX_RETURN_IF_ERROR(need(2));
      const RVal &x = *ops[0], &u = *ops[1];
      const int r = static_cast<int>(x.dims.size());
      MCX_RETURN_IF_ERROR(need(2 + r));
      std::vector<int64_t> start(r);
      for (int a = 0; a < r; ++a) start[a] = clampi(ops[2 + a]->i[0], 0, x.dims[a] - u.dims[a]);
      out = x;
      for (int64_t k = 0; k < u.size(); ++k) {
        std::vector<int64_t> ui = unravel(k, u.dims);
        for (int a = 0; a < r; ++a) ui[a] += start[a];
        copy_elem(out, ravel(ui, x.dims), u, k);
      }
      return out;
    }
    case OpKind::kConcatenate: {
      MCX_RETURN_IF_ERROR(need(1));
      MCX_ASSIGN_OR_RETURN(int64_t dim, in.attrs.get_int("dimension"));
      if (dim < 0 || dim >= rank) return err(in, "dimension out of range");
      for (int64_t k = 0; k < out.size(); ++k) {
        std::vector<int64_t> o = unravel(k, out_dims);
        int64_t pos = o[dim];
        size_t j = 0;
        while (j < ops.size() && pos >= ops[j]->dims[dim]) pos -= ops[j++]->dims[dim];
        if (j == ops.size()) return err(in, "result larger than the operands");
        o[dim] = pos;
        copy_elem(out, k, *ops[j], ravel(o, ops[j]->dims));
      }
      return out;
    }
    case OpKind::kPad: {
      MCX_RETURN_IF_ERROR(need(2));
      const RVal &x = *ops[0], &pv = *ops[1];
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> low, dims_attr(in, "low"));
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> interior, ints(in, "interior"));
      gather_into(out, x, [&](const std::vector<int64_t>& o) -> int64_t {
        std::vector<int64_t> s(o.size());
        for (size_t a = 0; a < o.size(); ++a) {
          int64_t p = o[a] - low[a];
          int64_t step = interior[a] + 1;
          if (p < 0 || p % step != 0 || p / step >= x.dims[a]) return -1;
          s[a] = p / step;
        }
        return ravel(s, x.dims);
      }, &pv);
      return out;
    }
    case OpKind::kReverse: {
      MCX_RETURN_IF_ERROR(need(1));
      const RVal& x = *ops[0];
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> rdims, ints(in, "dimensions"));
      gather_into(out, x, [&](const std::vector<int64_t>& o) {
        std::vector<int64_t> s = o;
        for (int64_t d : rdims) s[d] = x.dims[d] - 1 - o[d];
        return ravel(s, x.dims);
      }, nullptr);
      return out;
    }
    case OpKind::kReduceSum:
    case OpKind::kReduceMax:
    case OpKind::kReduceMin:
    case OpKind::kReduceProd:
      MCX_RETURN_IF_ERROR(need(1));
      return eval_reduce(in, *ops[0], std::move(out));
    case OpKind::kArgMax:
    case OpKind::kArgMin:
      MCX_RETURN_IF_ERROR(need(1));
      return eval_arg(in, *ops[0], std::move(out));
    case OpKind::kDotGeneral:
      MCX_RETURN_IF_ERROR(need(2));
      return eval_dot(in, *ops[0], *ops[1], std::move(out));
    case OpKind::kCumsum: {
      MCX_RETURN_IF_ERROR(need(1));
      const RVal& x = *ops[0];
      MCX_ASSIGN_OR_RETURN(int64_t dim, in.attrs.get_int("dimension"));
      MCX_ASSIGN_OR_RETURN(int64_t rev, in.attrs.get_int("reverse"));
      if (dim < 0 || dim >= rank) return err(in, "dimension out of range");
      for (int64_t k = 0; k < out.size(); ++k) {
        std::vector<int64_t> o = unravel(k, out_dims);
        int64_t lo = rev ? o[dim] : 0, hi = rev ? x.dims[dim] - 1 : o[dim];
        double accf = 0;
        uint64_t acci = 0;
        for (int64_t j = lo; j <= hi; ++j) {
          o[dim] = j;
          int64_t s = ravel(o, x.dims);
          if (x.fl()) accf += x.f[s]; else acci += static_cast<uint64_t>(x.i[s]);
        }
        if (x.fl()) set_d(out, k, accf); else set_i(out, k, static_cast<int64_t>(acci));
      }
      return out;
    }
    case OpKind::kArgsort: {  // selection by counting: position of element j = how many sort before it
      MCX_RETURN_IF_ERROR(need(1));
      const RVal& x = *ops[0];
      MCX_ASSIGN_OR_RETURN(int64_t dim, in.attrs.get_int("dimension"));
      MCX_ASSIGN_OR_RETURN(int64_t desc, in.attrs.get_int("descending"));
      if (dim < 0 || dim >= rank) return err(in, "dimension out of range");
      auto key = [&](const std::vector<int64_t>& o) {
        const int64_t s = ravel(o, x.dims);
        return x.fl() ? x.f[s] : static_cast<double>(x.i[s]);
      };
      // a strictly before b in the ascending order (NaN above everything)?
      auto before = [](double a, double b) { return std::isnan(a) ? false : (std::isnan(b) ? true : a < b); };
      for (int64_t k = 0; k < out.size(); ++k) {
        std::vector<int64_t> o = unravel(k, out_dims);
        const double v = key(o);
        const int64_t j = o[dim];
        int64_t pos = 0;
        for (int64_t t = 0; t < x.dims[dim]; ++t) {
          o[dim] = t;
          const double u = key(o);
          const bool ahead = desc ? before(v, u) : before(u, v);
          const bool tie = !before(u, v) && !before(v, u);
          pos += ahead || (tie && t < j);
        }
        o[dim] = pos;
        set_i(out, ravel(o, out_dims), j);
      }
      return out;
    }
    case OpKind::kTake: {
      MCX_RETURN_IF_ERROR(need(2));
      const RVal &x = *ops[0], &idx = *ops[1];
      if (x.dims.empty() || x.dims[0] == 0) return err(in, "operand needs a non-empty leading axis");
      const int64_t row = element_count(std::vector<int64_t>(x.dims.begin() + 1, x.dims.end()));
      for (int64_t j = 0; j < idx.size(); ++j) {
        int64_t src_row = clampi(idx.i[j], 0, x.dims[0] - 1);
        for (int64_t e = 0; e < row; ++e) copy_elem(out, j * row + e, x, src_row * row + e);
      }
      return out;
    }
    case OpKind::kScatterAdd: {
      MCX_RETURN_IF_ERROR(need(3));
      const RVal &x = *ops[0], &idx = *ops[1], &upd = *ops[2];
      if (x.dims.empty() || x.dims[0] == 0) return err(in, "operand needs a non-empty leading axis");
      const int64_t row = element_count(std::vector<int64_t>(x.dims.begin() + 1, x.dims.end()));
      if (upd.size() != idx.size() * row) return err(in, "updates size is not indices size times row size");
      std::vector<double> accf(x.fl() ? x.f : std::vector<double>{});
      std::vector<int64_t> acci(x.fl() ? std::vector<int64_t>{} : x.i);
      for (int64_t j = 0; j < idx.size(); ++j) {
        int64_t dst = clampi(idx.i[j], 0, x.dims[0] - 1);
        for (int64_t e = 0; e < row; ++e) {
          if (x.fl()) accf[dst * row + e] += upd.f[j * row + e];
          else acci[dst * row + e] = static_cast<int64_t>(static_cast<uint64_t>(acci[dst * row + e]) +
                                                          static_cast<uint64_t>(upd.i[j * row + e]));
        }
      }
      for (int64_t k = 0; k < out.size(); ++k) {
        if (x.fl()) set_d(out, k, accf[k]); else set_i(out, k, acci[k]);
      }
      return out;
    }
    case OpKind::kThreefry2x32:
      MCX_RETURN_IF_ERROR(need(2));
      return eval_threefry(in, *ops[0], *ops[1], std::move(out));
    case OpKind::kConvGeneralDilated: {
      MCX_RETURN_IF_ERROR(need(2));
      MCX_ASSIGN_OR_RETURN(RefArray y, reference_conv(in.attrs, to_ref(*ops[0]), to_ref(*ops[1]), out_dims));
      for (int64_t k = 0; k < out.size(); ++k) set_d(out, k, y.values[k]);
      return out;
    }
    case OpKind::kReduceWindow: {
      MCX_RETURN_IF_ERROR(need(1));
      MCX_ASSIGN_OR_RETURN(RefArray y, reference_reduce_window(in.attrs, to_ref(*ops[0]), out_dims));
      for (int64_t k = 0; k < out.size(); ++k) set_d(out, k, y.values[k]);
      return out;
    }
    default:
      return err(in, "not supported by the reference evaluator");
  }
}

}  // namespace

absl::StatusOr<Buffer> reference_evaluate_instr(const ir::Instr& in, std::span<const Buffer> operands) {
  std::vector<RVal> vals;
  for (const Buffer& b : operands) vals.push_back(from_buffer(b));
  std::vector<const RVal*> ops;
  for (const RVal& v : vals) ops.push_back(&v);
  MCX_ASSIGN_OR_RETURN(RVal r, eval_instr(in, ops));
  return to_buffer(r);
}

absl::StatusOr<std::vector<Buffer>> reference_evaluate(const ir::Program& program, std::span<const Buffer> args) {
  if (static_cast<int>(args.size()) != program.num_params()) {
    return absl::InvalidArgumentError(absl::StrCat("[reference_evaluate] expected ", program.num_params(),
                                                   " arguments, got ", args.size()));
  }
  std::vector<RVal> values;
  values.reserve(program.num_values());
  for (int p = 0; p < program.num_params(); ++p) {
    const AbstractValue& t = program.params[p];
    MCX_ASSIGN_OR_RETURN(std::vector<int64_t> dims, to_concrete(t.shape));
    if (args[p].dtype() != t.dtype || args[p].dims() != dims) {
      return absl::InvalidArgumentError(absl::StrCat("[reference_evaluate] argument ", p, " expected ",
                                                     t.to_string(), ", got ", args[p].abstract_value().to_string()));
    }
    values.push_back(from_buffer(args[p]));
  }
  for (size_t n = 0; n < program.instrs.size(); ++n) {
    const Instr& in = program.instrs[n];
    std::vector<const RVal*> ops;
    for (ir::ValueId v : in.operands) {
      if (v < 0 || v >= static_cast<ir::ValueId>(values.size())) {
        return absl::InvalidArgumentError(absl::StrCat("[reference_evaluate] instruction ", n,
                                                       " uses undefined value ", v));
      }
      ops.push_back(&values[v]);
    }
    absl::StatusOr<RVal> r = eval_instr(in, ops);
    if (!r.ok()) {
      return absl::Status(r.status().code(), absl::StrCat(r.status().message(), " (instruction ", n, ")"));
    }
    values.push_back(*std::move(r));
  }
  std::vector<Buffer> out;
  for (ir::ValueId v : program.results) {
    if (v < 0 || v >= static_cast<ir::ValueId>(values.size())) {
      return absl::InvalidArgumentError(absl::StrCat("[reference_evaluate] result refers to undefined value ", v));
    }
    out.push_back(to_buffer(values[v]));
  }
  return out;
}

}  // namespace mcx::test
