// Reductions, arg-reductions and cumsum. Compiled with -O3 -ffast-math -fno-finite-math-only; the
// accumulation order is written out explicitly (16 lanes, fixed chunks) so results do not depend on the
// vectoriser or on the number of threads. NaN checks stay valid (finite-math-only is off).
#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <memory>

#include "mcx/backend/cpu/elementwise.h"
#include "mcx/backend/cpu/kernels.h"
#include "mcx/backend/cpu/thread_pool.h"

namespace mcx::cpu {
namespace {

using ir::OpKind;

template <typename A> struct SumOp {
  static A init() { return A(0); }
  static A apply(A a, A b) {
    if constexpr (std::is_same_v<A, bool>) return a || b;
    else if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else return a + b;
  }
};
template <typename A> struct ProdOp {
  static A init() { return A(1); }
  static A apply(A a, A b) {
    if constexpr (std::is_same_v<A, bool>) return a && b;
    else if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
      return static_cast<A>(static_cast<U>(static_cast<W>(a) * static_cast<W>(b)));
    } else return a * b;
  }
};
template <typename A> struct MaxOp {
  static A init() {
    if constexpr (std::is_floating_point_v<A>) return -std::numeric_limits<A>::infinity();
    else return std::numeric_limits<A>::lowest();
  }
  static A apply(A a, A b) {
    if constexpr (std::is_floating_point_v<A>) return (a != a || a > b) ? a : b;  // NaN sticks
    else return a > b ? a : b;
  }
};
template <typename A> struct MinOp {
  static A init() {
    if constexpr (std::is_floating_point_v<A>) return std::numeric_limits<A>::infinity();
    else return std::numeric_limits<A>::max();
  }
  static A apply(A a, A b) {
    if constexpr (std::is_floating_point_v<A>) return (a != a || a < b) ? a : b;
    else return a < b ? a : b;
  }
};

// Shape-determined chunk sizes (never derived from the thread count).
constexpr int64_t kRowChunk = 8192;  // elements of one row reduced by one work item
constexpr int64_t kColChunk = 256;   // rows of a column reduction per work item

// Reduces n contiguous values with 16 independent lanes combined in a fixed order.
template <typename Op> struct IsMinMax : std::false_type {};
template <typename A> struct IsMinMax<MaxOp<A>> : std::true_type {};
template <typename A> struct IsMinMax<MinOp<A>> : std::true_type {};

// Float max/min with GCC vector extensions (VB-byte vectors, 4 accumulators): `v > acc ? v : acc` is
// one maxps/minps and keeps acc when v is NaN, so NaNs are tracked in a separate accumulator. Wider
// generic vectors are lowered to scalar code on the baseline ISA, so the 32/64-byte forms are only
// compiled into AVX2/AVX-512 functions, chosen at run time (minmax_run). The result does not depend on
// the width (max/min are order-independent; any NaN gives the canonical quiet NaN).
template <typename A, typename Op, int VB>
[[gnu::always_inline]] inline A minmax_run_vb(const A* x, int64_t n) {
  constexpr int W = VB / sizeof(A), K = 4, L = W * K;
  static_assert(K == 4, "the combination below is written for four accumulators");
  typedef A Vec __attribute__((vector_size(VB)));
  constexpr bool kMax = std::is_same_v<Op, MaxOp<A>>;
  Vec acc[K], nan_seen[K] = {};
  for (int k = 0; k < K; ++k) acc[k] = Vec{} + Op::init();  // every lane init()
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    for (int k = 0; k < K; ++k) {
      Vec v;
      std::memcpy(&v, x + i + k * W, sizeof(Vec));
      if constexpr (kMax) acc[k] = v > acc[k] ? v : acc[k];
      else acc[k] = v < acc[k] ? v : acc[k];
      nan_seen[k] = v != v ? v : nan_seen[k];
    }
  }
  A r = Op::init();
  bool nan = false;
  for (; i < n; ++i) {
    nan |= (x[i] != x[i]);
    r = Op::apply(r, x[i]);
  }
  for (int k = 0; k < K; ++k) {
    for (int j = 0; j < W; ++j) nan |= (nan_seen[k][j] != nan_seen[k][j]);
  }
  // The accumulators hold no NaN. Combined as a tree (pairs of accumulators lane by lane, then halves of the
  // lanes), `a > b ? a : b` (ties keep b), so that a short row does not pay a chain of K * W dependent steps;
  // the row kernels (codegen/row_emitter.cc) combine in the same order.
  Vec v;
  if constexpr (kMax) {
    const Vec v01 = acc[0] > acc[1] ? acc[0] : acc[1], v23 = acc[2] > acc[3] ? acc[2] : acc[3];
    v = v01 > v23 ? v01 : v23;
  } else {
    const Vec v01 = acc[0] < acc[1] ? acc[0] : acc[1], v23 = acc[2] < acc[3] ? acc[2] : acc[3];
    v = v01 < v23 ? v01 : v23;
  }
  A lanes[W];
  std::memcpy(lanes, &v, sizeof(Vec));
  for (int w = W / 2; w >= 1; w /= 2) {
    for (int j = 0; j < w; ++j) {
      if constexpr (kMax) lanes[j] = lanes[j] > lanes[j + w] ? lanes[j] : lanes[j + w];
      else lanes[j] = lanes[j] < lanes[j + w] ? lanes[j] : lanes[j + w];
    }
  }
  r = Op::apply(r, lanes[0]);
  return nan ? std::numeric_limits<A>::quiet_NaN() : r;
}

template <typename A, typename Op>
__attribute__((target("avx512f"))) A minmax_run_avx512(const A* x, int64_t n) {
  return minmax_run_vb<A, Op, 64>(x, n);
}
template <typename A, typename Op>
__attribute__((target("avx2"))) A minmax_run_avx2(const A* x, int64_t n) {
  return minmax_run_vb<A, Op, 32>(x, n);
}

template <typename A, typename Op>
A minmax_run(const A* x, int64_t n) {
  static const int isa = __builtin_cpu_supports("avx512f") ? 2 : (__builtin_cpu_supports("avx2") ? 1 : 0);
  if (isa == 2) return minmax_run_avx512<A, Op>(x, n);
  if (isa == 1) return minmax_run_avx2<A, Op>(x, n);
  return minmax_run_vb<A, Op, 16>(x, n);
}

template <typename S, typename Op>
compute_t<S> reduce_run(const S* x, int64_t n) {
  using A = compute_t<S>;
  if constexpr (std::is_floating_point_v<S> && IsMinMax<Op>::value) return minmax_run<S, Op>(x, n);
  constexpr int L = 16;
  A acc[L];
  for (int j = 0; j < L; ++j) acc[j] = Op::init();
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    for (int j = 0; j < L; ++j) acc[j] = Op::apply(acc[j], to_compute(x[i + j]));
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] = Op::apply(acc[j], to_compute(x[i]));
  for (int w = L / 2; w >= 1; w /= 2) {
    for (int j = 0; j < w; ++j) acc[j] = Op::apply(acc[j], acc[j + w]);
  }
  return acc[0];
}

// x viewed as [k1, r, k2] (contiguous); out is [k1, k2].
template <typename S, typename Op>
void reduce3(const S* x, int64_t k1, int64_t r, int64_t k2, S* out) {
  using A = compute_t<S>;
  if (k2 == 1) {
    const int64_t nch = std::max<int64_t>(1, (r + kRowChunk - 1) / kRowChunk);
    std::unique_ptr<A[]> partial(new A[k1 * nch]);  // not vector<bool>: written concurrently
    parallel_for(k1 * nch, std::max<int64_t>(1, 16384 / std::min(std::max<int64_t>(r, 1), kRowChunk)),
                 [&](int64_t b, int64_t e) {
      for (int64_t w = b; w < e; ++w) {
        const int64_t row = w / nch, c = w % nch;
        const int64_t lo = c * kRowChunk, hi = std::min(r, lo + kRowChunk);
        partial[w] = reduce_run<S, Op>(x + row * r + lo, hi - lo);
      }
    });
    for (int64_t row = 0; row < k1; ++row) {
      A acc = partial[row * nch];
      for (int64_t c = 1; c < nch; ++c) acc = Op::apply(acc, partial[row * nch + c]);
      out[row] = from_compute<S>(acc);
    }
    return;
  }
  // Column reduction: work item (i1, chunk of rows) accumulates a vector of k2 partials.
  const int64_t nch = std::max<int64_t>(1, (r + kColChunk - 1) / kColChunk);
  std::unique_ptr<A[]> partial(new A[k1 * nch * k2]);
  parallel_for(k1 * nch, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, kColChunk * k2)),
               [&](int64_t b, int64_t e) {
    for (int64_t w = b; w < e; ++w) {
      const int64_t i1 = w / nch, c = w % nch;
      const int64_t lo = c * kColChunk, hi = std::min(r, lo + kColChunk);
      A* acc = partial.get() + w * k2;
      for (int64_t j = 0; j < k2; ++j) acc[j] = Op::init();
      for (int64_t ir = lo; ir < hi; ++ir) {
        const S* row = x + (i1 * r + ir) * k2;
        for (int64_t j = 0; j < k2; ++j) acc[j] = Op::apply(acc[j], to_compute(row[j]));
      }
    }
  });
  parallel_for(k1, 1, [&](int64_t b, int64_t e) {
    for (int64_t i1 = b; i1 < e; ++i1) {
      for (int64_t j = 0; j < k2; ++j) {
        A acc = partial[(i1 * nch) * k2 + j];
        for (int64_t c = 1; c < nch; ++c) acc = Op::apply(acc, partial[(i1 * nch + c) * k2 + j]);
        out[i1 * k2 + j] = from_compute<S>(acc);
      }
    }
  });
}

// Canonical [k1, r, k2] form of x for reduced dims, or false when the reduced dims are not one block
// after dropping size-1 dims.
bool as_three(const std::vector<int64_t>& dims, const std::vector<bool>& red, int64_t* k1, int64_t* r,
              int64_t* k2) {
  *k1 = *r = *k2 = 1;
  int phase = 0;  // 0: before the reduced block, 1: in it, 2: after it
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    if (red[i]) {
      if (phase == 2) return false;
      phase = 1;
      *r *= dims[i];
    } else {
      if (phase == 1) phase = 2;
      (phase == 0 ? *k1 : *k2) *= dims[i];
    }
  }
  return true;
}

}  // namespace

Buffer reduce(OpKind kind, const View& x, const std::vector<int64_t>& dims) {
  std::vector<bool> red(x.rank(), false);
  for (int64_t d : dims) red[d] = true;
  std::vector<int64_t> out_dims;
  for (int i = 0; i < x.rank(); ++i) if (!red[i]) out_dims.push_back(x.dims[i]);
  Buffer out = Buffer::uninitialized(x.dtype, out_dims);
  int64_t k1, r, k2;
  View src = x;
  Buffer holder;
  if (!as_three(x.dims, red, &k1, &r, &k2)) {
    // Move kept dims first, reduced dims last, then reduce rows.
    View t;
    t.data = x.data;
    t.dtype = x.dtype;
    for (int pass = 0; pass < 2; ++pass) {
      for (int i = 0; i < x.rank(); ++i) {
        if (red[i] == (pass == 1)) {
          t.dims.push_back(x.dims[i]);
          t.strides.push_back(x.strides[i]);
        }
      }
    }
    holder = materialize(t);
    src = view_of(holder);
    std::vector<bool> red2(x.rank(), false);
    for (int i = x.rank() - static_cast<int>(dims.size()); i < x.rank(); ++i) red2[i] = true;
    as_three(src.dims, red2, &k1, &r, &k2);
  } else if (!x.is_contiguous()) {
    holder = materialize(x);
    src = view_of(holder);
  }
  if (out.num_elements() == 0) return out;
  dispatch_dtype(x.dtype, [&](auto v) {
    using S = decltype(v);
    using A = compute_t<S>;
    const S* p = reinterpret_cast<const S*>(src.data);
    S* o = out.mutable_data<S>();
    switch (kind) {
      case OpKind::kReduceSum: return reduce3<S, SumOp<A>>(p, k1, r, k2, o);
      case OpKind::kReduceProd: return reduce3<S, ProdOp<A>>(p, k1, r, k2, o);
      case OpKind::kReduceMax: return reduce3<S, MaxOp<A>>(p, k1, r, k2, o);
      default: return reduce3<S, MinOp<A>>(p, k1, r, k2, o);
    }
  });
  return out;
}

Buffer arg_reduce(OpKind kind, const View& x, int64_t dim, DType index_dtype) {
  std::vector<int64_t> out_dims;
  int64_t k1 = 1, k2 = 1;
  for (int i = 0; i < x.rank(); ++i) {
    if (i == dim) continue;
    out_dims.push_back(x.dims[i]);
    (i < dim ? k1 : k2) *= x.dims[i];
  }
  const int64_t r = x.dims[dim];
  Buffer out = Buffer::uninitialized(index_dtype, out_dims);
  if (out.num_elements() == 0) return out;
  Buffer holder;
  View src = x;
  if (!x.is_contiguous()) {
    holder = materialize(x);
    src = view_of(holder);
  }
  std::vector<int64_t> idx(k1 * k2);
  const bool is_max = kind == OpKind::kArgMax;
  dispatch_dtype(x.dtype, [&](auto v) {
    using S = decltype(v);
    using A = compute_t<S>;
    const S* p = reinterpret_cast<const S*>(src.data);
    parallel_for(k1 * k2, std::max<int64_t>(1, 16384 / std::max<int64_t>(r, 1)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const int64_t i1 = o / k2, i2 = o % k2;
        const S* base = p + i1 * r * k2 + i2;
        int64_t best_i = 0;
        A best = r > 0 ? to_compute(base[0]) : A{};
        for (int64_t j = 1; j < r; ++j) {
          A cur = to_compute(base[j * k2]);
          bool take;
          if constexpr (std::is_floating_point_v<A>) {
            if (best != best) break;  // NaN found first: it is the answer
            take = (cur != cur) || (is_max ? cur > best : cur < best);
          } else {
            take = is_max ? cur > best : cur < best;
          }
          if (take) {
            best = cur;
            best_i = j;
          }
        }
        idx[o] = best_i;
      }
    });
  });
  dispatch_dtype(index_dtype, [&](auto v) {
    using I = decltype(v);
    I* o = out.mutable_data<I>();
    for (size_t i = 0; i < idx.size(); ++i) o[i] = static_cast<I>(idx[i]);
  });
  return out;
}

Buffer cumsum(const View& x, int64_t dim, bool reverse) {
  Buffer out = Buffer::uninitialized(x.dtype, x.dims);
  if (out.num_elements() == 0) return out;
  const Lines lines = lines_along(x, dim);
  const int64_t k1 = lines.outer, r = lines.length, k2 = lines.inner;
  const View& src = lines.data;
  constexpr int64_t kCols = 256;
  const int64_t col_blocks = (k2 + kCols - 1) / kCols;
  dispatch_dtype(x.dtype, [&](auto v) {
    using S = decltype(v);
    using A = compute_t<S>;
    const S* p = reinterpret_cast<const S*>(src.data);
    S* o = out.mutable_data<S>();
    parallel_for(k1 * col_blocks, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, r * kCols)),
                 [&](int64_t b, int64_t e) {
      std::vector<A> acc(kCols);
      for (int64_t w = b; w < e; ++w) {
        const int64_t i1 = w / col_blocks, c0 = (w % col_blocks) * kCols, c1 = std::min(k2, c0 + kCols);
        std::fill(acc.begin(), acc.end(), A(0));
        for (int64_t s = 0; s < r; ++s) {
          const int64_t j = reverse ? r - 1 - s : s;
          const S* in = p + (i1 * r + j) * k2;
          S* dst = o + (i1 * r + j) * k2;
          for (int64_t c = c0; c < c1; ++c) {
            acc[c - c0] = SumOp<A>::apply(acc[c - c0], to_compute(in[c]));
            dst[c] = from_compute<S>(acc[c - c0]);
          }
        }
      }
    });
  });
  return out;
}

}  // namespace mcx::cpu
