// CSV of numbers, one example per line (gzipped or raw), e.g. the UCI digits file (64 pixel columns then the
// label): features = every column but the label column, as f32[columns - 1]; labels = the label column, i32.
// The file is parsed once at open into memory.
//
// Errors (naming the file and the line, 1-based): InvalidArgument
//   "[data] digits.csv.gz: line 17: expected 65 columns (as line 1), found 64" (a row of the wrong size),
//   "[data] digits.csv.gz: line 3 column 5: expected a number, found 'x'", a label that is not an integer,
//   an empty file; plus the I/O and gzip errors of file_bytes.h.
// Thread-safety: immutable after opening.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "mcx/data/source.h"

namespace mcx::data {

struct CsvSources {
  SourcePtr features;  // f32[columns - 1]
  SourcePtr labels;    // i32[]
};

// label_column: 0-based; negative counts from the end (-1: the last column).
absl::StatusOr<CsvSources> load_csv(const std::string& path, int label_column = -1);
CsvSources open_csv(const std::string& path, int label_column = -1);

}  // namespace mcx::data
