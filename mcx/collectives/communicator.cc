#include "mcx/collectives/communicator.h"

namespace mcx {

Communicator::~Communicator() {
  while (!attach_order_.empty()) {
    attachments_.erase(attach_order_.back());
    attach_order_.pop_back();
  }
}

absl::StatusOr<Buffer> Communicator::all_reduce_shared(const void* in, const std::vector<int64_t>& dims,
                                                       DType dtype, ReduceOp op, absl::Time deadline) {
  Buffer out = Buffer::uninitialized(dtype, dims);
  absl::Status s = all_reduce(in, out.mutable_data(), out.num_elements(), dtype, op, deadline);
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<Buffer> Communicator::all_gather_shared(const void* in, int64_t bytes,
                                                       const std::vector<int64_t>& dims, DType dtype,
                                                       absl::Time deadline) {
  Buffer out = Buffer::uninitialized(dtype, dims);
  if (static_cast<int64_t>(out.nbytes()) != bytes * size()) {
    return absl::InvalidArgumentError("[all_gather] the result dims do not hold size() blocks of the input");
  }
  absl::Status s = all_gather(in, out.mutable_data(), bytes, deadline);
  if (!s.ok()) return s;
  return out;
}

}  // namespace mcx
