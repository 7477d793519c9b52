// conv_general_dilated: the two GEMM formulations of conv.h over canonical strided operands.
#include "mcx/backend/cpu/conv.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "mcx/backend/cpu/blas.h"
#include "mcx/backend/cpu/conv_winograd.h"
#include "mcx/backend/cpu/elementwise.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/core/error.h"
#include "mcx/ir/window_rules.h"

namespace mcx::cpu {
namespace {

// Elements of one temporary matrix (an im2col panel) per worker: 512 KiB of float, about one L2 cache.
constexpr int64_t kPanelElements = int64_t{1} << 17;
// The most partial results of the by-feature formulation: a constant, so the summation order (and the
// result) does not depend on the thread count.
constexpr int64_t kMaxFeatureSlices = 8;
// Marks an lhs read that falls on padding or on a hole of the lhs dilation (offsets may be negative:
// reversed views have negative strides).
constexpr int64_t kHole = std::numeric_limits<int64_t>::min();

// The convolution in canonical terms: lhs L[b, c, s...], rhs R[o, i, k...], result Y[b, o, p...]; the
// strides are element strides into the operands' storage.
struct Problem {
  int n = 0;
  int64_t batch = 0, out_features = 0, groups = 1, group_in = 0, group_out = 0;
  std::vector<int64_t> win, out;      // window and output spatial sizes
  int64_t positions = 1, window = 1;  // their products
  int64_t lhs_batch = 0, lhs_feature = 0, rhs_out = 0, rhs_in = 0;
  std::vector<int64_t> rhs_spatial;
  // tab[d][o * win[d] + k]: the lhs offset along spatial dim d that output index o reads at window index
  // k, or kHole.
  std::vector<std::vector<int64_t>> tab;
  std::vector<int64_t> pos_index, win_index;  // n per-dim indices per output / window position

  // The spatial part of the lhs offset that output position p reads at window position w, or kHole.
  int64_t offset(int64_t p, int64_t w) const {
    int64_t off = 0;
    for (int d = 0; d < n; ++d) {
      const int64_t t = tab[d][pos_index[p * n + d] * win[d] + win_index[w * n + d]];
      if (t == kHole) return kHole;
      off += t;
    }
    return off;
  }
  // The spatial part of the rhs offset of window position w.
  int64_t rhs_offset(int64_t w) const {
    int64_t off = 0;
    for (int d = 0; d < n; ++d) off += win_index[w * n + d] * rhs_spatial[d];
    return off;
  }
};

Problem make_problem(const View& lhs, const View& rhs, const ConvGeometry& geometry, const std::vector<int64_t>& out_dims) {
  const ir::ConvConfig& g = geometry.config;
  Problem pr;
  pr.n = lhs.rank() - 2;
  pr.batch = lhs.dims[g.lhs_spec[0]];
  pr.out_features = rhs.dims[g.rhs_spec[0]];
  pr.groups = g.feature_group_count;
  pr.group_in = rhs.dims[g.rhs_spec[1]];
  pr.group_out = pr.out_features / g.feature_group_count;
  pr.lhs_batch = lhs.strides[g.lhs_spec[0]];
  pr.lhs_feature = lhs.strides[g.lhs_spec[1]];
  pr.rhs_out = rhs.strides[g.rhs_spec[0]];
  pr.rhs_in = rhs.strides[g.rhs_spec[1]];
  for (int d = 0; d < pr.n; ++d) {
    const int64_t in = lhs.dims[g.lhs_spec[2 + d]], stride = lhs.strides[g.lhs_spec[2 + d]];
    const int64_t k = rhs.dims[g.rhs_spec[2 + d]], o = out_dims[g.out_spec[2 + d]];
    pr.win.push_back(k);
    pr.out.push_back(o);
    pr.rhs_spatial.push_back(rhs.strides[g.rhs_spec[2 + d]]);
    std::vector<int64_t> t(static_cast<size_t>(o * k), kHole);
    for (int64_t oi = 0; oi < o; ++oi) {
      for (int64_t ki = 0; ki < k; ++ki) {
        int64_t pos = oi * g.window_strides[d] + ki * g.rhs_dilation[d] - geometry.padding_low[d];
        if (pos < 0 || pos % g.lhs_dilation[d] != 0) continue;
        pos /= g.lhs_dilation[d];
        if (pos < in) t[oi * k + ki] = pos * stride;
      }
    }
    pr.tab.push_back(std::move(t));
  }
  pr.positions = product(pr.out);
  pr.window = product(pr.win);
  pr.pos_index = multi_indices(pr.out);
  pr.win_index = multi_indices(pr.win);
  return pr;
}

template <typename T>
void copy_strided(const T* src, int64_t stride, int64_t n, T* dst) {
  if (stride == 1) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
  } else if (stride == 0) {  // a broadcast operand, e.g. the cotangent of a sum
    std::fill(dst, dst + n, *src);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i * stride];
  }
}

// Gathers runs of n elements (source stride `stride`) into consecutive destinations, merging unit-stride
// runs that continue each other in both source and destination into one copy: in a channels-last im2col
// the window positions along the last spatial dim read one contiguous stretch of the input.
template <typename T>
class RunGather {
 public:
  RunGather(int64_t n, int64_t stride) : n_(n), stride_(stride) {}
  ~RunGather() { flush(); }
  // dst[0, n) = src[0, n * stride), or zeros for a null src.
  void add(const T* src, T* dst) {
    if (src == nullptr) {
      flush();
      std::fill(dst, dst + n_, T(0));
    } else if (stride_ != 1) {
      copy_strided(src, stride_, n_, dst);
    } else if (len_ > 0 && src == src_ + len_ && dst == dst_ + len_) {
      len_ += n_;
    } else {
      flush();
      src_ = src;
      dst_ = dst;
      len_ = n_;
    }
  }
  void flush() {
    if (len_ > 0) std::memcpy(dst_, src_, static_cast<size_t>(len_) * sizeof(T));
    len_ = 0;
  }

 private:
  const int64_t n_, stride_;
  const T* src_ = nullptr;
  T* dst_ = nullptr;
  int64_t len_ = 0;
};

// Copies rhs rows (i, w) for i in [i0, i1) of group g into dst as [rows, group_out] row-major.
template <typename T>
void pack_rhs_rows(const Problem& pr, const T* R, int64_t g, int64_t i0, int64_t i1, T* dst) {
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t w = 0; w < pr.window; ++w) {
      const T* src = R + g * pr.group_out * pr.rhs_out + i * pr.rhs_in + pr.rhs_offset(w);
      copy_strided(src, pr.rhs_out, pr.group_out, dst + ((i - i0) * pr.window + w) * pr.group_out);
    }
  }
}

// By output image: Y is [batch, positions, out_features].
template <typename T>
void conv_by_image(const Problem& pr, const T* L, const T* R, T* Y) {
  const int64_t K = pr.window * pr.group_in;
  // The rhs of every group as [window x group_in, group_out]: window-major rows, as im2col's columns.
  Buffer packed = Buffer::uninitialized(dtype_v<T>, {pr.groups * K * pr.group_out});
  for (int64_t g = 0; g < pr.groups; ++g) {
    T* dst = packed.mutable_data<T>() + g * K * pr.group_out;
    for (int64_t w = 0; w < pr.window; ++w) {
      for (int64_t i = 0; i < pr.group_in; ++i) {
        const T* src = R + g * pr.group_out * pr.rhs_out + i * pr.rhs_in + pr.rhs_offset(w);
        copy_strided(src, pr.rhs_out, pr.group_out, dst + (w * pr.group_in + i) * pr.group_out);
      }
    }
  }
  const T* rhs = packed.data<T>();
  const int64_t rows = std::clamp<int64_t>(kPanelElements / K, 1, pr.positions);
  // Rows [p0, p1) of the im2col matrix of batch element b and group g, into col.
  auto gather = [&](int64_t b, int64_t g, int64_t p0, int64_t p1, T* col) {
    const T* base = L + b * pr.lhs_batch + g * pr.group_in * pr.lhs_feature;
    RunGather<T> runs(pr.group_in, pr.lhs_feature);
    for (int64_t p = p0; p < p1; ++p) {
      for (int64_t w = 0; w < pr.window; ++w) {
        const int64_t off = pr.offset(p, w);
        runs.add(off == kHole ? nullptr : base + off, col + ((p - p0) * pr.window + w) * pr.group_in);
      }
    }
  };
  auto multiply = [&](int64_t b, int64_t g, int64_t p0, int64_t p1, const T* col) {
    blas_gemm(false, false, p1 - p0, pr.group_out, K, col, K, rhs + g * K * pr.group_out, pr.group_out, T(0),
              Y + (b * pr.positions + p0) * pr.out_features + g * pr.group_out, pr.out_features);
  };
  const int64_t units = pr.batch * pr.groups;
  const int threads = intra_op_threads();
  if (threads <= 1 || units >= threads) {
    std::optional<ScopedBlasOnCaller> on_caller;
    if (threads > 1) on_caller.emplace();
    parallel_for(units, 1, [&](int64_t u0, int64_t u1) {
      Buffer col = Buffer::uninitialized(dtype_v<T>, {rows * K});
      for (int64_t u = u0; u < u1; ++u) {
        for (int64_t p0 = 0; p0 < pr.positions; p0 += rows) {
          const int64_t p1 = std::min(pr.positions, p0 + rows);
          gather(u / pr.groups, u % pr.groups, p0, p1, col.mutable_data<T>());
          multiply(u / pr.groups, u % pr.groups, p0, p1, col.data<T>());
        }
      }
    });
    return;
  }
  // Fewer images than threads: gather in parallel, one multi-threaded GEMM per panel.
  Buffer col = Buffer::uninitialized(dtype_v<T>, {rows * K});
  T* c = col.mutable_data<T>();
  for (int64_t u = 0; u < units; ++u) {
    for (int64_t p0 = 0; p0 < pr.positions; p0 += rows) {
      const int64_t p1 = std::min(pr.positions, p0 + rows);
      parallel_for(p1 - p0, std::max<int64_t>(1, 4096 / K),
                   [&](int64_t a, int64_t e) { gather(u / pr.groups, u % pr.groups, p0 + a, p0 + e, c + a * K); });
      multiply(u / pr.groups, u % pr.groups, p0, p1, c);
    }
  }
}

// Whether rhs rows (i, w...) of one group lie at one uniform stride with unit-stride output features, so
// GEMMs read them in place; *row_stride is that stride.
bool rhs_rows_in_place(const Problem& pr, int64_t* row_stride) {
  if (pr.rhs_out != 1) return false;
  int64_t s = pr.n > 0 ? pr.rhs_spatial[pr.n - 1] : pr.rhs_in;
  *row_stride = s;
  for (int d = pr.n - 1; d >= 0; --d) {
    if (pr.rhs_spatial[d] != s) return false;
    s *= pr.win[d];
  }
  return pr.rhs_in == s && *row_stride >= pr.group_out;
}

// By contracted feature: Y is [positions, batch, out_features].
template <typename T>
void conv_by_feature(const Problem& pr, const T* L, const T* R, T* Y) {
  const int64_t M = pr.positions * pr.batch;
  const int64_t slices = std::min(pr.group_in, kMaxFeatureSlices);
  const int64_t chunk = std::clamp<int64_t>(kPanelElements / (pr.window * M), 1, pr.group_in);
  int64_t row_stride = 0;
  const bool in_place = rhs_rows_in_place(pr, &row_stride);
  Buffer partial = Buffer::uninitialized(dtype_v<T>, {pr.groups * slices * M * pr.group_out});
  std::optional<ScopedBlasOnCaller> on_caller;
  if (intra_op_threads() > 1) on_caller.emplace();
  parallel_for(pr.groups * slices, 1, [&](int64_t u0, int64_t u1) {
    Buffer col = Buffer::uninitialized(dtype_v<T>, {chunk * pr.window * M});
    Buffer rows = Buffer::uninitialized(dtype_v<T>, {in_place ? 0 : chunk * pr.window * pr.group_out});
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t g = u / slices, j = u % slices;
      const int64_t i0 = pr.group_in * j / slices, i1 = pr.group_in * (j + 1) / slices;
      T* acc = partial.mutable_data<T>() + u * M * pr.group_out;
      for (int64_t ic = i0; ic < i1; ic += chunk) {
        const int64_t ie = std::min(i1, ic + chunk);
        // col[(i, w), (p, b)] = L[b, feature of i, window w of position p].
        RunGather<T> runs(pr.batch, pr.lhs_batch);
        for (int64_t i = ic; i < ie; ++i) {
          const T* base = L + (g * pr.group_in + i) * pr.lhs_feature;
          for (int64_t w = 0; w < pr.window; ++w) {
            T* row = col.mutable_data<T>() + ((i - ic) * pr.window + w) * M;
            for (int64_t p = 0; p < pr.positions; ++p) {
              const int64_t off = pr.offset(p, w);
              runs.add(off == kHole ? nullptr : base + off, row + p * pr.batch);
            }
          }
        }
        runs.flush();
        const T* b = R + g * pr.group_out * pr.rhs_out + ic * pr.rhs_in;
        int64_t ldb = row_stride;
        if (!in_place) {
          pack_rhs_rows(pr, R, g, ic, ie, rows.mutable_data<T>());
          b = rows.data<T>();
          ldb = pr.group_out;
        }
        blas_gemm(true, false, M, pr.group_out, (ie - ic) * pr.window, col.data<T>(), M, b, ldb,
                  ic == i0 ? T(0) : T(1), acc, pr.group_out);
      }
    }
  });
  const T* parts = partial.data<T>();
  parallel_for(M, std::max<int64_t>(1, 16384 / pr.out_features), [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      for (int64_t g = 0; g < pr.groups; ++g) {
        T* dst = Y + m * pr.out_features + g * pr.group_out;
        for (int64_t j = 0; j < slices; ++j) {
          const T* src = parts + ((g * slices + j) * M + m) * pr.group_out;
          for (int64_t o = 0; o < pr.group_out; ++o) dst[o] = j == 0 ? src[o] : dst[o] + src[o];
        }
      }
    }
  });
}

// The Winograd form of the convolution when it applies (2-D 3x3 windows, stride 1, no dilation, one group)
// and pays off (conv_winograd.h).
std::optional<Winograd3x3> winograd_form(const View& lhs, const ConvGeometry& geometry, const Problem& pr) {
  const ir::ConvConfig& c = geometry.config;
  const std::vector<int64_t> ones{1, 1};
  if (pr.n != 2 || pr.win != std::vector<int64_t>{3, 3} || c.window_strides != ones || c.lhs_dilation != ones ||
      c.rhs_dilation != ones || c.feature_group_count != 1) {
    return std::nullopt;
  }
  Winograd3x3 w;
  w.batch = pr.batch;
  w.channels = pr.group_in;
  w.out_channels = pr.out_features;
  w.in_h = lhs.dims[c.lhs_spec[2]];
  w.in_w = lhs.dims[c.lhs_spec[3]];
  w.out_h = pr.out[0];
  w.out_w = pr.out[1];
  w.pad_top = geometry.padding_low[0];
  w.pad_left = geometry.padding_low[1];
  w.lhs_batch = pr.lhs_batch;
  w.lhs_channel = pr.lhs_feature;
  w.lhs_h = lhs.strides[c.lhs_spec[2]];
  w.lhs_w = lhs.strides[c.lhs_spec[3]];
  w.rhs_out = pr.rhs_out;
  w.rhs_in = pr.rhs_in;
  w.rhs_h = pr.rhs_spatial[0];
  w.rhs_w = pr.rhs_spatial[1];
  if (!winograd_pays_off(w)) return std::nullopt;
  return w;
}

// x as a contiguous float Buffer of the same dims.
Buffer to_float(const View& x) {
  Buffer m = materialize(x);
  Buffer f = Buffer::uninitialized(DType::kFloat32, m.dims());
  load_compute(m.dtype(), m.data(), f.mutable_data(), m.num_elements());
  return f;
}

}  // namespace

absl::StatusOr<ConvGeometry> conv_geometry(const ir::Attrs& attrs, int rank) {
  ConvGeometry g;
  MCX_ASSIGN_OR_RETURN(g.config, ir::get_conv_config(attrs, rank));
  MCX_ASSIGN_OR_RETURN(g.padding_low, to_concrete(g.config.padding_low));
  MCX_ASSIGN_OR_RETURN(g.padding_high, to_concrete(g.config.padding_high));
  return g;
}

Buffer conv_general_dilated(const View& lhs, const View& rhs, const ConvGeometry& geometry,
                            const std::vector<int64_t>& out_dims) {
  const DType dt = lhs.dtype;
  const int64_t total = product(out_dims);
  if (total == 0 || product(lhs.dims) == 0 || product(rhs.dims) == 0) return Buffer::zeros(dt, out_dims);
  const DType ct = dt == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  Buffer lhs_f, rhs_f;
  View lv = lhs, rv = rhs;
  if (ct != dt) {
    lhs_f = to_float(lhs);
    rhs_f = to_float(rhs);
    lv = view_of(lhs_f);
    rv = view_of(rhs_f);
  }
  const Problem pr = make_problem(lv, rv, geometry, out_dims);
  const bool by_feature = pr.positions < pr.window;
  const std::optional<Winograd3x3> winograd = by_feature ? std::nullopt : winograd_form(lv, geometry, pr);
  Buffer y = Buffer::uninitialized(ct, {total});
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* l = reinterpret_cast<const T*>(lv.data);
    const T* r = reinterpret_cast<const T*>(rv.data);
    if (winograd) {
      conv_winograd_3x3(*winograd, l, r, y.mutable_data<T>());
    } else if (by_feature) {
      conv_by_feature(pr, l, r, y.mutable_data<T>());
    } else {
      conv_by_image(pr, l, r, y.mutable_data<T>());
    }
  };
  if (ct == DType::kFloat32) {
    run(float{});
  } else {
    run(double{});
  }
  // y holds [batch, positions, features] (by image, and Winograd) or [positions, batch, features] (by
  // feature): view it in the result's dimension order.
  View yv;
  yv.data = static_cast<std::byte*>(y.mutable_data());
  yv.dtype = ct;
  yv.dims = out_dims;
  yv.strides.assign(out_dims.size(), 0);
  int64_t stride = pr.out_features;
  if (!by_feature) yv.strides[geometry.config.out_spec[0]] = pr.positions * pr.out_features;
  yv.strides[geometry.config.out_spec[1]] = 1;
  for (int d = pr.n - 1; d >= 0; --d) {
    yv.strides[geometry.config.out_spec[2 + d]] = stride * (by_feature ? pr.batch : 1);
    stride *= pr.out[d];
  }
  if (by_feature) yv.strides[geometry.config.out_spec[0]] = pr.out_features;
  Buffer arranged = yv.is_contiguous() ? y.reshaped(out_dims) : materialize(yv);
  if (ct == dt) return arranged;
  Buffer out = Buffer::uninitialized(dt, out_dims);
  store_compute(dt, arranged.data(), out.mutable_data(), total);
  return out;
}

}  // namespace mcx::cpu
