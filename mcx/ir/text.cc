#include "mcx/ir/text.h"

#include <charconv>
#include <cstring>
#include <map>
#include <type_traits>

#include "mcx/core/error.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/str_util.h"

namespace mcx::ir {
using internal::cat;
namespace {

// ---------------------------------------------------------------------------------------------------
// Buffer elements

template <typename T>
struct FloatBits;  // storage bits and the default quiet NaN of each floating dtype
template <> struct FloatBits<float> { using U = uint32_t; static constexpr U kNaN = 0x7fc00000u; };
template <> struct FloatBits<double> { using U = uint64_t; static constexpr U kNaN = 0x7ff8000000000000ull; };
template <> struct FloatBits<float16_t> { using U = uint16_t; static constexpr U kNaN = 0x7e00u; };
template <> struct FloatBits<bfloat16_t> { using U = uint16_t; static constexpr U kNaN = 0x7fc0u; };

template <typename T>
constexpr bool kIsFloat = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                          std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>;

template <typename T>
void append_element(std::string& out, const T& v) {
  char buf[64];
  if constexpr (std::is_same_v<T, bool>) {
    out += v ? "true" : "false";
  } else if constexpr (kIsFloat<T>) {
    using U = typename FloatBits<T>::U;
    U bits;
    std::memcpy(&bits, static_cast<const void*>(&v), sizeof(U));
    double d;
    if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
      d = static_cast<float>(v);
    } else {
      d = v;
    }
    if (d != d) {
      if (bits == FloatBits<T>::kNaN) {
        out += "nan";
      } else {
        auto r = std::to_chars(buf, buf + sizeof(buf), static_cast<uint64_t>(bits), 16);
        out += "nan:0x";
        out.append(buf, r.ptr);
      }
      return;
    }
    if (d == std::numeric_limits<double>::infinity()) {
      out += "inf";
      return;
    }
    if (d == -std::numeric_limits<double>::infinity()) {
      out += "-inf";
      return;
    }
    std::to_chars_result r;
    if constexpr (std::is_same_v<T, double>) {
      r = std::to_chars(buf, buf + sizeof(buf), v);
    } else {
      r = std::to_chars(buf, buf + sizeof(buf), static_cast<float>(v));  // f16/bf16 are exact floats
    }
    out.append(buf, r.ptr);
  } else {
    auto r = std::to_chars(buf, buf + sizeof(buf), static_cast<int64_t>(v));
    out.append(buf, r.ptr);
  }
}

template <typename T>
bool parse_int_elem(std::string_view tok, T& out) {
  if constexpr (std::is_unsigned_v<T>) {
    uint64_t v;
    auto r = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (r.ec != std::errc() || r.ptr != tok.data() + tok.size() || v > std::numeric_limits<T>::max()) return false;
    out = static_cast<T>(v);
  } else {
    int64_t v;
    auto r = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (r.ec != std::errc() || r.ptr != tok.data() + tok.size() || v > std::numeric_limits<T>::max() ||
        v < std::numeric_limits<T>::min())
      return false;
    out = static_cast<T>(v);
  }
  return true;
}

// Parses one element token into out; false when malformed or out of range.
template <typename T>
bool parse_element(std::string_view tok, T& out) {
  if constexpr (std::is_same_v<T, bool>) {
    if (tok == "true") out = true;
    else if (tok == "false") out = false;
    else return false;
    return true;
  } else if constexpr (kIsFloat<T>) {
    using U = typename FloatBits<T>::U;
    U bits;
    if (tok == "nan") {
      bits = FloatBits<T>::kNaN;
      std::memcpy(static_cast<void*>(&out), &bits, sizeof(U));
      return true;
    }
    if (tok.rfind("nan:0x", 0) == 0) {
      uint64_t v;
      std::string_view h = tok.substr(6);
      auto r = std::from_chars(h.data(), h.data() + h.size(), v, 16);
      if (h.empty() || r.ec != std::errc() || r.ptr != h.data() + h.size() || v > std::numeric_limits<U>::max())
        return false;
      bits = static_cast<U>(v);
      std::memcpy(static_cast<void*>(&out), &bits, sizeof(U));
      return true;
    }
    using P = std::conditional_t<std::is_same_v<T, double>, double, float>;
    P v;
    if (tok == "inf") {
      v = std::numeric_limits<P>::infinity();
    } else if (tok == "-inf") {
      v = -std::numeric_limits<P>::infinity();
    } else {
      auto r = std::from_chars(tok.data(), tok.data() + tok.size(), v);
      if (r.ec != std::errc() || r.ptr != tok.data() + tok.size() || v != v) return false;
    }
    out = T(v);
    return true;
  } else {
    return parse_int_elem(tok, out);
  }
}

std::string print_buffer(const Buffer& b) {
  std::string out = cat(dtype_short_name(b.dtype()), "[");
  for (int i = 0; i < b.rank(); ++i) out += cat(i ? "," : "", b.dims()[i]);
  out += "]{";
  dispatch_dtype(b.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* d = b.data<T>();
    for (int64_t i = 0; i < b.num_elements(); ++i) {
      if (i) out += ", ";
      append_element(out, d[i]);
    }
  });
  out += "}";
  return out;
}

bool is_simple_name(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '$' || c == '-'))
      return false;
  return true;
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u >= 0x7f) {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// ---------------------------------------------------------------------------------------------------
// Parser

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  // One program filling the whole text.
  absl::StatusOr<Program> program();

 private:
  // One program from the current position (its value names apart from any enclosing program's).
  absl::StatusOr<Program> program_text();
  // The programs of a regions attribute after its '[': program {',' program} ']'.
  absl::StatusOr<Regions> regions();
  // Position prefix for pos (default: the current position).
  std::string where(size_t pos) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return cat("[parse_program] line ", line, ", column ", col, ": ");
  }
  std::string found() const {
    if (pos_ >= s_.size()) return "end of input";
    // The next token: an identifier or number (optionally after '%' or '-'), else one character.
    size_t n = 0;
    if (s_[pos_] == '%' || s_[pos_] == '-') ++n;
    while (pos_ + n < s_.size() && (ident_char(s_[pos_ + n]) || s_[pos_ + n] == '.')) ++n;
    if (n == 0) n = 1;
    return cat("'", s_.substr(pos_, n), "'");
  }
  absl::Status expected(std::string_view what) const {
    return absl::InvalidArgumentError(cat(where(pos_), "expected ", what, ", found ", found()));
  }
  absl::Status error_at(size_t pos, std::string_view msg) const {
    return absl::InvalidArgumentError(cat(where(pos), msg));
  }

  void skip_ws() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '/' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '/') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }
  bool peek(char c) {
    skip_ws();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  bool try_char(char c) {
    if (!peek(c)) return false;
    ++pos_;
    return true;
  }
  absl::Status expect_char(char c) {
    if (try_char(c)) return absl::OkStatus();
    return expected(cat("'", c, "'"));
  }
  absl::Status expect_word(std::string_view w) {
    skip_ws();
    if (s_.substr(pos_, w.size()) == w) {
      size_t e = pos_ + w.size();
      if (e >= s_.size() || !(std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) {
        pos_ = e;
        return absl::OkStatus();
      }
    }
    return expected(cat("'", w, "'"));
  }
  static bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
  // [A-Za-z_][A-Za-z0-9_]* (empty when none).
  std::string_view ident() {
    skip_ws();
    size_t b = pos_;
    if (pos_ < s_.size() && (std::isalpha(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) {
      while (pos_ < s_.size() && ident_char(s_[pos_])) ++pos_;
    }
    return s_.substr(b, pos_ - b);
  }
  // Text up to the ']' matching an already consumed '[' (nested () and [] allowed); consumes the ']'.
  absl::StatusOr<std::string_view> bracketed() {
    size_t b = pos_;
    int depth = 0;
    for (; pos_ < s_.size(); ++pos_) {
      char c = s_[pos_];
      if (c == '(' || c == '[') ++depth;
      if (c == ')' || (c == ']' && depth > 0)) --depth;
      else if (c == ']') {
        std::string_view inner = s_.substr(b, pos_ - b);
        ++pos_;
        return inner;
      }
      if (c == '\n' || c == '{' || c == '}') break;
    }
    pos_ = b;
    return expected("a dimension list closed by ']'");
  }
  absl::StatusOr<Shape> dims_after_bracket() {
    size_t at = pos_;
    MCX_ASSIGN_OR_RETURN(std::string_view inner, bracketed());
    auto shape = parse_shape(inner);
    if (!shape.ok()) return error_at(at, cat("bad dimension list: ", shape.status().message()));
    return *shape;
  }
  absl::StatusOr<DType> dtype_from(std::string_view name, size_t at) {
    auto d = parse_dtype(name);
    if (!d.ok() || name.empty()) return error_at(at, cat("expected a dtype, found '", name, "'"));
    return *d;
  }
  absl::StatusOr<AbstractValue> type() {
    skip_ws();
    size_t at = pos_;
    std::string_view name = ident();
    if (name.empty()) return expected("a type such as f32[b,784]");
    MCX_ASSIGN_OR_RETURN(DType d, dtype_from(name, at));
    if (!try_char('[')) return expected("'[' after the dtype of a type");
    MCX_ASSIGN_OR_RETURN(Shape shape, dims_after_bracket());
    return AbstractValue{d, std::move(shape)};
  }
  absl::StatusOr<int64_t> integer() {
    skip_ws();
    size_t b = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    int64_t v;
    auto r = std::from_chars(s_.data() + b, s_.data() + pos_, v);
    if (b == pos_ || r.ec != std::errc() || r.ptr != s_.data() + pos_) {
      pos_ = b;
      return expected("an integer");
    }
    return v;
  }
  // '%' followed by digits or an identifier; returns the name without '%'.
  absl::StatusOr<std::string> value_name() {
    skip_ws();
    if (pos_ >= s_.size() || s_[pos_] != '%') return expected("a value such as %3");
    ++pos_;
    size_t b = pos_;
    while (pos_ < s_.size() && ident_char(s_[pos_])) ++pos_;
    if (b == pos_) return expected("a value name after '%'");
    return std::string(s_.substr(b, pos_ - b));
  }
  absl::StatusOr<ValueId> use() {
    skip_ws();
    size_t at = pos_;
    MCX_ASSIGN_OR_RETURN(std::string n, value_name());
    auto it = names_.find(n);
    if (it == names_.end()) return error_at(at, cat("value %", n, " is used before it is defined"));
    return it->second;
  }
  absl::Status define(const std::string& n, ValueId id, size_t at) {
    if (!names_.emplace(n, id).second) return error_at(at, cat("value %", n, " is defined twice"));
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> program_name();
  absl::StatusOr<Attr> attr_value();
  absl::StatusOr<Buffer> buffer(DType dtype);
  absl::StatusOr<std::vector<std::string>> constraints();

  std::string_view s_;
  size_t pos_ = 0;
  std::map<std::string, ValueId> names_;
  int depth_ = 0;  // programs being parsed (the outermost and the regions it is inside)
};

absl::StatusOr<std::string> Parser::program_name() {
  skip_ws();
  if (pos_ < s_.size() && s_[pos_] == '"') {
    std::string out;
    ++pos_;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\' && pos_ < s_.size()) {
        char e = s_[pos_++];
        if (e == 'x' && pos_ + 2 <= s_.size()) {
          unsigned v = 0;
          auto r = std::from_chars(s_.data() + pos_, s_.data() + pos_ + 2, v, 16);
          if (r.ptr != s_.data() + pos_ + 2) return expected("two hex digits after \\x");
          out += static_cast<char>(v);
          pos_ += 2;
        } else {
          out += e;
        }
      } else {
        out += c;
      }
    }
    if (pos_ >= s_.size()) return expected("a closing '\"'");
    ++pos_;
    return out;
  }
  size_t b = pos_;
  while (pos_ < s_.size() && (ident_char(s_[pos_]) || s_[pos_] == '.' || s_[pos_] == '$' || s_[pos_] == '-'))
    ++pos_;
  if (b == pos_) return expected("a program name");
  return std::string(s_.substr(b, pos_ - b));
}

absl::StatusOr<Buffer> Parser::buffer(DType dtype) {
  size_t at = pos_;
  MCX_ASSIGN_OR_RETURN(Shape shape, dims_after_bracket());
  auto dims = to_concrete(shape);
  if (!dims.ok()) return error_at(at, "a constant's dimensions must be static");
  for (int64_t d : *dims)
    if (d < 0) return error_at(at, "a constant's dimensions must be >= 0");
  MCX_RETURN_IF_ERROR(expect_char('{'));
  Buffer b = Buffer::zeros(dtype, *dims);
  int64_t n = b.num_elements();
  int64_t i = 0;
  absl::Status st = absl::OkStatus();
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* d = b.mutable_data<T>();
    while (st.ok() && !peek('}')) {
      if (i > 0 && !try_char(',')) {
        st = expected("',' or '}' between constant elements");
        return;
      }
      skip_ws();
      size_t tb = pos_;
      while (pos_ < s_.size() && s_[pos_] != ',' && s_[pos_] != '}' && !std::isspace(static_cast<unsigned char>(s_[pos_])))
        ++pos_;
      std::string_view tok = s_.substr(tb, pos_ - tb);
      if (i >= n) {
        st = error_at(tb, cat("constant has more than ", n, " elements"));
        return;
      }
      if (!parse_element(tok, d[i])) {
        st = error_at(tb, cat("expected a ", dtype_short_name(dtype), " element, found '", tok, "'"));
        return;
      }
      ++i;
    }
  });
  MCX_RETURN_IF_ERROR(st);
  if (i != n) return expected(cat(n, " constant elements (found ", i, ")"));
  MCX_RETURN_IF_ERROR(expect_char('}'));
  return b;
}

absl::StatusOr<Attr> Parser::attr_value() {
  skip_ws();
  size_t at = pos_;
  if (try_char('[')) {
    skip_ws();
    if (s_.substr(pos_, 7) == "program") {
      MCX_ASSIGN_OR_RETURN(Regions r, regions());
      return Attr(std::move(r));
    }
    std::vector<int64_t> v;
    while (!try_char(']')) {
      if (!v.empty()) MCX_RETURN_IF_ERROR(expect_char(','));
      MCX_ASSIGN_OR_RETURN(int64_t x, integer());
      v.push_back(x);
    }
    return Attr(std::move(v));
  }
  if (pos_ < s_.size() && (s_[pos_] == '-' || std::isdigit(static_cast<unsigned char>(s_[pos_])))) {
    MCX_ASSIGN_OR_RETURN(int64_t x, integer());
    return Attr(x);
  }
  std::string_view word = ident();
  if (word.empty()) return expected("an attribute value (int, [ints], dims[...], dtype or constant)");
  if (word == "dims") {
    if (!try_char('[')) return expected("'[' after 'dims'");
    MCX_ASSIGN_OR_RETURN(Shape shape, dims_after_bracket());
    return Attr(std::move(shape));
  }
  MCX_ASSIGN_OR_RETURN(DType d, dtype_from(word, at));
  if (try_char('[')) {
    MCX_ASSIGN_OR_RETURN(Buffer b, buffer(d));
    return Attr(std::move(b));
  }
  return Attr(d);
}

absl::StatusOr<std::vector<std::string>> Parser::constraints() {
  std::vector<std::string> out;
  skip_ws();
  size_t b = pos_;
  int depth = 0;
  auto piece = [&](size_t e) -> absl::Status {
    std::string_view t = s_.substr(b, e - b);
    while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
    while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
    if (t.empty()) return error_at(b, "expected a constraint such as 'b >= 16'");
    out.emplace_back(t);
    return absl::OkStatus();
  };
  for (; pos_ < s_.size(); ++pos_) {
    char c = s_[pos_];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      MCX_RETURN_IF_ERROR(piece(pos_));
      b = pos_ + 1;
    }
    if (c == '{') {
      MCX_RETURN_IF_ERROR(piece(pos_));
      return out;
    }
  }
  return expected("'{' after the constraints");
}

absl::StatusOr<Regions> Parser::regions() {
  Regions out;
  do {
    MCX_ASSIGN_OR_RETURN(Program p, program_text());
    out.push_back(std::make_shared<const Program>(std::move(p)));
  } while (try_char(','));
  MCX_RETURN_IF_ERROR(expect_char(']'));
  return out;
}

absl::StatusOr<Program> Parser::program() {
  MCX_ASSIGN_OR_RETURN(Program p, program_text());
  skip_ws();
  if (pos_ != s_.size()) return expected("end of input after the program");
  return p;
}

absl::StatusOr<Program> Parser::program_text() {
  // Regions nest through recursion: bound it, so that hostile text cannot exhaust the stack.
  constexpr int kMaxDepth = 64;
  if (depth_ >= kMaxDepth) return expected(cat("at most ", kMaxDepth, " nested programs, not another 'program'"));
  std::map<std::string, ValueId> enclosing;
  enclosing.swap(names_);
  ++depth_;
  struct Restore {
    std::map<std::string, ValueId>& names;
    std::map<std::string, ValueId>& saved;
    int& depth;
    ~Restore() {
      names.swap(saved);
      --depth;
    }
  } restore{names_, enclosing, depth_};
  MCX_RETURN_IF_ERROR(expect_word("program"));
  MCX_RETURN_IF_ERROR(expect_char('@'));
  MCX_ASSIGN_OR_RETURN(std::string name, program_name());
  MCX_RETURN_IF_ERROR(expect_char('('));
  std::vector<std::pair<std::string, AbstractValue>> params;
  std::vector<size_t> param_pos;
  while (!try_char(')')) {
    if (!params.empty()) MCX_RETURN_IF_ERROR(expect_char(','));
    skip_ws();
    param_pos.push_back(pos_);
    MCX_ASSIGN_OR_RETURN(std::string n, value_name());
    MCX_RETURN_IF_ERROR(expect_char(':'));
    skip_ws();
    size_t type_at = pos_;
    MCX_ASSIGN_OR_RETURN(AbstractValue t, type());
    for (const DimExpr& d : t.shape)
      if (auto c = d.constant_value(); c && *c < 0)
        return error_at(type_at, cat("parameter type ", t.to_string(), " has a negative dimension"));
    params.emplace_back(std::move(n), std::move(t));
  }
  MCX_RETURN_IF_ERROR(expect_char('-'));
  if (pos_ >= s_.size() || s_[pos_] != '>') return expected("'->'");
  ++pos_;
  MCX_RETURN_IF_ERROR(expect_char('('));
  std::vector<AbstractValue> result_types;
  while (!try_char(')')) {
    if (!result_types.empty()) MCX_RETURN_IF_ERROR(expect_char(','));
    MCX_ASSIGN_OR_RETURN(AbstractValue t, type());
    result_types.push_back(std::move(t));
  }
  SymbolicScope scope;
  skip_ws();
  size_t where_pos = pos_;
  if (s_.substr(pos_, 5) == "where") {
    MCX_RETURN_IF_ERROR(expect_word("where"));
    MCX_ASSIGN_OR_RETURN(std::vector<std::string> cs, constraints());
    auto sc = SymbolicScope::create(cs);
    if (!sc.ok()) return error_at(where_pos, cat("bad constraint: ", sc.status().message()));
    scope = *std::move(sc);
  }
  MCX_RETURN_IF_ERROR(expect_char('{'));
  ProgramBuilder b(name, std::move(scope));
  for (size_t i = 0; i < params.size(); ++i) {
    MCX_RETURN_IF_ERROR(define(params[i].first, b.add_parameter(params[i].second), param_pos[i]));
  }
  for (;;) {
    skip_ws();
    if (peek('%')) {
      size_t at = pos_;
      MCX_ASSIGN_OR_RETURN(std::string n, value_name());
      MCX_RETURN_IF_ERROR(expect_char('='));
      skip_ws();
      size_t op_at = pos_;
      std::string_view opname = ident();
      if (opname.empty()) return expected("an op name");
      auto kind = op_from_name(opname);
      if (!kind) return error_at(op_at, cat("unknown op '", opname, "'"));
      MCX_RETURN_IF_ERROR(expect_char('('));
      std::vector<ValueId> operands;
      while (!try_char(')')) {
        if (!operands.empty()) MCX_RETURN_IF_ERROR(expect_char(','));
        MCX_ASSIGN_OR_RETURN(ValueId v, use());
        operands.push_back(v);
      }
      Attrs attrs;
      if (try_char('{')) {
        bool first = true;
        while (!try_char('}')) {
          if (!first) MCX_RETURN_IF_ERROR(expect_char(','));
          first = false;
          skip_ws();
          size_t an_at = pos_;
          std::string_view an = ident();
          if (an.empty()) return expected("an attribute name");
          if (attrs.has(an)) return error_at(an_at, cat("attribute '", an, "' is given twice"));
          MCX_RETURN_IF_ERROR(expect_char('='));
          skip_ws();
          if (s_.substr(pos_, 5) == "like ") {  // the regions of an earlier sibling
            MCX_RETURN_IF_ERROR(expect_word("like"));
            skip_ws();
            size_t like_at = pos_;
            MCX_ASSIGN_OR_RETURN(ValueId from, use());
            const Attr* same = b.program().is_param(from) ? nullptr : b.program().defining_instr(from).attrs.find(an);
            if (same == nullptr || !std::holds_alternative<Regions>(*same))
              return error_at(like_at, cat("'like' names a value whose instruction has no '", an, "' regions"));
            attrs.set(std::string(an), *same);
            continue;
          }
          MCX_ASSIGN_OR_RETURN(Attr v, attr_value());
          attrs.set(std::string(an), std::move(v));
        }
      }
      MCX_RETURN_IF_ERROR(expect_char(':'));
      skip_ws();
      size_t type_at = pos_;
      MCX_ASSIGN_OR_RETURN(AbstractValue written, type());
      auto id = b.emit(*kind, std::move(operands), std::move(attrs));
      if (!id.ok()) return error_at(op_at, std::string(id.status().message()));
      if (b.type(*id) != written)
        return error_at(type_at, cat("written type ", written.to_string(), " differs from the inferred type ",
                                     b.type(*id).to_string()));
      MCX_RETURN_IF_ERROR(define(n, *id, at));
      continue;
    }
    break;
  }
  MCX_RETURN_IF_ERROR(expect_word("return"));
  MCX_RETURN_IF_ERROR(expect_char('('));
  std::vector<ValueId> results;
  while (!try_char(')')) {
    if (!results.empty()) MCX_RETURN_IF_ERROR(expect_char(','));
    skip_ws();
    size_t at = pos_;
    MCX_ASSIGN_OR_RETURN(ValueId v, use());
    if (results.size() >= result_types.size())
      return error_at(at, cat("more results than the ", result_types.size(), " declared in the header"));
    if (b.type(v) != result_types[results.size()])
      return error_at(at, cat("result ", results.size(), " has type ", b.type(v).to_string(),
                              " but the header declares ", result_types[results.size()].to_string()));
    results.push_back(v);
  }
  if (results.size() != result_types.size())
    return expected(cat(result_types.size(), " results as declared in the header"));
  MCX_RETURN_IF_ERROR(expect_char('}'));
  return std::move(b).build(std::move(results));
}

}  // namespace

std::string print_attr(const Attr& attr) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          return cat(v);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          return cat("[", internal::join(v, ", "), "]");
        } else if constexpr (std::is_same_v<T, Shape>) {
          return cat("dims", shape_to_string(v));
        } else if constexpr (std::is_same_v<T, DType>) {
          return std::string(dtype_short_name(v));
        } else if constexpr (std::is_same_v<T, Regions>) {
          std::string out = "[";
          for (size_t i = 0; i < v.size(); ++i) out += cat(i ? ", " : "", print_program(*v[i]));
          return out + "]";
        } else {
          return print_buffer(v);
        }
      },
      attr);
}

std::string print_program(const Program& p) {
  std::string out = cat("program @", is_simple_name(p.name) ? p.name : quote(p.name), "(");
  for (int i = 0; i < p.num_params(); ++i) out += cat(i ? ", " : "", "%", i, ": ", p.params[i].to_string());
  out += ") -> (";
  for (size_t i = 0; i < p.results.size(); ++i) out += cat(i ? ", " : "", p.type(p.results[i]).to_string());
  out += ")";
  const auto& cs = p.scope.constraints();
  if (!cs.empty()) out += cat(" where ", internal::join(cs, ", "));
  out += " {\n";
  // Regions printed in full, by the value of their instruction: a sibling's are printed "like %<value>".
  std::vector<std::pair<ValueId, const Regions*>> printed;
  auto print_value = [&](ValueId self, const Attr& value) -> std::string {
    const Regions* r = std::get_if<Regions>(&value);
    if (r == nullptr) return print_attr(value);
    for (const auto& [v, earlier] : printed)
      if (*earlier == *r) return cat("like %", v);  // the same region objects
    printed.emplace_back(self, r);
    return print_attr(value);
  };
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& ins = p.instrs[i];
    const ValueId self = p.num_params() + static_cast<int>(i);
    out += cat("  %", self, " = ", op_name(ins.kind), "(");
    for (size_t j = 0; j < ins.operands.size(); ++j) out += cat(j ? ", " : "", "%", ins.operands[j]);
    out += ")";
    if (!ins.attrs.entries().empty()) {
      out += " {";
      bool first = true;
      for (const auto& [name, value] : ins.attrs.entries()) {
        out += cat(first ? "" : ", ", name, "=", print_value(self, value));
        first = false;
      }
      out += "}";
    }
    out += cat(" : ", ins.type.to_string(), "\n");
  }
  out += "  return (";
  for (size_t i = 0; i < p.results.size(); ++i) out += cat(i ? ", " : "", "%", p.results[i]);
  out += ")\n}\n";
  return out;
}

absl::StatusOr<Program> parse_program(std::string_view text) { return Parser(text).program(); }

}  // namespace mcx::ir
