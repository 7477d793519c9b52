// dimension_as_value (ops.h): a dimension expression computed with staged integer operations.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/trace/dispatch.h"
#include "mcx/trace/ops.h"

namespace mcx {
namespace {

// Floor division and the divisor-signed modulo (DimExpr's, Python's) from the truncating integer ops.
Array floor_mod(const Array& x, const Array& y) {
  const Array r = remainder(x, y);  // the sign of x
  const Array zero = zeros_like(r);
  const Array fix = logical_and(not_equal(r, zero), not_equal(less(r, zero), less(y, zeros_like(y))));
  return where(fix, r + y, r);
}

Array floor_div(const Array& x, const Array& y) {
  return bind(ir::OpKind::kDiv, {x - floor_mod(x, y), y});  // exact: x - mod(x, y) is a multiple of y
}

}  // namespace

Array dimension_as_value(const DimExpr& dim, DType dtype) {
  if (!is_integer(dtype)) {
    throw InvalidArgument(absl::StrCat("[dimension_as_value] expected an integer dtype, found ", std::string(dtype_name(dtype))));
  }
  if (auto c = dim.constant_value()) return astype(array(*c), dtype);
  std::vector<Array> values;  // the fold's handles index this
  auto keep = [&](Array a) {
    values.push_back(std::move(a));
    return static_cast<int>(values.size()) - 1;
  };
  DimExpr::Algebra algebra;
  std::map<std::string, int> variables;  // each variable counted once, however often it occurs
  algebra.variable = [&](const std::string& name) {
    auto [it, added] = variables.emplace(name, 0);
    if (added) it->second = keep(sum(ones({DimExpr::var(name)}, dtype)));  // its value, from an array of that size
    return it->second;
  };
  algebra.constant = [&](int64_t c) { return keep(astype(array(c), dtype)); };
  algebra.binary = [&](char op, int a, int b) {
    const Array x = values[static_cast<size_t>(a)], y = values[static_cast<size_t>(b)];
    switch (op) {
      case '+': return keep(x + y);
      case '*': return keep(x * y);
      case '/': return keep(floor_div(x, y));
      case '%': return keep(floor_mod(x, y));
      case 'M': return keep(maximum(x, y));
      default: return keep(minimum(x, y));
    }
  };
  return values[static_cast<size_t>(dim.fold(algebra))];
}

}  // namespace mcx
