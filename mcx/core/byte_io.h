// Little-endian binary writing and bounds-checked reading, for the formats mcx defines itself (the canonical
// program encoding, serialised executables): fixed-width 64-bit integers and length-prefixed strings.
//
// ByteReader treats its input as untrusted: every read is checked against the bytes left, and a count is
// checked against what the remaining bytes could hold before anything is allocated for it, so a hostile
// length cannot exhaust memory. Errors are InvalidArgument "[what] at byte N of M: expected ...".
// Thread-safety: value types; one object per thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace mcx {

class ByteWriter {
 public:
  explicit ByteWriter(std::string& out) : out_(out) {}
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
  template <typename Int>
  void ints(std::span<const Int> v) {
    u64(v.size());
    for (Int x : v) i64(static_cast<int64_t>(x));
  }

 private:
  std::string& out_;
};

class ByteReader {
 public:
  // what: the format's name for error messages ("decode_canonical_encoding").
  ByteReader(std::string_view in, std::string what) : in_(in), what_(std::move(what)) {}

  absl::StatusOr<uint64_t> u64();
  absl::StatusOr<int64_t> i64();
  // A count of items that take at least min_item_bytes each (>= 1) in the bytes left.
  absl::StatusOr<uint64_t> count(uint64_t min_item_bytes);
  absl::StatusOr<std::string_view> str();
  // n raw bytes.
  absl::StatusOr<std::string_view> bytes(uint64_t n);
  // A vector written by ByteWriter::ints, each element in [lo, hi].
  absl::StatusOr<std::vector<int64_t>> ints(int64_t lo = INT64_MIN, int64_t hi = INT64_MAX);

  // InvalidArgument "[what] at byte <position> of <size>: expected <expected>".
  absl::Status error(const std::string& expected) const;
  bool at_end() const { return pos_ == in_.size(); }
  size_t position() const { return pos_; }
  size_t remaining() const { return in_.size() - pos_; }

 private:
  std::string_view in_;
  std::string what_;
  size_t pos_ = 0;
};

}  // namespace mcx
