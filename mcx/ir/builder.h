// ProgramBuilder: appends instructions with type inference; used by tracing, autodiff and passes.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/ir/program.h"
#include "mcx/ir/shape_rules.h"

namespace mcx::ir {

class ProgramBuilder {
 public:
  explicit ProgramBuilder(std::string name = "main", SymbolicScope scope = {});

  ValueId add_parameter(AbstractValue type);
  // Infers the result type (shape_rules.h) and appends; the error names the op, shapes and dimension.
  absl::StatusOr<ValueId> emit(OpKind kind, std::vector<ValueId> operands, Attrs attrs = {});
  // Same, but throws mcx::Error; for code whose inputs are already verified (VJP rules, passes).
  ValueId emit_or_throw(OpKind kind, std::vector<ValueId> operands, Attrs attrs = {});

  // The reference is invalidated by the next emit (the instruction vector may reallocate): copy the
  // type (or its shape) before emitting more instructions with it.
  const AbstractValue& type(ValueId v) const { return program_.type(v); }
  const SymbolicScope& scope() const { return program_.scope; }
  const Program& program() const { return program_; }
  int num_values() const { return program_.num_values(); }

  // Finishes the program with the given results.
  Program build(std::vector<ValueId> results) &&;

  // Convenience emitters (throwing) for rules written in terms of ops.
  ValueId constant(Buffer value);
  ValueId scalar_constant(DType dtype, double value);           // f32[] etc.
  ValueId full_like(ValueId like, double value);                // constant broadcast to like's type
  ValueId unary(OpKind kind, ValueId x);
  ValueId binary(OpKind kind, ValueId x, ValueId y);
  ValueId convert(ValueId x, DType dtype);
  ValueId broadcast_in_dim(ValueId x, Shape shape, std::vector<int64_t> broadcast_dimensions);
  ValueId reshape(ValueId x, Shape shape);
  ValueId transpose(ValueId x, std::vector<int64_t> permutation);
  ValueId reduce_sum(ValueId x, std::vector<int64_t> dimensions);
  ValueId select(ValueId pred, ValueId on_true, ValueId on_false);

 private:
  Program program_;
};

}  // namespace mcx::ir
