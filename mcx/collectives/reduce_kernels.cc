#include "mcx/collectives/reduce_kernels.h"

#include <algorithm>
#include <type_traits>

namespace mcx {
namespace {

// Calls body(f) with the binary function of `op` on T, chosen outside the element loops so they vectorise.
template <typename T, typename Body>
void with_op(ReduceOp op, Body&& body) {
  if constexpr (std::is_same_v<T, bool>) {
    if (op == ReduceOp::kSum || op == ReduceOp::kMax) {
      body([](bool a, bool v) { return a || v; });
    } else {
      body([](bool a, bool v) { return a && v; });
    }
  } else if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t> ||
                       std::is_floating_point_v<T>) {
    // 16-bit floats compute in f32 and round per step, like the backend's elementwise kernels.
    using C = std::conditional_t<std::is_floating_point_v<T>, T, float>;
    auto lift = [](auto f) { return [f](T a, T v) { return T(f(static_cast<C>(a), static_cast<C>(v))); }; };
    switch (op) {
      case ReduceOp::kSum: body(lift([](C a, C v) { return a + v; })); break;
      case ReduceOp::kProd: body(lift([](C a, C v) { return a * v; })); break;
      case ReduceOp::kMax: body(lift([](C a, C v) { return (a != a) ? a : (v != v ? v : std::max(a, v)); })); break;
      case ReduceOp::kMin: body(lift([](C a, C v) { return (a != a) ? a : (v != v ? v : std::min(a, v)); })); break;
    }
  } else {
    using U = std::make_unsigned_t<T>;  // integers wrap (computed unsigned: no signed-overflow UB)
    switch (op) {
      case ReduceOp::kSum: body([](T a, T v) { return static_cast<T>(static_cast<U>(a) + static_cast<U>(v)); }); break;
      case ReduceOp::kProd: body([](T a, T v) { return static_cast<T>(static_cast<U>(a) * static_cast<U>(v)); }); break;
      case ReduceOp::kMax: body([](T a, T v) { return std::max(a, v); }); break;
      case ReduceOp::kMin: body([](T a, T v) { return std::min(a, v); }); break;
    }
  }
}

// Block by block so that `out` stays in cache; rank order per element, so the result is the same however
// the elements are split between callers.
template <typename T>
void reduce_ranks(const std::vector<const char*>& ins, int64_t offset, int64_t n, ReduceOp op, T* o) {
  with_op<T>(op, [&](auto f) {
    constexpr int64_t kBlock = 4096;
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t m = std::min(kBlock, n - b);
      const T* first = reinterpret_cast<const T*>(ins[0]) + offset + b;
      std::copy(first, first + m, o + b);
      for (size_t r = 1; r < ins.size(); ++r) {
        const T* x = reinterpret_cast<const T*>(ins[r]) + offset + b;
        T* ob = o + b;
        for (int64_t k = 0; k < m; ++k) ob[k] = f(ob[k], x[k]);
      }
    }
  });
}

}  // namespace

void reduce_into(DType dtype, const std::vector<const char*>& ins, int64_t offset, int64_t n, ReduceOp op,
                 char* out) {
  if (n <= 0 || ins.empty()) return;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    reduce_ranks<T>(ins, offset, n, op, reinterpret_cast<T*>(out));
  });
}

namespace {

// acc[k] = acc[k] op x[k], or x[k] op acc[k] when x_first.
template <bool x_first>
void accumulate_in_order(DType dtype, ReduceOp op, char* acc, const char* x, int64_t n) {
  if (n <= 0) return;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    with_op<T>(op, [&](auto f) {
      T* __restrict a = reinterpret_cast<T*>(acc);
      const T* __restrict v = reinterpret_cast<const T*>(x);
      for (int64_t k = 0; k < n; ++k) a[k] = x_first ? f(v[k], a[k]) : f(a[k], v[k]);
    });
  });
}

}  // namespace

void accumulate(DType dtype, ReduceOp op, char* acc, const char* x, int64_t n) {
  accumulate_in_order<false>(dtype, op, acc, x, n);
}

void accumulate_left(DType dtype, ReduceOp op, char* acc, const char* x, int64_t n) {
  accumulate_in_order<true>(dtype, op, acc, x, n);
}

}  // namespace mcx
