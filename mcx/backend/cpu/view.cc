#include "mcx/backend/cpu/view.h"

#include <algorithm>
#include <cstring>

#include "mcx/backend/cpu/thread_pool.h"

namespace mcx::cpu {

std::vector<int64_t> multi_indices(const std::vector<int64_t>& dims) {
  const int64_t total = product(dims);
  const size_t n = dims.size();
  std::vector<int64_t> out(static_cast<size_t>(total) * n);
  std::vector<int64_t> idx(n, 0);
  for (int64_t k = 0; k < total; ++k) {
    std::copy(idx.begin(), idx.end(), out.begin() + k * n);
    for (int d = static_cast<int>(n) - 1; d >= 0; --d) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size());
  int64_t acc = 1;
  for (int i = static_cast<int>(dims.size()) - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= std::max<int64_t>(dims[i], 1);
  }
  return s;
}

int64_t View::num_elements() const { return product(dims); }

bool View::is_contiguous() const {
  int64_t expected = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    if (dims[i] == 1) continue;
    if (dims[i] == 0) return true;
    if (strides[i] != expected) return false;
    expected *= dims[i];
  }
  return true;
}

View view_of(const Buffer& b) {
  View v;
  v.data = static_cast<std::byte*>(const_cast<void*>(b.data()));
  v.dtype = b.dtype();
  v.dims = b.dims();
  v.strides = contiguous_strides(b.dims());
  return v;
}

namespace {

// Drops size-1 dims and merges adjacent dims that are contiguous with each other in both views.
void simplify(std::vector<int64_t>& dims, std::vector<int64_t>& sa, std::vector<int64_t>& sb) {
  std::vector<int64_t> d2, a2, b2;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    if (!d2.empty() && a2.back() == sa[i] * dims[i] && b2.back() == sb[i] * dims[i]) {
      d2.back() *= dims[i];
      a2.back() = sa[i];
      b2.back() = sb[i];
      continue;
    }
    d2.push_back(dims[i]);
    a2.push_back(sa[i]);
    b2.push_back(sb[i]);
  }
  dims = std::move(d2);
  sa = std::move(a2);
  sb = std::move(b2);
}

template <typename T>
void copy_typed(const T* src, T* dst, std::vector<int64_t> dims, std::vector<int64_t> ss,
                std::vector<int64_t> ds) {
  simplify(dims, ss, ds);
  const int r = static_cast<int>(dims.size());
  if (r == 0) {
    *dst = *src;
    return;
  }
  const int64_t inner = dims[r - 1];
  const int64_t s_in = ss[r - 1], d_in = ds[r - 1];
  // Blocked transpose: the source is unit-stride along some outer dim a while the destination is
  // unit-stride along the innermost dim (or vice versa); walk 32x32 tiles so both stay in cache.
  int a = -1;
  if (r >= 2 && d_in == 1 && s_in != 1) {
    for (int i = 0; i < r - 1; ++i) if (ss[i] == 1) a = i;
  }
  if (a >= 0) {
    std::vector<int64_t> od, os, odd;
    for (int i = 0; i < r - 1; ++i) {
      if (i == a) continue;
      od.push_back(dims[i]);
      os.push_back(ss[i]);
      odd.push_back(ds[i]);
    }
    const int64_t na = dims[a], da = ds[a];
    const int64_t outer = product(od);
    constexpr int64_t B = 32;
    const int64_t blocks_a = (na + B - 1) / B, blocks_i = (inner + B - 1) / B;
    const int64_t work = outer * blocks_a * blocks_i;
    parallel_for(work, std::max<int64_t>(1, 16384 / (B * B)), [&](int64_t wb, int64_t we) {
      for (int64_t w = wb; w < we; ++w) {
        int64_t o = w / (blocks_a * blocks_i);
        int64_t ba = (w / blocks_i) % blocks_a, bi = w % blocks_i;
        int64_t so = 0, dof = 0;
        for_each_index2(od, os, odd, o, o + 1, [&](int64_t x, int64_t y) { so = x; dof = y; });
        const int64_t a0 = ba * B, a1 = std::min(na, a0 + B);
        const int64_t i0 = bi * B, i1 = std::min(inner, i0 + B);
        for (int64_t ia = a0; ia < a1; ++ia) {
          const T* s = src + so + ia;
          T* d = dst + dof + ia * da;
          for (int64_t i = i0; i < i1; ++i) d[i] = s[i * s_in];
        }
      }
    });
    return;
  }
  std::vector<int64_t> od(dims.begin(), dims.end() - 1), os(ss.begin(), ss.end() - 1),
      odd(ds.begin(), ds.end() - 1);
  const int64_t rows = product(od);
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(inner, 1));
  parallel_for(rows, grain, [&](int64_t b, int64_t e) {
    for_each_index2(od, os, odd, b, e, [&](int64_t so, int64_t dof) {
      const T* s = src + so;
      T* d = dst + dof;
      if (s_in == 1 && d_in == 1) {
        std::memcpy(d, s, sizeof(T) * inner);
      } else if (s_in == 0) {
        const T v = *s;
        for (int64_t i = 0; i < inner; ++i) d[i * d_in] = v;
      } else {
        for (int64_t i = 0; i < inner; ++i) d[i * d_in] = s[i * s_in];
      }
    });
  });
}

}  // namespace

void copy_view(const View& src, const View& dst) {
  if (product(dst.dims) == 0) return;
  if (src.data == dst.data && src.strides == dst.strides) return;
  switch (dtype_size(src.dtype)) {
    case 1:
      copy_typed(reinterpret_cast<const uint8_t*>(src.data), reinterpret_cast<uint8_t*>(dst.data), src.dims,
                 src.strides, dst.strides);
      break;
    case 2:
      copy_typed(reinterpret_cast<const uint16_t*>(src.data), reinterpret_cast<uint16_t*>(dst.data),
                 src.dims, src.strides, dst.strides);
      break;
    case 4:
      copy_typed(reinterpret_cast<const uint32_t*>(src.data), reinterpret_cast<uint32_t*>(dst.data),
                 src.dims, src.strides, dst.strides);
      break;
    default:
      copy_typed(reinterpret_cast<const uint64_t*>(src.data), reinterpret_cast<uint64_t*>(dst.data),
                 src.dims, src.strides, dst.strides);
      break;
  }
}

Buffer materialize(const View& v) {
  Buffer out = Buffer::uninitialized(v.dtype, v.dims);
  copy_view(v, view_of(out));
  return out;
}

Lines lines_along(const View& x, int64_t dim) {
  Lines l;
  for (int i = 0; i < x.rank(); ++i) {
    if (i < dim) l.outer *= x.dims[i];
    if (i > dim) l.inner *= x.dims[i];
  }
  l.length = x.dims[dim];
  if (x.is_contiguous()) {
    l.data = x;
  } else {
    l.holder = materialize(x);
    l.data = view_of(l.holder);  // the buffer's storage does not move when the Lines value does
  }
  return l;
}

}  // namespace mcx::cpu
