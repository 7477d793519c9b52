// Non-element-wise kernels other than the reductions (reduce_fastmath.cc).
#include "mcx/backend/cpu/kernels.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "mcx/backend/cpu/blas.h"
#include "mcx/backend/cpu/elementwise.h"
#include "mcx/backend/cpu/thread_pool.h"

namespace mcx::cpu {
namespace {

View offset_view(View v, const std::vector<int64_t>& starts) {
  int64_t off = 0;
  for (int i = 0; i < v.rank(); ++i) off += starts[i] * v.strides[i];
  v.data += off * dtype_size(v.dtype);
  return v;
}

// The sub-view of the dims listed in `order` (a permutation of a subset of v's dims).
View select_dims(const View& v, const std::vector<int64_t>& order) {
  View r;
  r.data = v.data;
  r.dtype = v.dtype;
  for (int64_t d : order) {
    r.dims.push_back(v.dims[d]);
    r.strides.push_back(v.strides[d]);
  }
  return r;
}

std::vector<int64_t> concat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int64_t> free_dims(int rank, const std::vector<int64_t>& batch, const std::vector<int64_t>& contr) {
  std::vector<int64_t> f;
  for (int i = 0; i < rank; ++i) {
    if (std::find(batch.begin(), batch.end(), i) == batch.end() &&
        std::find(contr.begin(), contr.end(), i) == contr.end()) {
      f.push_back(i);
    }
  }
  return f;
}

// One operand of a GEMM: per batch a row-major matrix [rows, cols] or its transpose.
struct GemmOperand {
  Buffer holder;  // keeps materialised data alive
  View batch;     // batch dims with their strides (data = start of batch 0)
  bool trans = false;
  int64_t ld = 0;
};

// Arranges x so that each batch is a contiguous row-major matrix [a, b] (or [b, a], transposed),
// where a/b are the dims listed in first/second; materialises only when neither layout holds.
GemmOperand arrange(const View& x, const std::vector<int64_t>& batch, const std::vector<int64_t>& first,
                    const std::vector<int64_t>& second, bool force_copy, DType as) {
  GemmOperand g;
  const int64_t a = product(select_dims(x, first).dims), b = product(select_dims(x, second).dims);
  if (!force_copy) {
    if (select_dims(x, concat(first, second)).is_contiguous()) {
      g.batch = select_dims(x, batch);
      g.trans = false;
      g.ld = std::max<int64_t>(b, 1);
      return g;
    }
    if (select_dims(x, concat(second, first)).is_contiguous()) {
      g.batch = select_dims(x, batch);
      g.trans = true;
      g.ld = std::max<int64_t>(a, 1);
      return g;
    }
  }
  View permuted = select_dims(x, concat(concat(batch, first), second));
  Buffer m = materialize(permuted);
  if (as != m.dtype()) {
    Buffer c = Buffer::uninitialized(as, m.dims());
    load_compute(m.dtype(), m.data(), c.mutable_data(), m.num_elements());
    m = c;
  }
  g.holder = m;
  View mv = view_of(m);
  std::vector<int64_t> bd(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) bd[i] = static_cast<int64_t>(i);
  g.batch = select_dims(mv, bd);
  g.batch.dtype = as;
  g.trans = false;
  g.ld = std::max<int64_t>(b, 1);
  return g;
}

template <typename T>
void naive_gemm(const T* A, const T* B, T* C, int64_t M, int64_t N, int64_t K) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      T acc = T(0);
      for (int64_t k = 0; k < K; ++k) {
        if constexpr (std::is_same_v<T, bool>) {
          acc = acc || (A[i * K + k] && B[k * N + j]);
        } else {
          using U = std::make_unsigned_t<T>;
          using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
          acc = static_cast<T>(static_cast<U>(static_cast<W>(acc) +
                                              static_cast<W>(A[i * K + k]) * static_cast<W>(B[k * N + j])));
        }
      }
      C[i * N + j] = acc;
    }
  }
}

}  // namespace

int64_t read_index(const View& v) {
  return dispatch_dtype(v.dtype, [&](auto t) -> int64_t {
    using T = decltype(t);
    if constexpr (std::is_integral_v<T>) return static_cast<int64_t>(*reinterpret_cast<const T*>(v.data));
    else throw std::logic_error("[cpu] index operand must be an integer");
  });
}

Buffer dot_general(const View& lhs, const View& rhs, const std::vector<int64_t>& lb, const std::vector<int64_t>& rb,
                   const std::vector<int64_t>& lc, const std::vector<int64_t>& rc) {
  const std::vector<int64_t> lf = free_dims(lhs.rank(), lb, lc), rf = free_dims(rhs.rank(), rb, rc);
  std::vector<int64_t> out_dims;
  for (int64_t d : lb) out_dims.push_back(lhs.dims[d]);
  for (int64_t d : lf) out_dims.push_back(lhs.dims[d]);
  for (int64_t d : rf) out_dims.push_back(rhs.dims[d]);
  const DType dt = lhs.dtype;
  const int64_t M = product(select_dims(lhs, lf).dims), N = product(select_dims(rhs, rf).dims);
  const int64_t K = product(select_dims(lhs, lc).dims);
  const int64_t B = product(select_dims(lhs, lb).dims);
  if (product(out_dims) == 0 || K == 0) return Buffer::zeros(dt, out_dims);  // empty, or an empty sum
  Buffer out = Buffer::uninitialized(dt, out_dims);  // every element is written below (beta = 0)

  const bool is_blas = dt == DType::kFloat32 || dt == DType::kFloat64;
  const bool is_half = dt == DType::kFloat16 || dt == DType::kBFloat16;
  const DType as = is_half ? DType::kFloat32 : dt;
  const bool force_copy = !is_blas;  // naive loops and 16-bit floats want packed row-major copies
  GemmOperand a = arrange(lhs, lb, lf, lc, force_copy, as);
  GemmOperand b = arrange(rhs, rb, rc, rf, force_copy, as);
  Buffer acc = is_half ? Buffer::uninitialized(DType::kFloat32, out_dims) : out;
  const int esize = dtype_size(as);
  std::vector<int64_t> zeros(a.batch.rank(), 0);
  int64_t bi = 0;
  for_each_index2(a.batch.dims, a.batch.strides, b.batch.strides, 0, B, [&](int64_t oa, int64_t ob) {
    const std::byte* pa = a.batch.data + oa * esize;
    const std::byte* pb = b.batch.data + ob * esize;
    std::byte* pc = static_cast<std::byte*>(acc.mutable_data()) + bi * M * N * esize;
    ++bi;
    if (as == DType::kFloat32) {
      blas_gemm(a.trans, b.trans, M, N, K, reinterpret_cast<const float*>(pa), a.ld,
                reinterpret_cast<const float*>(pb), b.ld, 0.0f, reinterpret_cast<float*>(pc), N);
    } else if (as == DType::kFloat64) {
      blas_gemm(a.trans, b.trans, M, N, K, reinterpret_cast<const double*>(pa), a.ld,
                reinterpret_cast<const double*>(pb), b.ld, 0.0, reinterpret_cast<double*>(pc), N);
    } else {
      dispatch_dtype(as, [&](auto t) {
        using T = decltype(t);
        if constexpr (std::is_integral_v<T>) {
          naive_gemm(reinterpret_cast<const T*>(pa), reinterpret_cast<const T*>(pb), reinterpret_cast<T*>(pc), M,
                     N, K);
        } else {
          throw std::logic_error("[cpu] dot_general: unexpected dtype");
        }
      });
    }
  });
  if (is_half) store_compute(dt, acc.data(), out.mutable_data(), out.num_elements());
  return out;
}

Buffer iota(DType dtype, const std::vector<int64_t>& dims, int64_t dimension) {
  Buffer out = Buffer::uninitialized(dtype, dims);
  const int64_t n = out.num_elements();
  if (n == 0) return out;
  int64_t inner = 1;
  for (size_t i = dimension + 1; i < dims.size(); ++i) inner *= dims[i];
  const int64_t len = dims[dimension];
  dispatch_dtype(dtype, [&](auto t) {
    using S = decltype(t);
    S* o = out.mutable_data<S>();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = (i / inner) % len;
      if constexpr (std::is_same_v<S, bool>) o[i] = v != 0;
      else o[i] = from_compute<S>(static_cast<compute_t<S>>(v));
    }
  });
  return out;
}

Buffer concatenate(std::span<const View> xs, int64_t dimension) {
  std::vector<int64_t> dims = xs[0].dims;
  dims[dimension] = 0;
  for (const View& x : xs) dims[dimension] += x.dims[dimension];
  Buffer out = Buffer::uninitialized(xs[0].dtype, dims);
  View ov = view_of(out);
  std::vector<int64_t> starts(dims.size(), 0);
  for (const View& x : xs) {
    View dst = offset_view(ov, starts);
    dst.dims = x.dims;
    copy_view(x, dst);
    starts[dimension] += x.dims[dimension];
  }
  return out;
}

Buffer pad(const View& x, const View& value, const std::vector<int64_t>& low, const std::vector<int64_t>& high,
           const std::vector<int64_t>& interior) {
  const int r = x.rank();
  std::vector<int64_t> dims(r);
  for (int i = 0; i < r; ++i) {
    const int64_t n = x.dims[i];
    dims[i] = low[i] + high[i] + n + (n > 0 ? (n - 1) * interior[i] : 0);
  }
  Buffer out = Buffer::uninitialized(x.dtype, dims);
  if (out.num_elements() == 0) return out;
  View ov = view_of(out);
  View fill = value;
  fill.dims = dims;
  fill.strides.assign(r, 0);
  copy_view(fill, ov);
  View src = x, dst = ov;
  int64_t dst_off = 0;
  for (int i = 0; i < r; ++i) {
    const int64_t step = interior[i] + 1;
    // Input index j lands at low + j * step; keep those inside [0, dims[i]).
    int64_t j0 = low[i] >= 0 ? 0 : (-low[i] + step - 1) / step;
    int64_t j1 = x.dims[i];  // exclusive
    const int64_t last = dims[i] - 1 - low[i];
    j1 = last < 0 ? 0 : std::min(j1, last / step + 1);
    if (j1 <= j0) return out;  // nothing of x survives
    src.data += j0 * x.strides[i] * dtype_size(x.dtype);
    src.dims[i] = j1 - j0;
    dst.dims[i] = j1 - j0;
    dst.strides[i] = ov.strides[i] * step;
    dst_off += (low[i] + j0 * step) * ov.strides[i];
  }
  dst.data += dst_off * dtype_size(x.dtype);
  copy_view(src, dst);
  return out;
}

Buffer dynamic_slice(const View& x, std::span<const View> starts, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(x.rank());
  for (int i = 0; i < x.rank(); ++i) {
    s[i] = std::clamp<int64_t>(read_index(starts[i]), 0, std::max<int64_t>(0, x.dims[i] - sizes[i]));
  }
  View v = offset_view(x, s);
  v.dims = sizes;
  return materialize(v);
}

Buffer dynamic_update_slice(const View& x, const View& update, std::span<const View> starts) {
  Buffer out = materialize(x);
  std::vector<int64_t> s(x.rank());
  for (int i = 0; i < x.rank(); ++i) {
    s[i] = std::clamp<int64_t>(read_index(starts[i]), 0, std::max<int64_t>(0, x.dims[i] - update.dims[i]));
  }
  View dst = offset_view(view_of(out), s);
  dst.dims = update.dims;
  copy_view(update, dst);
  return out;
}

namespace {
std::vector<int64_t> read_indices(const View& indices) {
  Buffer ib = indices.is_contiguous() ? Buffer() : materialize(indices);
  const std::byte* p = indices.is_contiguous() ? indices.data : static_cast<const std::byte*>(ib.data());
  const int64_t k = product(indices.dims);
  std::vector<int64_t> idx(k);
  dispatch_dtype(indices.dtype, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_integral_v<T>) {
      for (int64_t i = 0; i < k; ++i) idx[i] = static_cast<int64_t>(reinterpret_cast<const T*>(p)[i]);
    } else {
      throw std::logic_error("[cpu] indices must be integers");
    }
  });
  return idx;
}
}  // namespace

Buffer take(const View& x, const View& indices) {
  std::vector<int64_t> dims = indices.dims;
  dims.insert(dims.end(), x.dims.begin() + 1, x.dims.end());
  Buffer out = Buffer::zeros(x.dtype, dims);
  if (out.num_elements() == 0 || x.dims[0] == 0) return out;
  const std::vector<int64_t> idx = read_indices(indices);
  Buffer xb = x.is_contiguous() ? Buffer() : materialize(x);
  const std::byte* xp = x.is_contiguous() ? x.data : static_cast<const std::byte*>(xb.data());
  const int64_t row_bytes = (product(x.dims) / x.dims[0]) * dtype_size(x.dtype);
  std::byte* o = static_cast<std::byte*>(out.mutable_data());
  const int64_t n = x.dims[0];
  parallel_for(static_cast<int64_t>(idx.size()), std::max<int64_t>(1, 65536 / std::max<int64_t>(1, row_bytes)),
               [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t row = std::clamp<int64_t>(idx[i], 0, n - 1);
      std::memcpy(o + i * row_bytes, xp + row * row_bytes, row_bytes);
    }
  });
  return out;
}

Buffer scatter_add(const View& x, const View& indices, const View& updates) {
  Buffer out = materialize(x);
  if (out.num_elements() == 0 || x.dims[0] == 0) return out;
  const std::vector<int64_t> idx = read_indices(indices);
  Buffer ub = updates.is_contiguous() ? Buffer() : materialize(updates);
  const std::byte* up = updates.is_contiguous() ? updates.data : static_cast<const std::byte*>(ub.data());
  const int64_t row = product(x.dims) / x.dims[0];
  const int64_t n = x.dims[0];
  dispatch_dtype(x.dtype, [&](auto t) {
    using S = decltype(t);
    using A = compute_t<S>;
    S* o = out.mutable_data<S>();
    const S* u = reinterpret_cast<const S*>(up);
    // Columns are independent; rows are applied in index order so duplicates add deterministically.
    parallel_for(row, std::max<int64_t>(1, 4096), [&](int64_t cb, int64_t ce) {
      for (size_t i = 0; i < idx.size(); ++i) {
        const int64_t r = std::clamp<int64_t>(idx[i], 0, n - 1);
        for (int64_t c = cb; c < ce; ++c) {
          A v;
          if constexpr (std::is_same_v<A, bool>) v = to_compute(o[r * row + c]) || to_compute(u[i * row + c]);
          else if constexpr (std::is_integral_v<A>) {
            using U = std::make_unsigned_t<A>;
            v = static_cast<A>(static_cast<U>(static_cast<U>(o[r * row + c]) + static_cast<U>(u[i * row + c])));
          } else v = to_compute(o[r * row + c]) + to_compute(u[i * row + c]);
          o[r * row + c] = from_compute<S>(v);
        }
      }
    });
  });
  return out;
}

Buffer threefry2x32(const View& key, const View& counts) {
  Buffer kb = materialize(key), cb = materialize(counts);
  Buffer out = Buffer::uninitialized(DType::kUInt32, counts.dims);
  const uint32_t k0 = kb.data<uint32_t>()[0], k1 = kb.data<uint32_t>()[1];
  const uint32_t ks[3] = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu};
  static constexpr int kRot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  const int64_t rows = cb.num_elements() / 2;
  const uint32_t* in = cb.data<uint32_t>();
  uint32_t* o = out.mutable_data<uint32_t>();
  parallel_for(rows, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      uint32_t x0 = in[2 * i] + ks[0], x1 = in[2 * i + 1] + ks[1];
      for (int block = 0; block < 5; ++block) {
        const int* rot = kRot[block % 2];
        for (int j = 0; j < 4; ++j) {
          x0 += x1;
          x1 = (x1 << rot[j]) | (x1 >> (32 - rot[j]));
          x1 ^= x0;
        }
        x0 += ks[(block + 1) % 3];
        x1 += ks[(block + 2) % 3] + static_cast<uint32_t>(block + 1);
      }
      o[2 * i] = x0;
      o[2 * i + 1] = x1;
    }
  });
  return out;
}

}  // namespace mcx::cpu
