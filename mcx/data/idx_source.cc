#include "mcx/data/idx_source.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include <algorithm>
#include "mcx/core/error.h"
#include "mcx/data/file_bytes.h"

namespace mcx::data {
namespace {

absl::StatusOr<DType> idx_dtype(uint8_t code, const std::string& path) {
  switch (code) {
    case 0x08: return DType::kUInt8;
    case 0x09: return DType::kInt8;
    case 0x0B: return DType::kInt16;
    case 0x0C: return DType::kInt32;
    case 0x0D: return DType::kFloat32;
    case 0x0E: return DType::kFloat64;
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "[data] %s: unknown IDX type code: expected one of 08 09 0b 0c 0d 0e, found %02x", path, code));
}

std::string hex_prefix(std::span<const std::byte> b) {
  std::string s;
  for (size_t i = 0; i < std::min<size_t>(4, b.size()); ++i) {
    absl::StrAppendFormat(&s, "%s%02x", i ? " " : "", static_cast<unsigned>(b[i]));
  }
  return s.empty() ? "an empty file" : s;
}

}  // namespace

absl::StatusOr<SourcePtr> load_idx(const std::string& path) {
  MCX_ASSIGN_OR_RETURN(FileBytes f, read_maybe_gzip(path));
  const std::span<const std::byte> b = f.bytes;
  if (b.size() < 4 || b[0] != std::byte{0} || b[1] != std::byte{0} || b[3] == std::byte{0}) {
    return absl::InvalidArgumentError(absl::StrCat("[data] ", path, ": not an IDX file: expected the magic 00 00 <type> <ndims>, found ",
                                                   hex_prefix(b)));
  }
  MCX_ASSIGN_OR_RETURN(DType dtype, idx_dtype(static_cast<uint8_t>(b[2]), path));
  const size_t ndims = static_cast<size_t>(b[3]);
  const size_t header = 4 + 4 * ndims;
  if (b.size() < header) {
    return absl::DataLossError(absl::StrCat("[data] ", path, ": truncated header: expected ", header, " bytes for ",
                                            ndims, " dimensions, found ", b.size()));
  }
  std::vector<int64_t> dims(ndims);
  for (size_t d = 0; d < ndims; ++d) {
    const auto* p = reinterpret_cast<const uint8_t*>(b.data() + 4 + 4 * d);
    dims[d] = (int64_t{p[0]} << 24) | (int64_t{p[1]} << 16) | (int64_t{p[2]} << 8) | int64_t{p[3]};
  }
  ExampleSpec spec{dtype, std::vector<int64_t>(dims.begin() + 1, dims.end())};
  const int64_t n = dims[0];
  const size_t row = spec.nbytes();
  const size_t expected = static_cast<size_t>(n) * row;
  const size_t found = b.size() - header;
  if (found < expected) {
    const int64_t whole = row == 0 ? n : static_cast<int64_t>(found / row);
    return absl::DataLossError(absl::StrCat("[data] ", path, ": truncated: record ", whole, " of ", n,
                                            " is incomplete: expected ", expected, " data bytes, found ", found));
  }
  if (found > expected) {
    return absl::DataLossError(absl::StrCat("[data] ", path, ": expected ", expected, " data bytes for dims [",
                                            absl::StrJoin(dims, ","), "], found ", found, " (trailing bytes)"));
  }
  std::span<const std::byte> data = b.subspan(header, expected);
  const int esize = dtype_size(dtype);
  if (esize == 1) return make_memory_source(path, std::move(spec), n, data, std::move(f.keep));
  // Big-endian elements: a little-endian copy.
  auto owned = std::make_shared<std::vector<std::byte>>(data.begin(), data.end());
  for (size_t i = 0; i < owned->size(); i += esize) std::reverse(owned->begin() + i, owned->begin() + i + esize);
  std::span<const std::byte> view(owned->data(), owned->size());
  return make_memory_source(path, std::move(spec), n, view, std::move(owned));
}

SourcePtr open_idx(const std::string& path) { return value_or_throw(load_idx(path)); }

}  // namespace mcx::data
