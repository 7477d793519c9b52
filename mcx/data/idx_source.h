// IDX files (the MNIST / Fashion-MNIST format), gzipped or raw: a big-endian header (two zero bytes, a type
// code, the number of dimensions, then each dimension as a u32) followed by the data. The first dimension
// numbers the examples. Raw u8/i8 files are memory-mapped and read in place; gzip files are decompressed
// into memory once at open (gzip has no random access); multi-byte types are converted to little-endian.
// Type codes: 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64.
//
// Errors (each names the file; the open_* forms throw them as mcx::Error):
//   InvalidArgument "[data] <path>: not an IDX file: expected the magic 00 00 <type> <ndims>, found 08 03 ..."
//   InvalidArgument for an unknown type code or zero dimensions;
//   DataLoss "[data] <path>: truncated: record 59999 of 60000 is incomplete: expected 47040016 bytes, found ..."
//   (or trailing bytes), and the gzip errors of file_bytes.h.
// Thread-safety: the source is immutable after opening.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "mcx/data/source.h"

namespace mcx::data {

absl::StatusOr<SourcePtr> load_idx(const std::string& path);
SourcePtr open_idx(const std::string& path);

}  // namespace mcx::data
