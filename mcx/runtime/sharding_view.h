// A sharding drawn as text (jax.debug.visualize_sharding / visualize_array_sharding): a grid over an array of
// rank 0, 1 or 2, one cell per distinct box of the index domains, labelled with the devices that hold it
// (several where it is replicated), rows along dimension 0 and columns along dimension 1 (a rank-1 array is one
// row). For a [4, 6] array over a 2x2 mesh with P("x", "y"):
//
//   +-------+-------+
//   | cpu:0 | cpu:1 |
//   +-------+-------+
//   | cpu:2 | cpu:3 |
//   +-------+-------+
//
// Errors: InvalidArgument (thrown as mcx::Error) for a rank above 2 (as JAX) and as
// Sharding::devices_indices_map for a sharding that does not fit dims. Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "mcx/runtime/sharding.h"

namespace mcx {

std::string visualize_sharding(std::span<const int64_t> dims, const Sharding& sharding);

}  // namespace mcx
