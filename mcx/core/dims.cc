#include "mcx/core/dims.h"

#include <cassert>

namespace mcx {

int64_t product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    assert(d >= 0 && "dims must be non-negative");
    n *= d;
  }
  return n;
}

}  // namespace mcx
