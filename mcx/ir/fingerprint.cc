#include "mcx/ir/fingerprint.h"

#include <openssl/evp.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

namespace mcx::ir {
namespace {

// Bumped when the encoding below changes.
constexpr std::string_view kFormatTag = "mcx.ir.fingerprint.v1";

// Feeds a canonical byte stream into SHA-256: fixed-width little-endian integers, length-prefixed strings.
class Encoder {
 public:
  Encoder() : ctx_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
      throw std::runtime_error("[fingerprint] cannot initialise SHA-256");
  }
  void bytes(const void* p, size_t n) {
    if (n > 0) EVP_DigestUpdate(ctx_.get(), p, n);
  }
  void u64(uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
    bytes(b, 8);
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
  std::array<uint8_t, 32> finish() {
    std::array<uint8_t, 32> out{};
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_.get(), out.data(), &n);
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

}  // namespace

std::array<uint8_t, 32> fingerprint(const Program& p) {
  Encoder e;
  e.str(kFormatTag);
  e.u64(kOpsetVersion);
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
  return e.finish();
}

std::string fingerprint_hex(const Program& p) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (uint8_t b : fingerprint(p)) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

}  // namespace mcx::ir
