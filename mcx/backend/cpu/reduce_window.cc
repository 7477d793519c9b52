#include "mcx/backend/cpu/reduce_window.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "mcx/backend/cpu/elementwise.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/core/error.h"
#include "mcx/ir/window_rules.h"

namespace mcx::cpu {
namespace {

template <typename A, ReduceOp kOp>
constexpr A identity() {
  if constexpr (kOp == ReduceOp::kSum) {
    return A(0);
  } else if constexpr (std::is_floating_point_v<A>) {
    return kOp == ReduceOp::kMax ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::infinity();
  } else {
    return kOp == ReduceOp::kMax ? std::numeric_limits<A>::lowest() : std::numeric_limits<A>::max();
  }
}

// a <- a op v; max/min propagate NaN; integer sums wrap.
template <typename A, ReduceOp kOp>
inline void combine(A& a, A v) {
  if constexpr (kOp == ReduceOp::kSum) {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      a = static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(v)));
    } else {
      a += v;
    }
  } else if constexpr (std::is_floating_point_v<A>) {
    if ((kOp == ReduceOp::kMax ? v > a : v < a) || std::isnan(v)) a = v;
  } else {
    a = kOp == ReduceOp::kMax ? std::max(a, v) : std::min(a, v);
  }
}

template <typename S, ReduceOp kOp>
void window_kernel(const View& x, const WindowGeometry& g, const std::vector<int64_t>& out_dims, S* out) {
  using A = compute_t<S>;
  const int outer_rank = x.rank() - 1;
  const std::vector<int64_t> outer_out(out_dims.begin(), out_dims.end() - 1);
  const std::vector<int64_t>& window = g.config.window_dimensions;
  const std::vector<int64_t>& strides = g.config.window_strides;
  const std::vector<int64_t> outer_win(window.begin(), window.end() - 1);
  const std::vector<int64_t> win_index = multi_indices(outer_win);
  const int64_t positions = product(outer_win), rows = product(outer_out);
  const int64_t inner = out_dims.back(), x_inner = x.dims.back(), x_stride = x.strides.back();
  const int64_t k_win = window.back(), k_stride = strides.back(), k_low = g.padding_low.back();
  // No window along the last dimension: output element j combines operand element j of each row.
  const bool direct = k_win == 1 && k_stride == 1 && k_low == 0 && g.padding_high.back() == 0;
  const S* base = reinterpret_cast<const S*>(x.data);
  parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, inner * positions)), [&](int64_t r0, int64_t r1) {
    std::vector<A> acc(static_cast<size_t>(inner));
    std::vector<int64_t> at(static_cast<size_t>(outer_rank));  // the multi-index of output row r
    int64_t rem = r0;
    for (int d = outer_rank - 1; d >= 0; --d) {
      at[d] = rem % outer_out[d];
      rem /= outer_out[d];
    }
    for (int64_t r = r0; r < r1; ++r) {
      std::fill(acc.begin(), acc.end(), identity<A, kOp>());
      for (int64_t w = 0; w < positions; ++w) {
        int64_t off = 0;
        bool inside = true;
        for (int d = 0; d < outer_rank && inside; ++d) {
          const int64_t pos = at[d] * strides[d] + win_index[w * outer_rank + d] - g.padding_low[d];
          inside = pos >= 0 && pos < x.dims[d];
          off += pos * x.strides[d];
        }
        if (!inside) continue;  // padding: the identity
        const S* row = base + off;
        if (direct) {
          for (int64_t j = 0; j < inner; ++j) combine<A, kOp>(acc[j], to_compute(row[j * x_stride]));
          continue;
        }
        for (int64_t j = 0; j < inner; ++j) {
          for (int64_t k = 0; k < k_win; ++k) {
            const int64_t pos = j * k_stride + k - k_low;
            if (pos >= 0 && pos < x_inner) combine<A, kOp>(acc[j], to_compute(row[pos * x_stride]));
          }
        }
      }
      S* dst = out + r * inner;
      for (int64_t j = 0; j < inner; ++j) dst[j] = from_compute<S>(acc[j]);
      for (int d = outer_rank - 1; d >= 0; --d) {
        if (++at[d] < outer_out[d]) break;
        at[d] = 0;
      }
    }
  });
}

template <typename S>
void dispatch_reduce(const View& x, const WindowGeometry& g, const std::vector<int64_t>& out_dims, S* out) {
  switch (g.config.reduce) {
    case ReduceOp::kSum: return window_kernel<S, ReduceOp::kSum>(x, g, out_dims, out);
    case ReduceOp::kMax: return window_kernel<S, ReduceOp::kMax>(x, g, out_dims, out);
    case ReduceOp::kMin: return window_kernel<S, ReduceOp::kMin>(x, g, out_dims, out);
    default: throw std::logic_error("[cpu] reduce_window: unsupported reduction");
  }
}

}  // namespace

absl::StatusOr<WindowGeometry> window_geometry(const ir::Attrs& attrs, int rank) {
  WindowGeometry g;
  MCX_ASSIGN_OR_RETURN(g.config, ir::get_reduce_window_config(attrs, rank));
  MCX_ASSIGN_OR_RETURN(g.padding_low, to_concrete(g.config.padding_low));
  MCX_ASSIGN_OR_RETURN(g.padding_high, to_concrete(g.config.padding_high));
  return g;
}

Buffer reduce_window(const View& x, const WindowGeometry& geometry, const std::vector<int64_t>& out_dims) {
  if (x.rank() == 0) return materialize(x);  // the one-element window of a scalar
  Buffer out = Buffer::uninitialized(x.dtype, out_dims);
  if (out.num_elements() == 0) return out;
  dispatch_dtype(x.dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (std::is_same_v<S, bool>) {
      throw std::logic_error("[cpu] reduce_window: bool operand");
    } else {
      dispatch_reduce<S>(x, geometry, out_dims, out.mutable_data<S>());
    }
  });
  return out;
}

}  // namespace mcx::cpu
