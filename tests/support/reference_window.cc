#include "tests/support/reference_window.h"

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/ir/window_rules.h"
#include "tests/support/row_major.h"

namespace mcx::test {
namespace {

absl::Status mismatch(std::string_view op, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("[reference_evaluate] ", std::string(op), ": ", what));
}

}  // namespace

absl::StatusOr<RefArray> reference_conv(const ir::Attrs& attrs, const RefArray& lhs, const RefArray& rhs,
                                        const std::vector<int64_t>& out_dims) {
  const int rank = static_cast<int>(lhs.dims.size());
  MCX_ASSIGN_OR_RETURN(ir::ConvConfig c, ir::get_conv_config(attrs, rank));
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> lo, to_concrete(c.padding_low));
  if (static_cast<int>(rhs.dims.size()) != rank || static_cast<int>(out_dims.size()) != rank)
    return mismatch("conv_general_dilated", "operand and result ranks differ");
  const int n = rank - 2;
  const int64_t groups = c.feature_group_count;
  const int64_t group_in = rhs.dims[c.rhs_spec[1]];
  const int64_t group_out = rhs.dims[c.rhs_spec[0]] / groups;
  if (lhs.dims[c.lhs_spec[1]] != group_in * groups) return mismatch("conv_general_dilated", "feature counts differ");
  std::vector<int64_t> window;
  for (int d = 0; d < n; ++d) window.push_back(rhs.dims[c.rhs_spec[2 + d]]);
  RefArray out{out_dims, std::vector<double>(static_cast<size_t>(element_count(out_dims)), 0.0)};
  std::vector<int64_t> li(rank), ri(rank);
  for (int64_t k = 0; k < element_count(out_dims); ++k) {
    const std::vector<int64_t> o = unravel(k, out_dims);
    const int64_t b = o[c.out_spec[0]], f = o[c.out_spec[1]], g = f / group_out;
    double acc = 0;
    for (int64_t ci = 0; ci < group_in; ++ci) {
      for (int64_t w = 0; w < element_count(window); ++w) {
        const std::vector<int64_t> wi = unravel(w, window);
        bool inside = true;
        for (int d = 0; d < n && inside; ++d) {
          // Position in the dilated, padded lhs; a hole of the dilation or padding reads zero.
          const int64_t pos = o[c.out_spec[2 + d]] * c.window_strides[d] + wi[d] * c.rhs_dilation[d] - lo[d];
          inside = pos >= 0 && pos % c.lhs_dilation[d] == 0 && pos / c.lhs_dilation[d] < lhs.dims[c.lhs_spec[2 + d]];
          if (inside) li[c.lhs_spec[2 + d]] = pos / c.lhs_dilation[d];
          ri[c.rhs_spec[2 + d]] = wi[d];
        }
        if (!inside) continue;
        li[c.lhs_spec[0]] = b;
        li[c.lhs_spec[1]] = g * group_in + ci;
        ri[c.rhs_spec[0]] = f;
        ri[c.rhs_spec[1]] = ci;
        acc += lhs.values[ravel(li, lhs.dims)] * rhs.values[ravel(ri, rhs.dims)];
      }
    }
    out.values[k] = acc;
  }
  return out;
}

absl::StatusOr<RefArray> reference_reduce_window(const ir::Attrs& attrs, const RefArray& x,
                                                 const std::vector<int64_t>& out_dims) {
  const int rank = static_cast<int>(x.dims.size());
  MCX_ASSIGN_OR_RETURN(ir::ReduceWindowConfig c, ir::get_reduce_window_config(attrs, rank));
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> lo, to_concrete(c.padding_low));
  if (static_cast<int>(out_dims.size()) != rank) return mismatch("reduce_window", "operand and result ranks differ");
  const double inf = std::numeric_limits<double>::infinity();
  const double identity = c.reduce == ReduceOp::kSum ? 0.0 : (c.reduce == ReduceOp::kMax ? -inf : inf);
  RefArray out{out_dims, std::vector<double>(static_cast<size_t>(element_count(out_dims)), identity)};
  for (int64_t k = 0; k < element_count(out_dims); ++k) {
    const std::vector<int64_t> o = unravel(k, out_dims);
    double acc = identity;
    for (int64_t w = 0; w < element_count(c.window_dimensions); ++w) {
      const std::vector<int64_t> wi = unravel(w, c.window_dimensions);
      std::vector<int64_t> xi(rank);
      bool inside = true;
      for (int d = 0; d < rank && inside; ++d) {
        xi[d] = o[d] * c.window_strides[d] + wi[d] - lo[d];
        inside = xi[d] >= 0 && xi[d] < x.dims[d];
      }
      if (!inside) continue;
      const double v = x.values[ravel(xi, x.dims)];
      if (c.reduce == ReduceOp::kSum) {
        acc += v;
      } else if (std::isnan(v) || std::isnan(acc)) {
        acc = std::nan("");
      } else {
        acc = c.reduce == ReduceOp::kMax ? std::max(acc, v) : std::min(acc, v);
      }
    }
    out.values[k] = acc;
  }
  return out;
}

}  // namespace mcx::test
