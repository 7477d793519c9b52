#include "mcx/ir/builder.h"

#include <type_traits>

#include "mcx/ir/str_util.h"
#include "mcx/core/error.h"

namespace mcx::ir {
using internal::cat;
using internal::join;

ProgramBuilder::ProgramBuilder(std::string name, SymbolicScope scope) {
  program_.name = std::move(name);
  program_.scope = std::move(scope);
}

ValueId ProgramBuilder::add_parameter(AbstractValue type) {
  // Parameters are numbered before instructions; adding one after instructions would renumber them.
  if (!program_.instrs.empty())
    throw FailedPrecondition("[ProgramBuilder::add_parameter] parameters must be added before instructions");
  program_.params.push_back(std::move(type));
  return program_.num_params() - 1;
}

absl::StatusOr<ValueId> ProgramBuilder::emit(OpKind kind, std::vector<ValueId> operands, Attrs attrs) {
  std::vector<AbstractValue> types;
  types.reserve(operands.size());
  for (ValueId v : operands) {
    if (v < 0 || v >= num_values())
      return absl::InvalidArgumentError(cat("[", op_name(kind), "] operand %", v,
                                                     " is not a value of this program (", num_values(),
                                                     " values)"));
    types.push_back(program_.type(v));
  }
  MCX_ASSIGN_OR_RETURN(AbstractValue t, infer_type(kind, types, attrs, program_.scope));
  program_.instrs.push_back(Instr{kind, std::move(operands), std::move(attrs), std::move(t)});
  return num_values() - 1;
}

ValueId ProgramBuilder::emit_or_throw(OpKind kind, std::vector<ValueId> operands, Attrs attrs) {
  return value_or_throw(emit(kind, std::move(operands), std::move(attrs)));
}

Program ProgramBuilder::build(std::vector<ValueId> results) && {
  for (ValueId v : results)
    if (v < 0 || v >= num_values())
      throw InvalidArgument(cat("[ProgramBuilder::build] result %", v, " is not a value of this program (",
                                         num_values(), " values)"));
  program_.results = std::move(results);
  return std::move(program_);
}

ValueId ProgramBuilder::constant(Buffer value) { return emit_or_throw(OpKind::kConstant, {}, {{"value", value}}); }

ValueId ProgramBuilder::scalar_constant(DType dtype, double value) {
  Buffer b = dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return Buffer::scalar<bool>(value != 0);
    } else if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
      return Buffer::scalar<T>(T(static_cast<float>(value)));
    } else {
      return Buffer::scalar<T>(static_cast<T>(value));
    }
  });
  return constant(std::move(b));
}

ValueId ProgramBuilder::full_like(ValueId like, double value) {
  AbstractValue t = type(like);
  ValueId c = scalar_constant(t.dtype, value);
  if (t.rank() == 0) return c;
  return broadcast_in_dim(c, t.shape, {});
}

ValueId ProgramBuilder::unary(OpKind kind, ValueId x) { return emit_or_throw(kind, {x}); }

ValueId ProgramBuilder::binary(OpKind kind, ValueId x, ValueId y) { return emit_or_throw(kind, {x, y}); }

ValueId ProgramBuilder::convert(ValueId x, DType dtype) {
  return emit_or_throw(OpKind::kConvert, {x}, {{"dtype", dtype}});
}

ValueId ProgramBuilder::broadcast_in_dim(ValueId x, Shape shape, std::vector<int64_t> broadcast_dimensions) {
  return emit_or_throw(OpKind::kBroadcastInDim, {x},
                       {{"shape", std::move(shape)}, {"broadcast_dimensions", std::move(broadcast_dimensions)}});
}

ValueId ProgramBuilder::reshape(ValueId x, Shape shape) {
  return emit_or_throw(OpKind::kReshape, {x}, {{"shape", std::move(shape)}});
}

ValueId ProgramBuilder::transpose(ValueId x, std::vector<int64_t> permutation) {
  return emit_or_throw(OpKind::kTranspose, {x}, {{"permutation", std::move(permutation)}});
}

ValueId ProgramBuilder::reduce_sum(ValueId x, std::vector<int64_t> dimensions) {
  return emit_or_throw(OpKind::kReduceSum, {x}, {{"dimensions", std::move(dimensions)}});
}

ValueId ProgramBuilder::select(ValueId pred, ValueId on_true, ValueId on_false) {
  return emit_or_throw(OpKind::kSelect, {pred, on_true, on_false});
}

}  // namespace mcx::ir
