#include "mcx/core/shape.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "mcx/core/dim_expr_internal.h"
#include "mcx/core/error.h"

namespace mcx {

std::string shape_to_string(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) absl::StrAppend(&out, i ? "," : "", s[i].to_string());
  out += "]";
  return out;
}

namespace {

// The comma-separated pieces of a shape specification outside parentheses, brackets removed, a trailing comma
// dropped; an empty piece elsewhere is an error naming its position.
absl::StatusOr<std::vector<std::string_view>> shape_pieces(std::string_view text) {
  std::string_view body = strip_space(text);
  if (!body.empty() && body.front() == '[') {
    if (body.back() != ']') {
      return absl::InvalidArgumentError(
          absl::StrCat("[parse_shape] expected a closing ']' in shape '", std::string(text), "'"));
    }
    body = strip_space(body.substr(1, body.size() - 2));
  }
  std::vector<std::string_view> pieces;
  if (body.empty()) return pieces;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= body.size(); ++i) {
    const char c = i < body.size() ? body[i] : ',';
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      std::string_view piece = strip_space(body.substr(start, i - start));
      if (piece.empty() && i == body.size() && !pieces.empty()) break;  // a trailing comma: "2, 3,"
      if (piece.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("[parse_shape] dimension ", pieces.size(),
                                                       " is empty in shape '", std::string(text), "'"));
      }
      pieces.push_back(piece);
      start = i + 1;
    }
  }
  return pieces;
}

absl::StatusOr<DimExpr> parse_dimension(std::string_view piece, size_t index, std::string_view text) {
  auto dim = DimExpr::parse(piece);
  if (!dim.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("[parse_shape] bad dimension ", index, " '", std::string(piece),
                                                   "' in shape '", std::string(text), "': ", dim.status().message()));
  }
  return dim;
}

}  // namespace

absl::StatusOr<Shape> parse_shape(std::string_view text) {
  MCX_ASSIGN_OR_RETURN(std::vector<std::string_view> pieces, shape_pieces(text));
  Shape shape;
  for (std::string_view piece : pieces) {
    MCX_ASSIGN_OR_RETURN(DimExpr dim, parse_dimension(piece, shape.size(), text));
    shape.push_back(std::move(dim));
  }
  return shape;
}

absl::StatusOr<Shape> parse_shape_like(std::string_view text, const std::vector<std::optional<int64_t>>& like) {
  MCX_ASSIGN_OR_RETURN(std::vector<std::string_view> pieces, shape_pieces(text));
  auto mismatch = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("[symbolic_shape] shape '", std::string(text), "' with like (",
                                                   like.size(), " dimensions): ", why));
  };
  const size_t ellipses = std::count(pieces.begin(), pieces.end(), std::string_view("..."));
  if (ellipses > 1) return mismatch("'...' may appear once");
  if (ellipses == 0 && pieces.size() != like.size()) {
    return mismatch(absl::StrCat("expected ", like.size(), " dimensions, found ", pieces.size()));
  }
  if (ellipses == 1 && pieces.size() - 1 > like.size()) {
    return mismatch(absl::StrCat("expected at most ", like.size(), " dimensions besides '...', found ", pieces.size() - 1));
  }
  Shape shape;
  for (std::string_view piece : pieces) {
    if (piece == "...") {  // the example's dimensions up to those the pieces after it name
      const size_t after = pieces.size() - shape.size() - 1;
      while (shape.size() < like.size() - after) {
        const size_t i = shape.size();
        if (!like[i]) return mismatch(absl::StrCat("'...' covers dimension ", i, ", which like leaves unknown"));
        shape.push_back(DimExpr(*like[i]));
      }
      continue;
    }
    const size_t i = shape.size();
    if (piece == "_") {
      if (!like[i]) return mismatch(absl::StrCat("dimension ", i, " is '_' but like leaves it unknown"));
      shape.push_back(DimExpr(*like[i]));
      continue;
    }
    MCX_ASSIGN_OR_RETURN(DimExpr dim, parse_dimension(piece, i, text));
    if (auto c = dim.constant_value(); c && like[i] && *c != *like[i]) {
      return mismatch(absl::StrCat("dimension ", i, " is ", *c, " but like's is ", *like[i]));
    }
    shape.push_back(std::move(dim));
  }
  return shape;
}

Shape symbolic_shape(std::string_view text) { return value_or_throw(parse_shape(text)); }

Shape symbolic_shape(std::string_view text, const std::vector<std::optional<int64_t>>& like) {
  return value_or_throw(parse_shape_like(text, like));
}

Shape concrete_shape(const std::vector<int64_t>& dims) { return Shape(dims.begin(), dims.end()); }

bool is_static(const Shape& s) {
  return std::all_of(s.begin(), s.end(), [](const DimExpr& d) { return d.is_constant(); });
}

absl::StatusOr<std::vector<int64_t>> to_concrete(const Shape& s) {
  std::vector<int64_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    auto v = s[i].constant_value();
    if (!v) {
      return absl::InvalidArgumentError(absl::StrCat("[to_concrete] expected a static shape, found ",
                                                     shape_to_string(s), " whose dimension ", i,
                                                     " is symbolic '", s[i].to_string(), "'"));
    }
    out.push_back(*v);
  }
  return out;
}

DimExpr num_elements(const Shape& s) {
  DimExpr n(1);
  for (const DimExpr& d : s) n = n * d;
  return n;
}

std::vector<std::string> shape_variables(const Shape& s) {
  std::vector<std::string> out;
  for (const DimExpr& d : s) {
    auto vs = d.variables();
    out.insert(out.end(), vs.begin(), vs.end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string AbstractValue::to_string() const {
  return absl::StrCat(std::string(dtype_short_name(dtype)), shape_to_string(shape));
}

absl::StatusOr<AbstractValue> parse_abstract_value(std::string_view text) {
  std::string_view t = strip_space(text);
  const size_t lb = t.find('[');
  if (lb == std::string_view::npos || t.back() != ']') {
    return absl::InvalidArgumentError(absl::StrCat(
        "[parse_abstract_value] expected '<dtype>[<dims>]' such as 'f32[b,784]', found '", std::string(text), "'"));
  }
  AbstractValue av;
  MCX_ASSIGN_OR_RETURN(av.dtype, parse_dtype(strip_space(t.substr(0, lb))));
  MCX_ASSIGN_OR_RETURN(av.shape, parse_shape(t.substr(lb)));
  return av;
}

}  // namespace mcx
