// random::permutation of an array's rows (random.h), on the public ops: random.cc composes its functions from
// raw ops and keeps helpers whose names the public ops library also uses.
#include <optional>
#include <string>

#include "mcx/core/error.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/ops_util.h"
#include "mcx/trace/random.h"

namespace mcx::random {

Array permutation(const Array& key, const Array& x, int axis) {
  if (!x.valid() || x.ndim() == 0) {
    throw InvalidArgument("[random.permutation] expected an array of rank >= 1 to shuffle; found " +
                          (x.valid() ? x.aval().to_string() : std::string("an empty Array")));
  }
  const int64_t a = detail::normalize_axis(axis, x.ndim(), "random.permutation");
  const std::optional<int64_t> n = x.shape()[a].constant_value();
  if (!n) {
    throw InvalidArgument("[random.permutation] expected a static size along axis " + std::to_string(a) +
                          "; found " + x.aval().to_string());
  }
  // As jax.random.permutation(key, x, axis) with independent=False.
  return take(x, permutation(key, *n), static_cast<int>(a));
}

}  // namespace mcx::random
