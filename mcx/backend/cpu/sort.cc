// argsort (op.h): a stable sort of each line of x along one dimension, giving positions.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "mcx/backend/cpu/elementwise.h"
#include "mcx/backend/cpu/kernels.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/backend/cpu/view.h"

namespace mcx::cpu {
namespace {

// The ascending order of argsort: NaN above every number (and equal to NaN), -0 equal to +0.
template <typename A>
bool sorts_before(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

}  // namespace

Buffer argsort(const View& x, int64_t dim, bool descending) {
  Buffer out = Buffer::uninitialized(DType::kInt32, x.dims);
  if (out.num_elements() == 0) return out;
  const Lines lines = lines_along(x, dim);
  const int64_t k1 = lines.outer, r = lines.length, k2 = lines.inner;
  int32_t* o = out.mutable_data<int32_t>();
  dispatch_dtype(x.dtype, [&](auto v) {
    using S = decltype(v);
    using A = compute_t<S>;
    const S* p = reinterpret_cast<const S*>(lines.data.data);
    parallel_for(k1 * k2, std::max<int64_t>(1, 4096 / std::max<int64_t>(r, 1)), [&](int64_t b, int64_t e) {
      std::vector<A> keys(r);
      std::vector<int32_t> perm(r);
      for (int64_t line = b; line < e; ++line) {
        const int64_t i1 = line / k2, i2 = line % k2;
        const S* base = p + i1 * r * k2 + i2;
        for (int64_t j = 0; j < r; ++j) {
          keys[j] = to_compute(base[j * k2]);
          perm[j] = static_cast<int32_t>(j);
        }
        if (descending) {
          std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t c) { return sorts_before(keys[c], keys[a]); });
        } else {
          std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t c) { return sorts_before(keys[a], keys[c]); });
        }
        int32_t* dst = o + i1 * r * k2 + i2;
        for (int64_t j = 0; j < r; ++j) dst[j * k2] = perm[j];
      }
    });
  });
  return out;
}

}  // namespace mcx::cpu
