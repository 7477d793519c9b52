// Element-wise kernels over contiguous arrays of "compute types": float16/bfloat16 are computed in float,
// every other dtype in its own C++ type. Internal to the CPU backend (used by fusion.cc).
#pragma once

#include <cstdint>
#include <type_traits>

#include "mcx/backend/cpu/fusion.h"
#include "mcx/core/dtype.h"

namespace mcx::cpu {

template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>, float, T>;

inline DType compute_dtype(DType t) {
  return (t == DType::kFloat16 || t == DType::kBFloat16) ? DType::kFloat32 : t;
}

// Converts a storage value to its compute type and back (round to nearest even for 16-bit floats).
template <typename S>
inline compute_t<S> to_compute(S v) {
  if constexpr (std::is_same_v<S, float16_t>) return half_to_float(v.bits);
  else if constexpr (std::is_same_v<S, bfloat16_t>) return bfloat16_to_float(v.bits);
  else return v;
}
template <typename S>
inline S from_compute(compute_t<S> v) {
  if constexpr (std::is_same_v<S, float16_t>) { S s; s.bits = float_to_half(v); return s; }
  else if constexpr (std::is_same_v<S, bfloat16_t>) { S s; s.bits = float_to_bfloat16(v); return s; }
  else return v;
}

// out[i] = node(args[0][i], ...) for i < n; args and out are arrays of the compute types of the operand
// and result dtypes. Throws std::logic_error for an unsupported combination.
void eval_node(const FusedNode& node, const void* const* args, void* out, int64_t n);

// Rounds float values in place to the precision of dtype (float16/bfloat16); no-op for other dtypes.
void round_to_storage(DType dtype, float* v, int64_t n);

// Converts n storage values of dtype src_dtype (at src) to compute values (at dst), and back.
void load_compute(DType dtype, const void* src, void* dst, int64_t n);
void store_compute(DType dtype, const void* src, void* dst, int64_t n);

}  // namespace mcx::cpu
