// Row-major index arithmetic for the naive reference evaluators (reference_eval, reference_window,
// spmd_reference): linear index <-> multi-index over dims.
#pragma once

#include <cstdint>
#include <vector>

namespace mcx::test {

inline int64_t element_count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

inline std::vector<int64_t> unravel(int64_t flat, const std::vector<int64_t>& dims) {
  std::vector<int64_t> idx(dims.size(), 0);
  for (int k = static_cast<int>(dims.size()) - 1; k >= 0; --k) {
    if (dims[k] > 0) {
      idx[k] = flat % dims[k];
      flat /= dims[k];
    }
  }
  return idx;
}

inline int64_t ravel(const std::vector<int64_t>& idx, const std::vector<int64_t>& dims) {
  int64_t flat = 0;
  for (size_t k = 0; k < dims.size(); ++k) flat = flat * dims[k] + idx[k];
  return flat;
}

}  // namespace mcx::test
