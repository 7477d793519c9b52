// Convolution and windowed reductions (pooling).
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "mcx/ir/window_rules.h"
#include "mcx/trace/dispatch.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/ops_util.h"

namespace mcx {

using ir::OpKind;

namespace {

std::vector<int64_t> ones_if_empty(std::vector<int64_t> v, size_t n) {
  if (v.empty()) v.assign(n, 1);
  return v;
}

void check_count(const char* api, const char* what, size_t found, size_t expected) {
  if (found != expected) {
    throw InvalidArgument(absl::StrCat("[", api, "] expected ", expected, " entries in ", what, ", found ", found));
  }
}

// JAX's conv_general_permutations: the specs (batch/out-feature, feature/in-feature, spatial...) named by
// dimension-number strings; spatial dims are matched by letter and ordered as in rhs.
struct Specs {
  std::vector<int64_t> lhs, rhs, out;
};

Specs conv_specs(const ConvDimensionNumbers& dn, int rank) {
  Specs s;
  if (dn.lhs.empty() && dn.rhs.empty() && dn.out.empty()) {  // channels last
    s.lhs = {0, rank - 1};
    s.rhs = {rank - 1, rank - 2};
    for (int d = 1; d + 1 < rank; ++d) s.lhs.push_back(d);
    for (int d = 0; d + 2 < rank; ++d) s.rhs.push_back(d);
    s.out = s.lhs;
    return s;
  }
  auto bad = [&](const std::string& why) {
    return InvalidArgument(absl::StrCat("[conv_general_dilated] expected dimension numbers of rank ", rank,
                                        " (lhs and out with 'N' and 'C', rhs with 'O' and 'I', the same spatial "
                                        "letters in all three), found {\"", dn.lhs, "\", \"", dn.rhs, "\", \"", dn.out,
                                        "\"}: ", why));
  };
  for (const std::string* spec : {&dn.lhs, &dn.rhs, &dn.out}) {
    if (static_cast<int>(spec->size()) != rank) throw bad("wrong length");
    for (char c : *spec)
      if (std::count(spec->begin(), spec->end(), c) != 1) throw bad(absl::StrCat("'", std::string(1, c), "' repeats"));
  }
  auto index = [&](const std::string& spec, char c) -> int64_t {
    size_t i = spec.find(c);
    if (i == std::string::npos) throw bad(absl::StrCat("no '", std::string(1, c), "' in \"", spec, "\""));
    return static_cast<int64_t>(i);
  };
  s.lhs = {index(dn.lhs, 'N'), index(dn.lhs, 'C')};
  s.rhs = {index(dn.rhs, 'O'), index(dn.rhs, 'I')};
  s.out = {index(dn.out, 'N'), index(dn.out, 'C')};
  for (size_t i = 0; i < dn.rhs.size(); ++i) {
    const char c = dn.rhs[i];
    if (c == 'O' || c == 'I') continue;
    s.rhs.push_back(static_cast<int64_t>(i));
    s.lhs.push_back(index(dn.lhs, c));
    s.out.push_back(index(dn.out, c));
  }
  return s;
}

Array floating(const Array& x) { return is_floating(x.dtype()) ? x : astype(x, DType::kFloat32); }

// The window parameters of pooling over the spatial dims of channels-last x, as full-rank lists.
struct PoolWindow {
  std::vector<int64_t> window, strides;
  Shape low, high;
};

PoolWindow pool_window(const Array& x, const std::vector<int64_t>& window_shape, std::vector<int64_t> strides,
                       const Padding& padding, const char* api) {
  const size_t n = window_shape.size();
  if (static_cast<size_t>(x.ndim()) != n + 2) {
    throw InvalidArgument(absl::StrCat("[", api, "] expected x of rank ", n + 2, " (batch, ", n,
                                       " window dims, features) for a window of ", n, " dims, found ",
                                       x.aval().to_string()));
  }
  strides = ones_if_empty(std::move(strides), n);
  check_count(api, "strides", strides.size(), n);
  Shape in(x.shape().begin() + 1, x.shape().end() - 1), win;
  for (int64_t w : window_shape) win.push_back(DimExpr(w));
  PoolWindow p;
  p.window = {1};
  p.strides = {1};
  p.low = {DimExpr(0)};
  p.high = {DimExpr(0)};
  for (size_t i = 0; i < n; ++i) {
    p.window.push_back(window_shape[i]);
    p.strides.push_back(strides[i]);
  }
  for (const auto& [lo, hi] : padding.resolve(in, win, strides, api)) {
    p.low.push_back(lo);
    p.high.push_back(hi);
  }
  p.window.push_back(1);
  p.strides.push_back(1);
  p.low.push_back(DimExpr(0));
  p.high.push_back(DimExpr(0));
  return p;
}

Array bind_reduce_window(const Array& x, ReduceOp op, const PoolWindow& p) {
  ir::ReduceWindowConfig c;
  c.reduce = op;
  c.window_dimensions = p.window;
  c.window_strides = p.strides;
  c.padding_low = p.low;
  c.padding_high = p.high;
  return bind(OpKind::kReduceWindow, {x}, ir::reduce_window_attrs(c));
}

}  // namespace

Padding Padding::valid() { return Padding(Kind::kValid); }
Padding Padding::same() { return Padding(Kind::kSame); }
Padding Padding::same_lower() { return Padding(Kind::kSameLower); }
Padding::Padding(std::initializer_list<std::pair<DimExpr, DimExpr>> pairs) : pairs_(pairs) {}
Padding::Padding(std::vector<std::pair<DimExpr, DimExpr>> pairs) : pairs_(std::move(pairs)) {}

std::vector<std::pair<DimExpr, DimExpr>> Padding::resolve(const Shape& in, const Shape& window,
                                                          const std::vector<int64_t>& strides, const char* api) const {
  if (kind_ == Kind::kExplicit) {
    check_count(api, "padding", pairs_.size(), in.size());
    return pairs_;
  }
  std::vector<std::pair<DimExpr, DimExpr>> out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (kind_ == Kind::kValid) {
      out.emplace_back(DimExpr(0), DimExpr(0));
      continue;
    }
    const DimExpr s(strides[i]);
    const DimExpr n_out = floordiv(in[i] + s - DimExpr(1), s);
    const DimExpr total = mcx::max(DimExpr(0), (n_out - DimExpr(1)) * s + window[i] - in[i]);
    const DimExpr half = floordiv(total, DimExpr(2));
    const DimExpr lo = kind_ == Kind::kSame ? half : total - half;
    out.emplace_back(lo, total - lo);
  }
  return out;
}

Array conv_general_dilated(const Array& lhs, const Array& rhs, std::vector<int64_t> window_strides,
                           const Padding& padding, std::vector<int64_t> lhs_dilation, std::vector<int64_t> rhs_dilation,
                           const ConvDimensionNumbers& dimension_numbers, int64_t feature_group_count) {
  const char* api = "conv_general_dilated";
  const DType t = result_type(lhs, rhs);
  Array l = floating(detail::convert_to(lhs, t)), r = floating(detail::convert_to(rhs, t));
  if (l.ndim() != r.ndim() || l.ndim() < 2) {
    throw InvalidArgument(absl::StrCat("[", api, "] expected lhs and rhs of one rank >= 2, found lhs ",
                                       l.aval().to_string(), " and rhs ", r.aval().to_string()));
  }
  const int rank = l.ndim();
  const size_t n = static_cast<size_t>(rank - 2);
  const Specs s = conv_specs(dimension_numbers, rank);
  ir::ConvConfig c;
  c.lhs_spec = s.lhs;
  c.rhs_spec = s.rhs;
  c.out_spec = s.out;
  c.window_strides = ones_if_empty(std::move(window_strides), n);
  c.lhs_dilation = ones_if_empty(std::move(lhs_dilation), n);
  c.rhs_dilation = ones_if_empty(std::move(rhs_dilation), n);
  c.feature_group_count = feature_group_count;
  check_count(api, "window_strides", c.window_strides.size(), n);
  check_count(api, "rhs_dilation", c.rhs_dilation.size(), n);
  Shape in, window;
  for (size_t i = 0; i < n; ++i) {
    in.push_back(l.shape()[s.lhs[2 + i]]);
    window.push_back(ir::dilate_dim(r.shape()[s.rhs[2 + i]], c.rhs_dilation[i]));
  }
  for (const auto& [lo, hi] : padding.resolve(in, window, c.window_strides, api)) {
    c.padding_low.push_back(lo);
    c.padding_high.push_back(hi);
  }
  return bind(OpKind::kConvGeneralDilated, {with_weak_type(l, false), with_weak_type(r, false)}, ir::conv_attrs(c));
}

Array conv(const Array& x, const Array& w, std::vector<int64_t> strides, const Padding& padding,
           std::vector<int64_t> dilation, int64_t feature_group_count) {
  return conv_general_dilated(x, w, std::move(strides), padding, {}, std::move(dilation), {}, feature_group_count);
}

Array reduce_window(const Array& x, ReduceOp op, std::vector<int64_t> window_dimensions,
                    std::vector<int64_t> window_strides, const Padding& padding) {
  const char* api = "reduce_window";
  if (op == ReduceOp::kProd) throw InvalidArgument("[reduce_window] expected sum, max or min, found prod");
  const size_t rank = static_cast<size_t>(x.ndim());
  check_count(api, "window_dimensions", window_dimensions.size(), rank);
  PoolWindow p;
  p.window = std::move(window_dimensions);
  p.strides = ones_if_empty(std::move(window_strides), rank);
  check_count(api, "window_strides", p.strides.size(), rank);
  Shape win;
  for (int64_t w : p.window) win.push_back(DimExpr(w));
  for (const auto& [lo, hi] : padding.resolve(x.shape(), win, p.strides, api)) {
    p.low.push_back(lo);
    p.high.push_back(hi);
  }
  const Array xs = op == ReduceOp::kSum && is_bool(x.dtype()) ? astype(x, DType::kInt32) : x;
  return bind_reduce_window(xs, op, p);
}

Array max_pool(const Array& x, std::vector<int64_t> window_shape, std::vector<int64_t> strides, const Padding& padding) {
  return bind_reduce_window(x, ReduceOp::kMax, pool_window(x, window_shape, std::move(strides), padding, "max_pool"));
}

Array avg_pool(const Array& x, std::vector<int64_t> window_shape, std::vector<int64_t> strides, const Padding& padding,
               bool count_include_pad) {
  const Array xf = floating(x);
  const PoolWindow p = pool_window(xf, window_shape, std::move(strides), padding, "avg_pool");
  const Array sums = bind_reduce_window(xf, ReduceOp::kSum, p);
  if (count_include_pad) {
    int64_t size = 1;
    for (int64_t w : window_shape) size *= w;
    return sums / static_cast<double>(size);
  }
  // Per output position, the number of window elements inside x: the same windows over ones.
  return sums / stop_gradient(bind_reduce_window(ones_like(xf), ReduceOp::kSum, p));
}

}  // namespace mcx
