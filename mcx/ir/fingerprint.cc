#include "mcx/ir/fingerprint.h"

#include <algorithm>
#include <map>
#include <span>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "mcx/core/hash.h"

namespace mcx::ir {
namespace {

// Bumped when the encoding below changes.
constexpr std::string_view kFormatTag = "mcx.ir.fingerprint.v1";

// Writes the canonical byte stream: fixed-width little-endian integers, length-prefixed strings.
class Encoder {
 public:
  explicit Encoder(std::string& out) : out_(out) {}
  void bytes(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  void u64(uint64_t v) {
    char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    out_.append(b, 8);
  }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void str(std::string_view s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
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
  std::string& out_;
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

std::array<uint8_t, 32> fingerprint(const Program& p) { return sha256(canonical_encoding(p)); }

std::string fingerprint_hex(const Program& p) { return to_hex(fingerprint(p)); }

}  // namespace mcx::ir
