// Shapes of symbolic or concrete dimensions, and abstract values (dtype + shape).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/core/dim_expr.h"
#include "mcx/core/dtype.h"

namespace mcx {

using Shape = std::vector<DimExpr>;

// "[b,784]" (no spaces, as in the IR text form); scalar "[]".
std::string shape_to_string(const Shape& s);
// Parses "b, 784" or "[b, 2*b + 1, c // 2]" (brackets optional; a trailing comma is allowed, "2, 3,", as
// in a Python tuple). Errors name the bad dimension.
absl::StatusOr<Shape> parse_shape(std::string_view text);
// Throwing convenience for users: symbolic_shape("b, 784").
Shape symbolic_shape(std::string_view text);
// With an example shape (JAX's symbolic_shape(spec, like=)): "_" takes the example's dimension, "..." (once)
// stands for the example's dimensions up to those the pieces after it name, a constant must equal the
// example's; like's nullopt dimensions are unknown (then "_" or "..." over them is an error). InvalidArgument
// naming the spec, the dimension and the reason.
absl::StatusOr<Shape> parse_shape_like(std::string_view text, const std::vector<std::optional<int64_t>>& like);
Shape symbolic_shape(std::string_view text, const std::vector<std::optional<int64_t>>& like);

Shape concrete_shape(const std::vector<int64_t>& dims);
bool is_static(const Shape& s);
// Concrete dims; InvalidArgument naming the first symbolic dimension otherwise.
absl::StatusOr<std::vector<int64_t>> to_concrete(const Shape& s);
DimExpr num_elements(const Shape& s);
// All variables of all dimensions, sorted and unique.
std::vector<std::string> shape_variables(const Shape& s);

struct AbstractValue {
  DType dtype = DType::kFloat32;
  Shape shape;

  int rank() const { return static_cast<int>(shape.size()); }
  std::string to_string() const;  // "f32[b,784]"
  friend bool operator==(const AbstractValue& a, const AbstractValue& b) {
    return a.dtype == b.dtype && a.shape == b.shape;
  }
  friend bool operator!=(const AbstractValue& a, const AbstractValue& b) { return !(a == b); }
};
// Parses "f32[b,784]".
absl::StatusOr<AbstractValue> parse_abstract_value(std::string_view text);

}  // namespace mcx
