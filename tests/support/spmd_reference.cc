// Naive SPMD reference evaluator; see spmd_reference.h. Every collective is a loop over output elements
// with explicit multi-index arithmetic (no blocks, no transposes), so it shares no structure with the
// backend's kernels.
#include "tests/support/spmd_reference.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/ir/spmd_rules.h"
#include "tests/support/reference_eval.h"
#include "tests/support/row_major.h"

namespace mcx::test {
namespace {

using ir::Instr;
using ir::OpKind;

absl::Status err(const Instr& in, const std::string& msg) {
  return absl::InvalidArgumentError(
      absl::StrCat("[spmd_reference] ", std::string(ir::op_name(in.kind)), ": ", msg));
}

void copy_element(Buffer& dst, int64_t dk, const Buffer& src, int64_t sk) {
  const size_t w = dtype_size(dst.dtype());
  std::memcpy(static_cast<char*>(dst.mutable_data()) + dk * w, static_cast<const char*>(src.data()) + sk * w, w);
}

// Elements of a Buffer: doubles for floating dtypes, int64 for integers and bool.
struct Elems {
  std::vector<double> f;
  std::vector<int64_t> i;
};
Elems read(const Buffer& b) {
  Elems e;
  dispatch_dtype(b.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = b.data<T>();
    for (int64_t k = 0; k < b.num_elements(); ++k) {
      if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
        e.f.push_back(static_cast<double>(static_cast<float>(p[k])));
      } else if constexpr (std::is_floating_point_v<T>) {
        e.f.push_back(static_cast<double>(p[k]));
      } else {
        e.i.push_back(static_cast<int64_t>(p[k]));
      }
    }
  });
  return e;
}
// Rounds once to the dtype (floats) or wraps (integers).
Buffer write(DType t, const std::vector<int64_t>& dims, const Elems& e) {
  Buffer b = Buffer::zeros(t, dims);
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    T* p = b.mutable_data<T>();
    for (int64_t k = 0; k < b.num_elements(); ++k) {
      if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
        p[k] = T(static_cast<float>(e.f[k]));
      } else if constexpr (std::is_floating_point_v<T>) {
        p[k] = static_cast<T>(e.f[k]);
      } else if constexpr (std::is_same_v<T, bool>) {
        p[k] = e.i[k] != 0;
      } else {
        p[k] = static_cast<T>(e.i[k]);
      }
    }
  });
  return b;
}

// Elementwise reduction of the members' operands in member order.
Buffer reduce_members(const std::vector<const Buffer*>& xs, ReduceOp op) {
  const Buffer& x0 = *xs[0];
  const bool fl = is_floating(x0.dtype());
  Elems acc = read(x0);
  for (size_t m = 1; m < xs.size(); ++m) {
    Elems e = read(*xs[m]);
    for (int64_t k = 0; k < x0.num_elements(); ++k) {
      if (fl) {
        double& a = acc.f[k];
        double v = e.f[k];
        switch (op) {
          case ReduceOp::kSum: a = a + v; break;
          case ReduceOp::kProd: a = a * v; break;
          // NaN propagates, as the op set's max/min do.
          case ReduceOp::kMax: a = (a != a || v != v) ? std::numeric_limits<double>::quiet_NaN() : std::max(a, v); break;
          case ReduceOp::kMin: a = (a != a || v != v) ? std::numeric_limits<double>::quiet_NaN() : std::min(a, v); break;
        }
      } else {
        int64_t& a = acc.i[k];
        int64_t v = e.i[k];
        switch (op) {
          case ReduceOp::kSum: a = static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(v)); break;
          case ReduceOp::kProd: a = static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(v)); break;
          case ReduceOp::kMax: a = std::max(a, v); break;
          case ReduceOp::kMin: a = std::min(a, v); break;
        }
      }
    }
  }
  return write(x0.dtype(), x0.dims(), acc);
}

absl::StatusOr<std::vector<int64_t>> out_dims(const Instr& in) { return to_concrete(in.type.shape); }

}  // namespace

bool is_spmd_op(OpKind k) {
  return ir::is_collective(k) || k == OpKind::kAxisIndex || k == OpKind::kShardingConstraint;
}

absl::StatusOr<std::vector<Buffer>> spmd_reference_instr(const Instr& in, int n,
                                                         const std::vector<std::vector<Buffer>>& ops) {
  const std::string_view name = ir::op_name(in.kind);
  if (n < 1) return err(in, absl::StrCat("num_partitions is ", n, ", expected >= 1"));
  if (static_cast<int>(ops.size()) != n)
    return err(in, absl::StrCat("got operands for ", ops.size(), " partitions, expected ", n));
  const size_t arity = in.kind == OpKind::kAxisIndex ? 0 : 1;
  for (int p = 0; p < n; ++p)
    if (ops[p].size() != arity) return err(in, absl::StrCat("partition ", p, " has ", ops[p].size(), " operands"));
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> odims, out_dims(in));
  std::vector<Buffer> out(n);

  if (in.kind == OpKind::kAxisIndex) {
    MCX_ASSIGN_OR_RETURN(std::vector<int64_t> mesh, in.attrs.get_ints("mesh_shape"));
    MCX_ASSIGN_OR_RETURN(int64_t axis, in.attrs.get_int("axis"));
    if (axis < 0 || axis >= static_cast<int64_t>(mesh.size())) return err(in, "axis out of range");
    for (int p = 0; p < n; ++p) {
      int64_t stride = 1;
      for (size_t a = axis + 1; a < mesh.size(); ++a) stride *= mesh[a];
      out[p] = Buffer::scalar<int32_t>(static_cast<int32_t>((p / stride) % mesh[axis]));
    }
    return out;
  }
  if (in.kind == OpKind::kShardingConstraint) {
    for (int p = 0; p < n; ++p) out[p] = ops[p][0];
    return out;
  }
  if (in.kind == OpKind::kCollectivePermute) {
    MCX_ASSIGN_OR_RETURN(auto pairs, ir::get_source_target_pairs(name, in.attrs));
    for (int p = 0; p < n; ++p) out[p] = Buffer::zeros(in.type.dtype, odims);
    for (const auto& [s, t] : pairs) {
      if (s >= n || t >= n)
        return err(in, absl::StrCat("pair (", s, ", ", t, ") names a partition >= num_partitions ", n));
      out[t] = ops[s][0].copy();
    }
    return out;
  }
  if (!ir::is_collective(in.kind)) return err(in, "not an SPMD op");

  MCX_ASSIGN_OR_RETURN(ir::ReplicaGroups groups, ir::get_replica_groups(name, in.attrs));
  if (groups.num_partitions() != n)
    return err(in, absl::StrCat("replica_groups cover ", groups.num_partitions(), " partitions, the program runs on ",
                                n));
  const int64_t g = groups.group_size;
  for (int64_t gi = 0; gi < groups.num_groups(); ++gi) {
    std::vector<int> members = groups.group(gi);
    std::vector<const Buffer*> xs;
    for (int m : members) xs.push_back(&ops[m][0]);
    const std::vector<int64_t>& xdims = xs[0]->dims();
    switch (in.kind) {
      case OpKind::kAllReduce: {
        MCX_ASSIGN_OR_RETURN(ReduceOp op, ir::get_reduce_op(name, in.attrs));
        Buffer r = reduce_members(xs, op);
        for (int m : members) out[m] = r.copy();
        break;
      }
      case OpKind::kAllGather: {
        MCX_ASSIGN_OR_RETURN(int64_t d, in.attrs.get_int("dimension"));
        Buffer r = Buffer::zeros(in.type.dtype, odims);
        for (int64_t k = 0; k < r.num_elements(); ++k) {
          std::vector<int64_t> o = unravel(k, odims);
          int64_t member = o[d] / xdims[d];
          o[d] %= xdims[d];
          copy_element(r, k, *xs[member], ravel(o, xdims));
        }
        for (int m : members) out[m] = r.copy();
        break;
      }
      case OpKind::kReduceScatter: {
        MCX_ASSIGN_OR_RETURN(ReduceOp op, ir::get_reduce_op(name, in.attrs));
        MCX_ASSIGN_OR_RETURN(int64_t d, in.attrs.get_int("dimension"));
        Buffer full = reduce_members(xs, op);
        for (int64_t r = 0; r < g; ++r) {
          Buffer b = Buffer::zeros(in.type.dtype, odims);
          for (int64_t k = 0; k < b.num_elements(); ++k) {
            std::vector<int64_t> o = unravel(k, odims);
            o[d] += r * odims[d];
            copy_element(b, k, full, ravel(o, xdims));
          }
          out[members[r]] = b;
        }
        break;
      }
      case OpKind::kAllToAll: {
        MCX_ASSIGN_OR_RETURN(int64_t sd, in.attrs.get_int("split_dimension"));
        MCX_ASSIGN_OR_RETURN(int64_t cd, in.attrs.get_int("concat_dimension"));
        const int64_t block = xdims[sd] / g;  // size of a block along split_dimension
        for (int64_t r = 0; r < g; ++r) {
          Buffer b = Buffer::zeros(in.type.dtype, odims);
          for (int64_t k = 0; k < b.num_elements(); ++k) {
            std::vector<int64_t> o = unravel(k, odims);
            // Output index o on member r: along concat_dimension, which sender and the offset in its
            // block; along split_dimension, block r of the sender.
            int64_t sender, i_cd = o[cd];
            if (sd == cd) {
              sender = o[cd] / block;
              i_cd = o[cd] % block;
            } else {
              sender = o[cd] / xdims[cd];
              i_cd = o[cd] % xdims[cd];
            }
            std::vector<int64_t> s = o;
            s[cd] = i_cd;
            s[sd] = (sd == cd ? i_cd : o[sd]) + r * block;
            copy_element(b, k, *xs[sender], ravel(s, xdims));
          }
          out[members[r]] = b;
        }
        break;
      }
      default: return err(in, "not a collective");
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::vector<Buffer>>> spmd_reference_evaluate(
    const ir::Program& program, int n, const std::vector<std::vector<Buffer>>& args) {
  auto fail = [](const auto&... a) { return absl::InvalidArgumentError(absl::StrCat("[spmd_reference] ", a...)); };
  if (n < 1) return fail("num_partitions is ", n, ", expected >= 1");
  if (static_cast<int>(args.size()) != n) return fail("got arguments for ", args.size(), " partitions, expected ", n);
  std::vector<std::vector<Buffer>> values(n);
  for (int p = 0; p < n; ++p) {
    if (static_cast<int>(args[p].size()) != program.num_params())
      return fail("partition ", p, " has ", args[p].size(), " arguments, the program ", program.num_params(),
                  " parameters");
    for (int i = 0; i < program.num_params(); ++i) {
      auto dims = to_concrete(program.params[i].shape);
      if (!dims.ok() || args[p][i].dtype() != program.params[i].dtype || args[p][i].dims() != *dims)
        return fail("partition ", p, " argument ", i, " is ", args[p][i].abstract_value().to_string(), ", expected ",
                    program.params[i].to_string());
      values[p].push_back(args[p][i]);
    }
  }
  for (size_t k = 0; k < program.instrs.size(); ++k) {
    const Instr& in = program.instrs[k];
    std::vector<std::vector<Buffer>> ops(n);
    for (int p = 0; p < n; ++p)
      for (ir::ValueId v : in.operands) {
        if (v < 0 || v >= static_cast<ir::ValueId>(values[p].size()))
          return fail("instruction ", k, " uses undefined value ", v);
        ops[p].push_back(values[p][v]);
      }
    if (is_spmd_op(in.kind)) {
      auto r = spmd_reference_instr(in, n, ops);
      if (!r.ok()) return absl::Status(r.status().code(), absl::StrCat(r.status().message(), " (instruction ", k, ")"));
      for (int p = 0; p < n; ++p) values[p].push_back((*r)[p]);
    } else {
      for (int p = 0; p < n; ++p) {
        auto r = reference_evaluate_instr(in, ops[p]);
        if (!r.ok())
          return absl::Status(r.status().code(),
                              absl::StrCat(r.status().message(), " (instruction ", k, ", partition ", p, ")"));
        values[p].push_back(*std::move(r));
      }
    }
  }
  std::vector<std::vector<Buffer>> out(n);
  for (int p = 0; p < n; ++p)
    for (ir::ValueId v : program.results) {
      if (v < 0 || v >= static_cast<ir::ValueId>(values[p].size())) return fail("result refers to undefined value ", v);
      out[p].push_back(values[p][v]);
    }
  return out;
}

}  // namespace mcx::test
