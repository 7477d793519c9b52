#include "mcx/trace/remat.h"

#include "mcx/core/error.h"
#include "mcx/ir/remat.h"
#include "mcx/trace/trace_state.h"

namespace mcx::detail {

int64_t new_remat_region() {
  TraceContext* top = current_trace();
  if (top == nullptr) throw InvalidArgument("[remat] remat regions exist only while tracing");
  return top->new_remat_regions(1);
}

std::vector<Array> remat_mark(std::span<const Array> leaves, int64_t region, int64_t role) {
  std::vector<Array> out;
  out.reserve(leaves.size());
  for (const Array& leaf : leaves) {
    // The identity keeps a weak scalar weak, so promotion inside f is unchanged.
    out.push_back(with_weak_type(bind(ir::OpKind::kRematBarrier, {leaf}, ir::remat_barrier_attrs(region, role)),
                                 leaf.weak_type()));
  }
  return out;
}

}  // namespace mcx::detail
