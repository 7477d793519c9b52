// Rematerialisation for reverse mode (mcx::remat, as jax.checkpoint): the values a remat region computes
// are recomputed in the backward pass instead of being kept alive from the forward pass.
//
// A region is delimited by remat_barrier ops (op.h): role 0 on each of its inputs, role 1 on each of its
// outputs. Its members are its input barriers and every value computed from a member, up to its output
// barriers, whose values belong to the enclosing region (or to none): the outputs are kept, as in JAX.
// Values computed inside the region from outside values alone (constants, closed-over arrays) are not
// members and are kept. Regions nest; a value belongs to its innermost region.
//
// The backward pass (autodiff.cc) reads forward values through Recomputation::primal: a member is
// recomputed on its first use there, from the region's inputs, through role-2 barriers, so that common-
// subexpression elimination cannot merge the copy back into the forward value. The gradient is bitwise the
// one without regions (every op is deterministic and the cotangents accumulate as before); only when values
// are live changes. Differentiating that gradient again sums the cotangents of a forward value and of its
// copy separately, so second derivatives agree to rounding.
//
// Thread-safety: a Recomputation is used by one thread (it emits into one builder).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "mcx/ir/builder.h"
#include "mcx/ir/program.h"

namespace mcx::ir {

inline constexpr int64_t kRematInput = 0;
inline constexpr int64_t kRematOutput = 1;
inline constexpr int64_t kRematRecomputedInput = 2;

// remat_barrier's attributes.
Attrs remat_barrier_attrs(int64_t region, int64_t role);

// The number of distinct remat regions in f.
int64_t count_remat_regions(const Program& f);
// f with its remat regions renumbered first_region, first_region + 1, ... in order of first appearance, so
// that the regions of programs inlined into one another stay apart.
Program renumber_remat_regions(const Program& f, int64_t first_region);

namespace internal {

// The innermost remat region of each value of f (-1: none).
std::vector<int64_t> remat_region_of_values(const Program& f);

class Recomputation {
 public:
  // forward[v]: the id in b of f's value v as replayed by the forward pass.
  Recomputation(ProgramBuilder& b, const Program& f, std::span<const ValueId> forward);

  // The id in b that the backward pass reads for f's value v: the forward value outside regions, a
  // recomputed copy (emitted into b on first use, with its operands) inside. Throws mcx::Error when the
  // builder rejects a copy (it cannot: the copies repeat instructions the builder accepted).
  ValueId primal(ValueId v);

 private:
  ProgramBuilder& b_;
  const Program& f_;
  std::span<const ValueId> forward_;
  std::vector<int64_t> region_;
  std::vector<ValueId> copy_;  // -1 until recomputed
};

}  // namespace internal
}  // namespace mcx::ir
