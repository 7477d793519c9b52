#include "mcx/platform/host_spmd_ops.h"

#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/dims.h"
#include "mcx/core/error.h"
#include "mcx/ir/spmd_rules.h"

namespace mcx {

using ir::OpKind;

namespace {

struct Where {
  int partition = 0;
  int num_partitions = 1;
};

Where where_of(const ExecutionContext* ctx) {
  if (!ctx) return {};
  return {ctx->partition_id, ctx->num_partitions};
}

std::string op_str(const ir::Instr& in) { return std::string(ir::op_name(in.kind)); }

absl::Status fail(absl::StatusCode code, const ir::Instr& in, const Where& w, const std::string& msg) {
  return absl::Status(code, absl::StrCat("[", op_str(in), "] partition ", w.partition, " of ", w.num_partitions,
                                         ": ", msg));
}

int64_t prod(const std::vector<int64_t>& d, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= d[i];
  return n;
}

// x (contiguous, dims) cut into g blocks along dim, written block after block: out[j] = block j, each
// block row-major with dims[dim] / g at dim. With nothing before dim the blocks already are contiguous.
void pack_blocks(const std::byte* x, const std::vector<int64_t>& dims, int64_t dim, int64_t g, size_t esize,
                 std::byte* out) {
  const int64_t pre = prod(dims, 0, dim), n = dims[dim], m = n / g, post = prod(dims, dim + 1, dims.size());
  const int64_t row = m * post * static_cast<int64_t>(esize);
  if (row == 0) return;
  for (int64_t j = 0; j < g; ++j)
    for (int64_t p = 0; p < pre; ++p)
      std::memcpy(out + (j * pre + p) * row, x + (p * n + j * m) * post * static_cast<int64_t>(esize), row);
}

// The inverse layout change: in holds g blocks of block_dims one after another; out is their
// concatenation along dim (block k first at offset k * block_dims[dim]).
void unpack_concat(const std::byte* in, const std::vector<int64_t>& block_dims, int64_t dim, int64_t g,
                   size_t esize, std::byte* out) {
  const int64_t pre = prod(block_dims, 0, dim), m = block_dims[dim], post = prod(block_dims, dim + 1, block_dims.size());
  const int64_t row = m * post * static_cast<int64_t>(esize);
  if (row == 0) return;
  for (int64_t k = 0; k < g; ++k)
    for (int64_t p = 0; p < pre; ++p)
      std::memcpy(out + (p * g * m + k * m) * post * static_cast<int64_t>(esize), in + (k * pre + p) * row, row);
}

absl::StatusOr<SpmdMember> member_of(const ir::Instr& in, const Where& w) {
  MCX_ASSIGN_OR_RETURN(ir::ReplicaGroups rg, ir::get_replica_groups(ir::op_name(in.kind), in.attrs));
  if (rg.num_partitions() != w.num_partitions)
    return fail(absl::StatusCode::kInvalidArgument, in, w,
                absl::StrCat("replica_groups cover ", rg.num_partitions(), " partitions, the execution has ",
                             w.num_partitions, w.num_partitions == 1 && rg.num_partitions() > 1
                                                   ? " (no ExecutionContext: partition 0 of 1)"
                                                   : ""));
  ir::ReplicaGroups::Position pos = rg.position_of(w.partition);
  SpmdMember m;
  for (int v : rg.group(pos.group)) m.group.push_back(v);
  m.rank = pos.rank;
  return m;
}

absl::StatusOr<Communicator*> communicator(const ir::Instr& in, const Where& w, const SpmdMember& m,
                                           const ExecutionContext* ctx) {
  const std::string group = absl::StrCat("group {", absl::StrJoin(m.group, ","), "}");
  if (!ctx || !ctx->communicator)
    return fail(absl::StatusCode::kFailedPrecondition, in, w,
                absl::StrCat(group, " has ", m.group.size(), " members but the execution has ",
                             ctx ? "no communicator factory" : "no ExecutionContext (partition 0 of 1)"));
  auto c = ctx->communicator(m.group);
  if (!c.ok()) {
    return with_message(c.status(), fail(c.status().code(), in, w,
                                         absl::StrCat("no communicator for ", group, ": ", c.status().message()))
                                        .message());
  }
  Communicator* comm = *c;
  if (!comm || comm->size() != static_cast<int>(m.group.size()) || comm->rank() != m.rank)
    return fail(absl::StatusCode::kInvalidArgument, in, w,
                absl::StrCat("the communicator for ", group, " has size ", comm ? comm->size() : 0, " and rank ",
                             comm ? comm->rank() : -1, ", expected size ", m.group.size(), " and rank ", m.rank));
  return comm;
}

absl::Status wrap(const absl::Status& s, const ir::Instr& in, const Where& w) {
  if (s.ok()) return s;
  return with_message(s, fail(s.code(), in, w, std::string(s.message())).message());  // keeps the payloads
}

absl::Time deadline_of(const ExecutionContext* ctx) { return ctx ? ctx->deadline : absl::InfiniteFuture(); }

}  // namespace

bool is_spmd_op(OpKind k) { return ir::is_collective(k) || k == OpKind::kAxisIndex; }

absl::StatusOr<SpmdMember> spmd_member(const ir::Instr& in, const ExecutionContext* ctx) {
  const Where w = where_of(ctx);
  if (in.kind == OpKind::kAxisIndex || !is_spmd_op(in.kind)) {
    return fail(absl::StatusCode::kInternal, in, w, "not a collective");
  }
  if (in.kind != OpKind::kCollectivePermute) {
    MCX_ASSIGN_OR_RETURN(SpmdMember m, member_of(in, w));
    if (m.group.size() > 1) {
      MCX_ASSIGN_OR_RETURN(m.comm, communicator(in, w, m, ctx));
    }
    return m;
  }
  MCX_ASSIGN_OR_RETURN(auto pairs, ir::get_source_target_pairs(ir::op_name(in.kind), in.attrs));
  SpmdMember m;
  for (int p = 0; p < w.num_partitions; ++p) m.group.push_back(p);
  m.rank = w.partition;
  for (const auto& [s, t] : pairs) {
    if (s >= w.num_partitions || t >= w.num_partitions)
      return fail(absl::StatusCode::kInvalidArgument, in, w,
                  absl::StrCat("pair (", s, ", ", t, ") names a partition outside 0..", w.num_partitions - 1));
    if (s == w.partition) m.send_to = static_cast<int>(t);
    if (t == w.partition) m.recv_from = static_cast<int>(s);
  }
  if (!pairs.empty() && w.num_partitions > 1) {
    MCX_ASSIGN_OR_RETURN(m.comm, communicator(in, w, m, ctx));
  }
  return m;
}

absl::StatusOr<Buffer> run_spmd_op_on_host(const ir::Instr& in, const HostOperand& operand,
                                           const std::vector<int64_t>& out_dims, const ExecutionContext* ctx,
                                           const SpmdMember* member) {
  const Where w = where_of(ctx);
  const std::string_view name = ir::op_name(in.kind);
  const DType dtype = in.type.dtype;
  const size_t esize = dtype_size(dtype);
  Buffer out = Buffer::uninitialized(dtype, out_dims);
  auto* out_data = static_cast<std::byte*>(out.mutable_data());

  if (in.kind == OpKind::kAxisIndex) {
    MCX_ASSIGN_OR_RETURN(std::vector<int64_t> mesh, in.attrs.get_ints("mesh_shape"));
    MCX_ASSIGN_OR_RETURN(int64_t axis, in.attrs.get_int("axis"));
    return Buffer::scalar<int32_t>(static_cast<int32_t>(ir::axis_index_value(mesh, axis, w.partition)));
  }

  const auto* x = static_cast<const std::byte*>(operand.data);
  const std::vector<int64_t>& xdims = operand.dims;
  const int64_t x_elems = product(xdims);
  const int64_t x_bytes = x_elems * static_cast<int64_t>(esize);
  std::optional<SpmdMember> found;
  if (member == nullptr) {
    MCX_ASSIGN_OR_RETURN(found, spmd_member(in, ctx));
  }
  const SpmdMember& m = member != nullptr ? *member : *found;
  const absl::Time deadline = deadline_of(ctx);

  if (in.kind == OpKind::kCollectivePermute) {
    if (x_bytes > 0) std::memset(out_data, 0, x_bytes);
    if (m.comm == nullptr) {  // no pairs (nothing moves) or one partition
      if (m.recv_from == 0 && x_bytes > 0) std::memcpy(out_data, x, x_bytes);
      return out;
    }
    MCX_RETURN_IF_ERROR(wrap(m.comm->permute(x, out_data, x_bytes, m.send_to, m.recv_from, deadline), in, w));
    return out;
  }

  const int64_t g = static_cast<int64_t>(m.group.size());
  if (g == 1) {  // a group of one: every collective is the identity on the value
    if (x_bytes > 0) std::memcpy(out_data, x, x_bytes);
    return out;
  }
  Communicator* comm = m.comm;
  switch (in.kind) {
    case OpKind::kAllReduce: {
      MCX_ASSIGN_OR_RETURN(ReduceOp op, ir::get_reduce_op(name, in.attrs));
      // The result may be one buffer shared by the whole group (read-only: the executable never reuses
      // a collective's output in place: plan_inplace_reuse, executable_plan.h).
      absl::StatusOr<Buffer> shared = comm->all_reduce_shared(x, out_dims, dtype, op, deadline);
      MCX_RETURN_IF_ERROR(wrap(shared.status(), in, w));
      return *std::move(shared);
    }
    case OpKind::kAllGather: {
      MCX_ASSIGN_OR_RETURN(int64_t d, in.attrs.get_int("dimension"));
      if (prod(xdims, 0, d) == 1) {  // blocks land where they belong: one buffer shared by the group
        absl::StatusOr<Buffer> shared = comm->all_gather_shared(x, x_bytes, out_dims, dtype, deadline);
        MCX_RETURN_IF_ERROR(wrap(shared.status(), in, w));
        return *std::move(shared);
      }
      std::vector<std::byte> gathered(static_cast<size_t>(x_bytes * g));
      MCX_RETURN_IF_ERROR(wrap(comm->all_gather(x, gathered.data(), x_bytes, deadline), in, w));
      unpack_concat(gathered.data(), xdims, d, g, esize, out_data);
      return out;
    }
    case OpKind::kReduceScatter: {
      MCX_ASSIGN_OR_RETURN(ReduceOp op, ir::get_reduce_op(name, in.attrs));
      MCX_ASSIGN_OR_RETURN(int64_t d, in.attrs.get_int("dimension"));
      const std::byte* send = x;
      std::vector<std::byte> packed;
      if (prod(xdims, 0, d) != 1) {
        packed.resize(static_cast<size_t>(x_bytes));
        pack_blocks(x, xdims, d, g, esize, packed.data());
        send = packed.data();
      }
      MCX_RETURN_IF_ERROR(wrap(comm->reduce_scatter(send, out_data, x_elems / g, dtype, op, deadline), in, w));
      return out;
    }
    case OpKind::kAllToAll: {
      MCX_ASSIGN_OR_RETURN(int64_t sd, in.attrs.get_int("split_dimension"));
      MCX_ASSIGN_OR_RETURN(int64_t cd, in.attrs.get_int("concat_dimension"));
      std::vector<std::byte> packed(static_cast<size_t>(x_bytes)), received(static_cast<size_t>(x_bytes));
      pack_blocks(x, xdims, sd, g, esize, packed.data());
      MCX_RETURN_IF_ERROR(wrap(comm->all_to_all(packed.data(), received.data(), x_bytes / g, deadline), in, w));
      std::vector<int64_t> block_dims = xdims;
      block_dims[sd] /= g;
      unpack_concat(received.data(), block_dims, cd, g, esize, out_data);
      return out;
    }
    default: break;
  }
  return fail(absl::StatusCode::kInternal, in, w, "not a collective kernel");
}

}  // namespace mcx
