#include "mcx/ir/fingerprint.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <span>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mcx/core/byte_io.h"
#include "mcx/core/error.h"
#include "mcx/core/hash.h"
#include "mcx/ir/shape_rules.h"

namespace mcx::ir {
namespace {

// Bumped when the encoding below changes.
constexpr std::string_view kFormatTag = "mcx.ir.fingerprint.v1";

// Writes the canonical byte stream: fixed-width little-endian integers, length-prefixed strings.
class Encoder : public ByteWriter {
 public:
  explicit Encoder(std::string& out) : ByteWriter(out) {}
  void dim(const DimExpr& d) { str(d.to_string()); }
  void type(const AbstractValue& t) {
    u64(static_cast<uint64_t>(t.dtype));
    u64(t.shape.size());
    for (const DimExpr& d : t.shape) dim(d);
  }
  void attr(const Attr& a) {
    u64(a.index());
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, int64_t>) {
            i64(v);
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            u64(v.size());
            for (int64_t x : v) i64(x);
          } else if constexpr (std::is_same_v<T, Shape>) {
            u64(v.size());
            for (const DimExpr& d : v) dim(d);
          } else if constexpr (std::is_same_v<T, DType>) {
            u64(static_cast<uint64_t>(v));
          } else if constexpr (std::is_same_v<T, Regions>) {
            u64(v.size());
            for (const auto& region : v) this->region(*region);
          } else {
            u64(static_cast<uint64_t>(v.dtype()));
            u64(v.dims().size());
            for (int64_t d : v.dims()) i64(d);
            u64(v.nbytes());
            bytes(v.data(), v.nbytes());
          }
        },
        a);
  }
  // A region: its encoding the first time the program holds an equal one, else a reference to that first
  // one (siblings repeat their regions; nested loops would otherwise encode in exponential size). Equal
  // regions in distinct objects encode the same way as shared ones.
  void region(const Program& r) {
    auto it = memo_.find(&r);
    if (it == memo_.end()) it = memo_.emplace(&r, canonical_encoding(r)).first;
    const auto seen = std::find(table_.begin(), table_.end(), it->second);
    if (seen != table_.end()) {
      u64(1);
      u64(static_cast<uint64_t>(seen - table_.begin()));
      return;
    }
    u64(0);
    str(it->second);
    table_.push_back(it->second);
  }

 private:
  std::map<const Program*, std::string> memo_;
  std::vector<std::string> table_;
};

}  // namespace

int required_opset(const Program& p) {
  int need = 1;
  for (const Instr& ins : p.instrs) {
    need = std::max(need, op_info(ins.kind).opset);
    for (const auto& [name, value] : ins.attrs.entries())
      if (const auto* regions = std::get_if<Regions>(&value))
        for (const auto& region : *regions) need = std::max(need, required_opset(*region));
  }
  return need;
}

std::string canonical_encoding(const Program& p) {
  std::string out;
  out.reserve(64 + 48 * p.instrs.size());
  Encoder e(out);
  e.str(kFormatTag);
  // The opset the program needs, not the build's: a program of opset-1 ops encodes 1, so adding
  // ops to the opset leaves the fingerprints of existing programs (and persistent caches) unchanged.
  e.u64(required_opset(p));
  std::vector<std::string> constraints;
  for (const auto& c : p.scope.parsed())
    constraints.push_back(c.lhs.to_string() + " " + c.op + " " + c.rhs.to_string());
  std::sort(constraints.begin(), constraints.end());
  e.u64(constraints.size());
  for (const auto& c : constraints) e.str(c);
  e.u64(p.params.size());
  for (const AbstractValue& t : p.params) e.type(t);
  e.u64(p.instrs.size());
  for (const Instr& ins : p.instrs) {
    e.u64(static_cast<uint64_t>(ins.kind));
    e.u64(ins.operands.size());
    for (ValueId v : ins.operands) e.i64(v);
    e.u64(ins.attrs.entries().size());
    for (const auto& [name, value] : ins.attrs.entries()) {
      e.str(name);
      e.attr(value);
    }
    e.type(ins.type);
  }
  e.u64(p.results.size());
  for (ValueId v : p.results) e.i64(v);
  return out;
}

namespace {

// Reads what Encoder wrote. Every read is bounds-checked; counts are checked against the bytes left before
// anything is allocated for them, so a hostile count cannot exhaust memory.
class Decoder : public ByteReader {
 public:
  explicit Decoder(std::string_view in) : ByteReader(in, "decode_canonical_encoding") {}

  absl::StatusOr<Program> program(std::string name, int depth) {
    if (depth > kMaxDepth) return error(absl::StrCat("regions nested at most ", kMaxDepth, " deep"));
    MCX_ASSIGN_OR_RETURN(std::string_view tag, str());
    if (tag != kFormatTag) return error(absl::StrCat("the format tag \"", std::string(kFormatTag), "\""));
    MCX_ASSIGN_OR_RETURN(uint64_t opset, u64());
    if (opset < 1 || opset > static_cast<uint64_t>(kOpsetVersion)) {
      return error(absl::StrCat("an opset in [1, ", kOpsetVersion, "], found ", opset));
    }
    Program p;
    p.name = std::move(name);
    MCX_ASSIGN_OR_RETURN(uint64_t num_constraints, count(8));
    std::vector<std::string> constraints;
    for (uint64_t i = 0; i < num_constraints; ++i) {
      MCX_ASSIGN_OR_RETURN(std::string_view c, str());
      constraints.emplace_back(c);
    }
    if (!constraints.empty()) {
      absl::StatusOr<SymbolicScope> scope = SymbolicScope::create(constraints);
      if (!scope.ok()) return error(absl::StrCat("valid constraints (", std::string(scope.status().message()), ")"));
      p.scope = *std::move(scope);
    }
    MCX_ASSIGN_OR_RETURN(uint64_t num_params, count(16));
    p.params.reserve(num_params);
    for (uint64_t i = 0; i < num_params; ++i) {
      MCX_ASSIGN_OR_RETURN(AbstractValue t, type());
      p.params.push_back(std::move(t));
    }
    MCX_ASSIGN_OR_RETURN(uint64_t num_instrs, count(40));
    p.instrs.reserve(num_instrs);
    std::vector<std::shared_ptr<const Program>> regions;  // this level's table (Encoder::region)
    for (uint64_t i = 0; i < num_instrs; ++i) {
      Instr ins;
      MCX_ASSIGN_OR_RETURN(uint64_t kind, u64());
      if (kind >= static_cast<uint64_t>(kNumOpKinds)) return error(absl::StrCat("an op kind, found ", kind));
      ins.kind = static_cast<OpKind>(kind);
      MCX_ASSIGN_OR_RETURN(uint64_t num_operands, count(8));
      ins.operands.reserve(num_operands);
      for (uint64_t k = 0; k < num_operands; ++k) {
        MCX_ASSIGN_OR_RETURN(uint64_t v, u64());
        if (v >= num_params + i) return error(absl::StrCat("an operand defined earlier, found value ", v));
        ins.operands.push_back(static_cast<ValueId>(v));
      }
      MCX_ASSIGN_OR_RETURN(uint64_t num_attrs, count(16));
      for (uint64_t k = 0; k < num_attrs; ++k) {
        MCX_ASSIGN_OR_RETURN(std::string_view attr_name, str());
        MCX_ASSIGN_OR_RETURN(Attr value, attr(regions, depth));
        ins.attrs.set(std::string(attr_name), std::move(value));
      }
      MCX_ASSIGN_OR_RETURN(ins.type, type());
      p.instrs.push_back(std::move(ins));
    }
    MCX_ASSIGN_OR_RETURN(uint64_t num_results, count(8));
    for (uint64_t i = 0; i < num_results; ++i) {
      MCX_ASSIGN_OR_RETURN(uint64_t v, u64());
      if (v >= num_params + num_instrs) return error(absl::StrCat("a result value, found ", v));
      p.results.push_back(static_cast<ValueId>(v));
    }
    return p;
  }

 private:
  static constexpr int kMaxDepth = 64;

  absl::StatusOr<DType> dtype() {
    MCX_ASSIGN_OR_RETURN(uint64_t t, u64());
    if (t >= static_cast<uint64_t>(kNumDTypes)) return error(absl::StrCat("a dtype, found ", t));
    return static_cast<DType>(t);
  }
  absl::StatusOr<DimExpr> dim() {
    MCX_ASSIGN_OR_RETURN(std::string_view text, str());
    // Concrete dims (nearly all of an executable's) skip the parser.
    if (!text.empty() && text.size() <= 18 && text.find_first_not_of("0123456789") == std::string_view::npos) {
      int64_t v = 0;
      for (char c : text) v = v * 10 + (c - '0');
      return DimExpr(v);
    }
    if (text.size() > 256) return error(absl::StrCat("a dimension of at most 256 characters, found ", text.size()));
    absl::StatusOr<DimExpr> d = DimExpr::parse(text);
    if (!d.ok()) return error(absl::StrCat("a dimension, found \"", std::string(text), "\""));
    return d;
  }
  absl::StatusOr<Shape> shape() {
    MCX_ASSIGN_OR_RETURN(uint64_t rank, count(8));
    Shape s;
    s.reserve(rank);
    for (uint64_t i = 0; i < rank; ++i) {
      MCX_ASSIGN_OR_RETURN(DimExpr d, dim());
      s.push_back(std::move(d));
    }
    return s;
  }
  absl::StatusOr<AbstractValue> type() {
    AbstractValue t;
    MCX_ASSIGN_OR_RETURN(t.dtype, dtype());
    MCX_ASSIGN_OR_RETURN(t.shape, shape());
    return t;
  }
  absl::StatusOr<Attr> attr(std::vector<std::shared_ptr<const Program>>& regions, int depth) {
    MCX_ASSIGN_OR_RETURN(uint64_t index, u64());
    switch (index) {
      case 0: {
        MCX_ASSIGN_OR_RETURN(uint64_t v, u64());
        return Attr(static_cast<int64_t>(v));
      }
      case 1: {
        MCX_ASSIGN_OR_RETURN(std::vector<int64_t> v, ints());
        return Attr(std::move(v));
      }
      case 2: {
        MCX_ASSIGN_OR_RETURN(Shape s, shape());
        return Attr(std::move(s));
      }
      case 3: {
        MCX_ASSIGN_OR_RETURN(DType t, dtype());
        return Attr(t);
      }
      case 5: {
        MCX_ASSIGN_OR_RETURN(uint64_t n, count(16));
        Regions rs;
        for (uint64_t i = 0; i < n; ++i) {
          MCX_ASSIGN_OR_RETURN(uint64_t is_reference, u64());
          if (is_reference == 1) {
            MCX_ASSIGN_OR_RETURN(uint64_t k, u64());
            if (k >= regions.size()) return error(absl::StrCat("a region seen before, found reference ", k));
            rs.push_back(regions[k]);
            continue;
          }
          if (is_reference != 0) return error(absl::StrCat("a region tag 0 or 1, found ", is_reference));
          MCX_ASSIGN_OR_RETURN(std::string_view inner, str());
          Decoder sub(inner);
          absl::StatusOr<Program> r = sub.program("region", depth + 1);
          if (!r.ok()) return error(absl::StrCat("a region (", std::string(r.status().message()), ")"));
          if (!sub.at_end()) return error("a region that ends where its length says");
          regions.push_back(std::make_shared<const Program>(*std::move(r)));
          rs.push_back(regions.back());
        }
        return Attr(std::move(rs));
      }
      case 4: {
        MCX_ASSIGN_OR_RETURN(DType t, dtype());
        MCX_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ints());
        MCX_ASSIGN_OR_RETURN(uint64_t nbytes, count(1));
        int64_t elements = 1;
        for (int64_t d : dims) {
          if (d < 0 || (d > 0 && elements > (int64_t{1} << 62) / d)) return error("constant dims that fit");
          elements *= d;
        }
        if (static_cast<uint64_t>(elements) * static_cast<uint64_t>(dtype_size(t)) != nbytes) {
          return error(absl::StrCat("a constant of ", elements, " elements of ", std::string(dtype_short_name(t)), ", found ",
                                    nbytes, " bytes"));
        }
        MCX_ASSIGN_OR_RETURN(std::string_view data, bytes(nbytes));
        Buffer b = Buffer::uninitialized(t, std::move(dims));
        if (nbytes > 0) std::memcpy(b.mutable_data(), data.data(), nbytes);
        return Attr(std::move(b));
      }
      default:
        return error(absl::StrCat("an attribute kind in [0, 5], found ", index));
    }
  }
};

}  // namespace

absl::StatusOr<Program> decode_canonical_encoding(std::string_view bytes, std::string name) {
  Decoder d(bytes);
  MCX_ASSIGN_OR_RETURN(Program p, d.program(std::move(name), 0));
  if (!d.at_end()) {
    return absl::InvalidArgumentError(absl::StrCat("[decode_canonical_encoding] ", d.remaining(),
                                                   " bytes after the end of the program"));
  }
  MCX_RETURN_IF_ERROR(verify(p));
  return p;
}

std::array<uint8_t, 32> fingerprint(const Program& p) { return sha256(canonical_encoding(p)); }

std::string fingerprint_hex(const Program& p) { return to_hex(fingerprint(p)); }

}  // namespace mcx::ir
