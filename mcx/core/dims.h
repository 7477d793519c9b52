// Concrete dims (row-major, as in Buffer and the kernels' views): helpers every layer shares.
#pragma once

#include <cstdint>
#include <vector>

namespace mcx {

// The number of elements of an array of these dims (1 for a scalar). Dims must be >= 0 (asserted).
int64_t product(const std::vector<int64_t>& dims);

}  // namespace mcx
