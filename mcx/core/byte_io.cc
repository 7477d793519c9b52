#include "mcx/core/byte_io.h"

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"

namespace mcx {

absl::Status ByteReader::error(const std::string& expected) const {
  return absl::InvalidArgumentError(absl::StrCat("[", what_, "] at byte ", pos_, " of ", in_.size(), ": expected ",
                                                 expected));
}

absl::StatusOr<uint64_t> ByteReader::u64() {
  if (remaining() < 8) return error("8 more bytes (the input is truncated)");
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
  pos_ += 8;
  return v;
}

absl::StatusOr<int64_t> ByteReader::i64() {
  MCX_ASSIGN_OR_RETURN(uint64_t v, u64());
  return static_cast<int64_t>(v);
}

absl::StatusOr<uint64_t> ByteReader::count(uint64_t min_item_bytes) {
  MCX_ASSIGN_OR_RETURN(uint64_t n, u64());
  if (n > remaining() / std::max<uint64_t>(1, min_item_bytes)) {
    return error(absl::StrCat("a count that fits the ", remaining(), " bytes left, found ", n));
  }
  return n;
}

absl::StatusOr<std::string_view> ByteReader::bytes(uint64_t n) {
  if (n > remaining()) return error(absl::StrCat(n, " more bytes (the input is truncated)"));
  std::string_view s = in_.substr(pos_, n);
  pos_ += n;
  return s;
}

absl::StatusOr<std::string_view> ByteReader::str() {
  MCX_ASSIGN_OR_RETURN(uint64_t n, count(1));
  return bytes(n);
}

absl::StatusOr<std::vector<int64_t>> ByteReader::ints(int64_t lo, int64_t hi) {
  MCX_ASSIGN_OR_RETURN(uint64_t n, count(8));
  std::vector<int64_t> v(n);
  for (uint64_t i = 0; i < n; ++i) {
    MCX_ASSIGN_OR_RETURN(v[i], i64());
    if (v[i] < lo || v[i] > hi) return error(absl::StrCat("an integer in [", lo, ", ", hi, "], found ", v[i]));
  }
  return v;
}

}  // namespace mcx
