// Per-op shape/dtype rules and the verifier.
#pragma once

#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mcx/core/shape.h"
#include "mcx/ir/attrs.h"
#include "mcx/ir/op.h"
#include "mcx/ir/program.h"

namespace mcx::ir {

// The result type of kind applied to operands with attrs, or InvalidArgument whose message starts with
// "[op_name]" and names the operand shapes/dtypes and the offending dimension or attribute. Works on
// symbolic dimensions; comparisons that need ordering use scope and may fail as inconclusive.
absl::StatusOr<AbstractValue> infer_type(OpKind kind, std::span<const AbstractValue> operands,
                                         const Attrs& attrs, const SymbolicScope& scope);

// Checks SSA order, operand counts, attributes and that every instruction's recorded type equals the
// inferred one, and verifies the regions of control-flow ops (each distinct region object once). The error
// names the instruction index and op (and the region, for an error inside one).
absl::Status verify(const Program& program);

}  // namespace mcx::ir
