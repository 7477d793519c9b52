// Reading and writing NumPy .npy files (format versions 1.0, 2.0 and 3.0 for reading; 1.0, or 2.0
// when the header needs it, for writing). Arrays are little-endian and C order. Supported dtypes:
// bool (|b1), int8/16/32/64 (i1/<i2/<i4/<i8), uint8/32 (|u1/<u4), float16/32/64 (<f2/<f4/<f8).
// bfloat16 has no .npy dtype: writing one is InvalidArgument (convert to float32 first).
//
// Errors (InvalidArgument unless noted, each naming the file or "<memory>"): bad magic, unsupported
// version, header over 64 KiB or malformed, Fortran order, big-endian or unsupported dtypes, negative
// or overflowing shapes, truncated data (DataLoss) or trailing bytes; NotFound / PermissionDenied /
// Internal for I/O failures. Blocking: file I/O only. Thread-safety: no shared state.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mcx/core/buffer.h"

namespace mcx {

// The largest header read_npy accepts (bytes after the length field).
inline constexpr size_t kMaxNpyHeaderBytes = 65536;

absl::StatusOr<Buffer> read_npy(const std::string& path);
absl::StatusOr<Buffer> parse_npy(std::span<const uint8_t> bytes);

absl::Status write_npy(const std::string& path, const Buffer& buffer);
// The complete file contents.
absl::StatusOr<std::string> serialize_npy(const Buffer& buffer);

// The .npy descr string of a dtype ("<f4", "|b1"); InvalidArgument for bfloat16.
absl::StatusOr<std::string> npy_descr(DType dtype);

// The bytes before the data of a .npy file holding a C-order array of dtype and dims (magic, version,
// header dict padded so that the data starts at a multiple of 64 bytes), as serialize_npy writes them.
// InvalidArgument for bfloat16.
absl::StatusOr<std::string> npy_header(DType dtype, std::span<const int64_t> dims);

// Where the data of a .npy file lies, for readers that read only part of it or use it in place (memory-mapped).
struct NpyLayout {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
  size_t data_offset = 0;  // bytes before the first element
};
// Parses the layout from the first bytes of a file of file_size bytes (prefix must hold the whole header:
// up to 12 + kMaxNpyHeaderBytes bytes, or the whole file when it is shorter) and checks that file_size is
// exactly the header plus the data. `where` names the file in errors (the same errors as read_npy). For a whole
// file in memory: parse_npy_layout(bytes, bytes.size(), where).
absl::StatusOr<NpyLayout> parse_npy_layout(std::span<const uint8_t> prefix, size_t file_size, std::string_view where);

}  // namespace mcx
