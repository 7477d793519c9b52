// Concrete programs (static shapes) that exercise what the CPU planner makes: fused groups with generated
// kernels, a row region, every op, control flow and custom rules; with arguments to run them on. Shared by
// the serialised-executable tests (tests/backend/executable_codec_test.cc) and the persistent-cache tests
// (tests/cache/executable_entry_cache_test.cc). Header-only.
#pragma once

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "mcx/core/error.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/passes.h"
#include "tests/ir/ir_test_programs.h"
#include "tests/support/test_util.h"

namespace mcx::test {

inline ir::Program specialised(const ir::Program& p, std::map<std::string, int64_t> dims) {
  return value_or_throw(ir::specialize(p, dims));
}

// x[8,16] @ w[16,32] + b, tanh, then a softmax over rows, and the transpose of the hidden layer.
inline ir::Program mlp_softmax_program() {
  using ir::OpKind;
  using ir::ValueId;
  using Ints = std::vector<int64_t>;
  using ir::testing_programs::type_of;
  ir::ProgramBuilder b("mlp_softmax");
  const ValueId x = b.add_parameter(type_of("f32[8,16]"));
  const ValueId w = b.add_parameter(type_of("f32[16,32]"));
  const ValueId bias = b.add_parameter(type_of("f32[32]"));
  const Shape hidden = concrete_shape({8, 32});
  const ValueId d = b.emit_or_throw(OpKind::kDotGeneral, {x, w},
                                    {{"lhs_batch", Ints{}}, {"rhs_batch", Ints{}}, {"lhs_contracting", Ints{1}},
                                     {"rhs_contracting", Ints{0}}});
  const ValueId h = b.unary(OpKind::kTanh, b.binary(OpKind::kAdd, d, b.broadcast_in_dim(bias, hidden, {1})));
  const ValueId mx = b.emit_or_throw(OpKind::kReduceMax, {h}, {{"dimensions", Ints{1}}});
  const ValueId e = b.unary(OpKind::kExp, b.binary(OpKind::kSub, h, b.broadcast_in_dim(mx, hidden, {0})));
  const ValueId s = b.reduce_sum(e, {1});
  const ValueId y = b.binary(OpKind::kDiv, e, b.broadcast_in_dim(s, hidden, {0}));
  return std::move(b).build({y, b.transpose(h, {1, 0})});
}

inline std::vector<ir::Program> compiled_programs() {
  using namespace ir::testing_programs;
  return {mlp_softmax_program(),
          specialised(all_ops_program(), {{"b", 3}, {"c", 5}}),
          specialised(window_ops_program(), {{"b", 2}}),
          specialised(special_ops_program(), {{"b", 3}}),
          specialised(control_flow_program(), {{"b", 2}}),
          specialised(custom_rules_program(), {{"b", 2}})};
}

// Deterministic arguments: floats in [-1, 1], integers and bools in {0, 1}.
inline std::vector<Buffer> random_args(const ir::Program& p, uint64_t seed) {
  std::vector<Buffer> args;
  for (const AbstractValue& t : p.params) {
    const std::vector<int64_t> dims = value_or_throw(to_concrete(t.shape));
    const bool whole = is_integer(t.dtype) || t.dtype == DType::kBool;
    args.push_back(whole ? random_buffer(t.dtype, dims, seed++, 0, 1) : random_buffer(t.dtype, dims, seed++));
  }
  return args;
}

inline bool bitwise_equal(const Buffer& a, const Buffer& b) {
  return a.dtype() == b.dtype() && a.dims() == b.dims() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.data(), b.data(), a.nbytes()) == 0);
}

}  // namespace mcx::test
