#include "tests/support/test_util.h"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <random>
#include <sstream>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/ir/autodiff.h"
#include "mcx/ir/batching.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/forward.h"
#include "mcx/ir/shape_rules.h"
#include "tests/support/reference_eval.h"

namespace mcx::test {
namespace {

// Writes doubles into a Buffer of any dtype.
void fill_from_doubles(Buffer& b, const std::vector<double>& values) {
  dispatch_dtype(b.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = b.mutable_data<T>();
    for (size_t k = 0; k < values.size(); ++k) {
      if constexpr (std::is_same_v<T, bool>) {
        p[k] = values[k] != 0.0;
      } else if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
        p[k] = T(static_cast<float>(values[k]));
      } else {
        p[k] = static_cast<T>(values[k]);
      }
    }
  });
}

std::string index_string(int64_t flat, const std::vector<int64_t>& dims) {
  std::vector<int64_t> idx(dims.size(), 0);
  for (int k = static_cast<int>(dims.size()) - 1; k >= 0; --k) {
    if (dims[k] > 0) { idx[k] = flat % dims[k]; flat /= dims[k]; }
  }
  std::string s = "[";
  for (size_t k = 0; k < idx.size(); ++k) absl::StrAppend(&s, k ? "," : "", idx[k]);
  return s + "]";
}

int64_t product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

}  // namespace

Buffer buffer_from_doubles(DType dtype, std::vector<int64_t> dims, const std::vector<double>& values) {
  Buffer b = Buffer::zeros(dtype, std::move(dims));
  if (static_cast<int64_t>(values.size()) != b.num_elements()) {
    throw InvalidArgument(absl::StrCat("[buffer_from_doubles] expected ", b.num_elements(), " values, got ",
                                       values.size()));
  }
  fill_from_doubles(b, values);
  return b;
}

Buffer scalar_buffer(DType dtype, double v) { return buffer_from_doubles(dtype, {}, {v}); }

Buffer random_buffer(DType dtype, std::vector<int64_t> dims, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  const int64_t n = product(dims);
  std::vector<double> values(n);
  if (is_floating(dtype)) {
    std::uniform_real_distribution<double> dist(lo, hi);
    for (double& v : values) v = dist(rng);
  } else if (is_bool(dtype)) {
    for (double& v : values) v = static_cast<double>(rng() & 1);
  } else {
    double tlo = 0, thi = 0;
    switch (dtype) {
      case DType::kInt8: tlo = -128; thi = 127; break;
      case DType::kInt16: tlo = -32768; thi = 32767; break;
      case DType::kInt32: tlo = -2147483648.0; thi = 2147483647.0; break;
      case DType::kUInt8: tlo = 0; thi = 255; break;
      case DType::kUInt32: tlo = 0; thi = 4294967295.0; break;
      default: tlo = -9007199254740992.0; thi = 9007199254740992.0; break;
    }
    int64_t a = static_cast<int64_t>(std::ceil(std::max(lo, tlo)));
    int64_t b = static_cast<int64_t>(std::floor(std::min(hi, thi)));
    if (b < a) b = a;
    std::uniform_int_distribution<int64_t> dist(a, b);
    for (double& v : values) v = static_cast<double>(dist(rng));
  }
  return buffer_from_doubles(dtype, std::move(dims), values);
}

Buffer random_buffer_away_from_zero(DType dtype, std::vector<int64_t> dims, uint64_t seed, double min_abs,
                                    double max_abs) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mag(min_abs, max_abs);
  std::vector<double> values(product(dims));
  for (double& v : values) v = (rng() & 1 ? 1.0 : -1.0) * mag(rng);
  return buffer_from_doubles(dtype, std::move(dims), values);
}

::testing::AssertionResult buffers_near(const Buffer& actual, const Buffer& expected, double rtol, double atol) {
  if (actual.dtype() != expected.dtype() || actual.dims() != expected.dims()) {
    return ::testing::AssertionFailure() << "type differs: actual " << actual.abstract_value().to_string()
                                         << ", expected " << expected.abstract_value().to_string();
  }
  int64_t mismatches = 0, first = -1;
  double first_a = 0, first_e = 0;
  for (int64_t k = 0; k < actual.num_elements(); ++k) {
    double a = actual.element_as_double(k), e = expected.element_as_double(k);
    bool ok;
    if (std::isnan(e) || std::isnan(a)) ok = std::isnan(e) && std::isnan(a);
    else if (std::isinf(e) || std::isinf(a)) ok = a == e;
    else ok = std::fabs(a - e) <= atol + rtol * std::fabs(e);
    if (!ok) {
      if (first < 0) { first = k; first_a = a; first_e = e; }
      ++mismatches;
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(17);
  os << mismatches << " of " << actual.num_elements() << " elements differ (rtol " << rtol << ", atol " << atol
     << "); first at " << index_string(first, actual.dims()) << ": actual " << first_a << ", expected " << first_e
     << "\n  actual   " << actual.to_string(32) << "\n  expected " << expected.to_string(32);
  return ::testing::AssertionFailure() << os.str();
}

void expect_buffers_near(const Buffer& actual, const Buffer& expected, double rtol, double atol) {
  EXPECT_TRUE(buffers_near(actual, expected, rtol, atol));
}

ir::Program single_op_program(ir::OpKind kind, std::vector<AbstractValue> operand_types, ir::Attrs attrs) {
  ir::ProgramBuilder b(std::string(ir::op_name(kind)));
  std::vector<ir::ValueId> params;
  for (AbstractValue& t : operand_types) params.push_back(b.add_parameter(std::move(t)));
  ir::ValueId r = b.emit_or_throw(kind, std::move(params), std::move(attrs));
  return std::move(b).build({r});
}

absl::StatusOr<std::vector<Buffer>> numerical_vjp(const ir::Program& f, std::span<const Buffer> args,
                                                  std::span<const Buffer> cotangents, const std::vector<int>& wrt,
                                                  double eps) {
  if (cotangents.size() != f.results.size()) {
    return absl::InvalidArgumentError(absl::StrCat("[numerical_vjp] expected ", f.results.size(),
                                                   " cotangents, got ", cotangents.size()));
  }
  std::vector<Buffer> work(args.begin(), args.end());
  // <ct, f(work)> summed over floating results.
  auto objective = [&]() -> absl::StatusOr<double> {
    MCX_ASSIGN_OR_RETURN(std::vector<Buffer> outs, reference_evaluate(f, work));
    double s = 0;
    for (size_t j = 0; j < outs.size(); ++j) {
      if (!is_floating(outs[j].dtype())) continue;
      for (int64_t k = 0; k < outs[j].num_elements(); ++k) {
        s += cotangents[j].element_as_double(k) * outs[j].element_as_double(k);
      }
    }
    return s;
  };
  std::vector<Buffer> grads;
  for (int p : wrt) {
    if (p < 0 || p >= static_cast<int>(work.size()) || work[p].dtype() != DType::kFloat64) {
      return absl::InvalidArgumentError(absl::StrCat("[numerical_vjp] parameter ", p, " must be float64"));
    }
    Buffer orig = work[p];
    Buffer g = Buffer::zeros(DType::kFloat64, orig.dims());
    for (int64_t k = 0; k < orig.num_elements(); ++k) {
      const double x = orig.data<double>()[k];
      const double h = eps * std::max(1.0, std::fabs(x));
      Buffer plus = orig.copy(), minus = orig.copy();
      plus.mutable_data<double>()[k] = x + h;
      minus.mutable_data<double>()[k] = x - h;
      work[p] = plus;
      MCX_ASSIGN_OR_RETURN(double fp, objective());
      work[p] = minus;
      MCX_ASSIGN_OR_RETURN(double fm, objective());
      g.mutable_data<double>()[k] = (fp - fm) / (2 * h);
    }
    work[p] = orig;
    grads.push_back(g);
  }
  return grads;
}

namespace {

// One cotangent per result of f: random in [-1, 1] for floating results (seeded seed + j), zeros otherwise.
std::vector<Buffer> random_cotangents(const ir::Program& f, uint64_t seed) {
  std::vector<Buffer> cts;
  for (size_t j = 0; j < f.results.size(); ++j) {
    AbstractValue t = f.type(f.results[j]);
    std::vector<int64_t> dims = *to_concrete(t.shape);
    cts.push_back(is_floating(t.dtype) ? random_buffer(t.dtype, dims, seed + j, -1, 1) : Buffer::zeros(t.dtype, dims));
  }
  return cts;
}

}  // namespace

void check_vjp(const ir::Program& f, const std::vector<Buffer>& args, const std::vector<int>& wrt, uint64_t seed,
               double rtol, double atol) {
  ASSERT_TRUE(ir::verify(f).ok()) << ir::verify(f);
  absl::StatusOr<ir::Program> vjp = ir::vjp_program(f, wrt);
  ASSERT_TRUE(vjp.ok()) << vjp.status();
  ASSERT_TRUE(ir::verify(*vjp).ok()) << ir::verify(*vjp);
  const size_t nres = f.results.size();
  ASSERT_EQ(vjp->results.size(), nres + wrt.size());
  std::vector<Buffer> cts = random_cotangents(f, seed * 31);
  std::vector<Buffer> vargs = args;
  vargs.insert(vargs.end(), cts.begin(), cts.end());
  auto out = reference_evaluate(*vjp, vargs);
  ASSERT_TRUE(out.ok()) << out.status();
  auto primal = reference_evaluate(f, args);
  ASSERT_TRUE(primal.ok()) << primal.status();
  for (size_t j = 0; j < nres; ++j) EXPECT_TRUE((*out)[j].bitwise_equal((*primal)[j])) << "primal result " << j;
  auto fd = numerical_vjp(f, args, cts, wrt);
  ASSERT_TRUE(fd.ok()) << fd.status();
  for (size_t i = 0; i < wrt.size(); ++i) {
    EXPECT_EQ((*out)[nres + i].abstract_value(), f.params[wrt[i]]) << "gradient type of parameter " << wrt[i];
    EXPECT_TRUE(buffers_near((*out)[nres + i], (*fd)[i], rtol, atol)) << "gradient of parameter " << wrt[i];
  }
  check_jvp(f, args, wrt, seed, rtol, atol);
  check_vmap(f, args, seed);
}

namespace {

double dot(const Buffer& a, const Buffer& b) {
  double s = 0;
  for (int64_t k = 0; k < a.num_elements(); ++k) s += a.element_as_double(k) * b.element_as_double(k);
  return s;
}
double abs_dot(const Buffer& a, const Buffer& b) {
  double s = 0;
  for (int64_t k = 0; k < a.num_elements(); ++k) s += std::fabs(a.element_as_double(k) * b.element_as_double(k));
  return s;
}

// args with args[wrt[i]] + scale * tangents[i] (float64 parameters).
std::vector<Buffer> moved(const std::vector<Buffer>& args, const std::vector<int>& wrt,
                          const std::vector<Buffer>& tangents, double scale) {
  std::vector<Buffer> out = args;
  for (size_t i = 0; i < wrt.size(); ++i) {
    Buffer b = args[wrt[i]].copy();
    for (int64_t k = 0; k < b.num_elements(); ++k) {
      b.mutable_data<double>()[k] += scale * tangents[i].data<double>()[k];
    }
    out[wrt[i]] = b;
  }
  return out;
}

}  // namespace

void check_jvp(const ir::Program& f, const std::vector<Buffer>& args, const std::vector<int>& wrt, uint64_t seed,
               double rtol, double atol) {
  absl::StatusOr<ir::Program> jvp = ir::jvp_program(f, wrt);
  ASSERT_TRUE(jvp.ok()) << jvp.status();
  ASSERT_TRUE(ir::verify(*jvp).ok()) << ir::verify(*jvp);
  const size_t nres = f.results.size();
  ASSERT_EQ(jvp->results.size(), 2 * nres);
  std::vector<Buffer> tangents;
  for (size_t i = 0; i < wrt.size(); ++i) {
    ASSERT_EQ(args[wrt[i]].dtype(), DType::kFloat64) << "check_jvp: parameter " << wrt[i] << " must be float64";
    tangents.push_back(random_buffer(DType::kFloat64, args[wrt[i]].dims(), seed * 37 + i, -1, 1));
  }
  std::vector<Buffer> jargs = args;
  jargs.insert(jargs.end(), tangents.begin(), tangents.end());
  auto out = reference_evaluate(*jvp, jargs);
  ASSERT_TRUE(out.ok()) << out.status();
  auto primal = reference_evaluate(f, args);
  ASSERT_TRUE(primal.ok()) << primal.status();
  const double h = 1e-6;
  auto plus = reference_evaluate(f, moved(args, wrt, tangents, h));
  auto minus = reference_evaluate(f, moved(args, wrt, tangents, -h));
  ASSERT_TRUE(plus.ok() && minus.ok());
  for (size_t j = 0; j < nres; ++j) {
    EXPECT_TRUE((*out)[j].bitwise_equal((*primal)[j])) << "jvp: primal result " << j;
    const Buffer& t = (*out)[nres + j];
    EXPECT_EQ(t.abstract_value(), f.type(f.results[j])) << "jvp: tangent type of result " << j;
    if (!is_floating(t.dtype())) continue;
    Buffer fd = Buffer::zeros(DType::kFloat64, t.dims());
    for (int64_t k = 0; k < fd.num_elements(); ++k) {
      fd.mutable_data<double>()[k] =
          ((*plus)[j].element_as_double(k) - (*minus)[j].element_as_double(k)) / (2 * h);
    }
    Buffer t64 = Buffer::zeros(DType::kFloat64, t.dims());
    for (int64_t k = 0; k < t64.num_elements(); ++k) t64.mutable_data<double>()[k] = t.element_as_double(k);
    EXPECT_TRUE(buffers_near(t64, fd, rtol, atol)) << "jvp: tangent of result " << j;
  }

  // <ct, J t> = <J^T ct, t>.
  absl::StatusOr<ir::Program> vjp = ir::vjp_program(f, wrt);
  ASSERT_TRUE(vjp.ok()) << vjp.status();
  std::vector<Buffer> vargs = args;
  const std::vector<Buffer> cts = random_cotangents(f, seed * 41);
  double lhs = 0, scale = 0;
  for (size_t j = 0; j < nres; ++j) {
    if (is_floating(cts[j].dtype())) {
      lhs += dot(cts[j], (*out)[nres + j]);
      scale += abs_dot(cts[j], (*out)[nres + j]);
    }
    vargs.push_back(cts[j]);
  }
  auto grads = reference_evaluate(*vjp, vargs);
  ASSERT_TRUE(grads.ok()) << grads.status();
  double rhs = 0;
  for (size_t i = 0; i < wrt.size(); ++i) {
    rhs += dot((*grads)[nres + i], tangents[i]);
    scale += abs_dot((*grads)[nres + i], tangents[i]);
  }
  EXPECT_NEAR(lhs, rhs, 1e-9 * std::max(1.0, scale)) << "jvp and vjp disagree: <ct, J t> != <J^T ct, t>";

  // linearize: primal once, then the linear part on the residuals.
  absl::StatusOr<ir::LinearizedPrograms> lin = ir::linearize_programs(f, wrt);
  ASSERT_TRUE(lin.ok()) << lin.status();
  ASSERT_TRUE(ir::verify(lin->primal).ok()) << ir::verify(lin->primal);
  ASSERT_TRUE(ir::verify(lin->linear).ok()) << ir::verify(lin->linear);
  auto first = reference_evaluate(lin->primal, args);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), nres + static_cast<size_t>(lin->num_residuals));
  std::vector<Buffer> largs(first->begin() + static_cast<std::ptrdiff_t>(nres), first->end());
  largs.insert(largs.end(), tangents.begin(), tangents.end());
  auto second = reference_evaluate(lin->linear, largs);
  ASSERT_TRUE(second.ok()) << second.status();
  for (size_t j = 0; j < nres; ++j) {
    EXPECT_TRUE((*first)[j].bitwise_equal((*primal)[j])) << "linearize: primal result " << j;
    EXPECT_TRUE((*second)[j].bitwise_equal((*out)[nres + j])) << "linearize: tangent of result " << j;
  }
}

namespace {

// The buffers stacked along a new leading axis.
Buffer stacked(const std::vector<Buffer>& parts) {
  std::vector<int64_t> dims = parts[0].dims();
  dims.insert(dims.begin(), static_cast<int64_t>(parts.size()));
  Buffer out = Buffer::uninitialized(parts[0].dtype(), dims);
  auto* dst = static_cast<std::byte*>(out.mutable_data());
  for (const Buffer& p : parts) {
    std::memcpy(dst, p.data(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

// Row i of a buffer's leading axis.
Buffer row(const Buffer& b, int64_t i) {
  std::vector<int64_t> dims(b.dims().begin() + 1, b.dims().end());
  Buffer out = Buffer::uninitialized(b.dtype(), dims);
  std::memcpy(out.mutable_data(), static_cast<const std::byte*>(b.data()) + static_cast<size_t>(i) * out.nbytes(),
              out.nbytes());
  return out;
}

}  // namespace

void check_vmap(const ir::Program& f, const std::vector<Buffer>& args, uint64_t seed) {
  constexpr int64_t kBatch = 3;
  const size_t n = args.size();
  // examples[i][p]: parameter p of example i (example 0 is args itself).
  std::vector<std::vector<Buffer>> examples(kBatch, args);
  for (int64_t i = 1; i < kBatch; ++i) {
    for (size_t p = 0; p < n; ++p) {
      if (args[p].dtype() != DType::kFloat64) continue;
      examples[i][p] = random_buffer(DType::kFloat64, args[p].dims(), seed * 53 + static_cast<uint64_t>(i * 7 + p), -1, 1);
      // Keep the sign of each element: domains of the tests (log, sqrt, away from zero) hold per element.
      for (int64_t k = 0; k < args[p].num_elements(); ++k) {
        const double a = args[p].data<double>()[k];
        double& x = examples[i][p].mutable_data<double>()[k];
        x = a * (1.0 + 0.25 * x);
      }
    }
  }
  std::vector<std::vector<bool>> choices;
  std::vector<bool> all(n, true), floating(n, false), first(n, false), last(n, false);
  for (size_t p = 0; p < n; ++p) floating[p] = args[p].dtype() == DType::kFloat64;
  for (size_t p = 0; p < n; ++p) {
    if (floating[p]) {
      first[p] = true;
      break;
    }
  }
  for (size_t p = n; p-- > 0;) {
    if (floating[p]) {
      last[p] = true;
      break;
    }
  }
  choices.push_back(all);
  if (floating != all) choices.push_back(floating);
  if (first != floating) choices.push_back(first);
  if (last != floating && last != first) choices.push_back(last);
  for (const std::vector<bool>& batched : choices) {
    bool any = false;
    for (bool x : batched) any = any || x;
    if (!any) continue;
    std::string which;
    for (bool x : batched) which += x ? "B" : "-";
    SCOPED_TRACE("vmap over parameters " + which);
    // Parameters not batched take example 0's value in every example.
    std::vector<std::vector<Buffer>> used = examples;
    for (int64_t i = 1; i < kBatch; ++i) {
      for (size_t p = 0; p < n; ++p) {
        if (!batched[p]) used[i][p] = args[p];
      }
    }
    absl::StatusOr<ir::Program> v = ir::vmap_program(f, batched, DimExpr(kBatch));
    ASSERT_TRUE(v.ok()) << v.status();
    ASSERT_TRUE(ir::verify(*v).ok()) << ir::verify(*v);
    std::vector<Buffer> vargs;
    for (size_t p = 0; p < n; ++p) {
      if (!batched[p]) {
        vargs.push_back(args[p]);
        continue;
      }
      std::vector<Buffer> parts;
      for (int64_t i = 0; i < kBatch; ++i) parts.push_back(used[i][p]);
      vargs.push_back(stacked(parts));
    }
    auto out = reference_evaluate(*v, vargs);
    ASSERT_TRUE(out.ok()) << out.status();
    for (int64_t i = 0; i < kBatch; ++i) {
      auto want = reference_evaluate(f, used[i]);
      ASSERT_TRUE(want.ok()) << want.status();
      for (size_t j = 0; j < f.results.size(); ++j) {
        ASSERT_EQ((*out)[j].dims().size(), (*want)[j].dims().size() + 1) << "result " << j;
        EXPECT_TRUE(buffers_near(row((*out)[j], i), (*want)[j], 1e-13, 1e-14)) << "result " << j << ", example " << i;
      }
    }
  }
}

}  // namespace mcx::test
