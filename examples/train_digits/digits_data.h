// Loading the UCI optical-digits data (scikit-learn's digits.csv.gz: 1797 rows, 64 pixel values in
// 0..16 followed by the class label 0..9) and splitting it into train and test sets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace digits {

struct Dataset {
  int64_t rows = 0;
  int64_t features = 0;
  std::vector<float> x;      // rows x features, row-major
  std::vector<int32_t> y;    // rows labels
};

// Reads a gzip-compressed (or plain) CSV of numbers, the label in the last column. Errors: NotFound
// when the file cannot be opened, InvalidArgument naming the line for a malformed row or a row whose
// width differs from the first.
absl::StatusOr<Dataset> load_csv_gz(const std::string& path);

// Rows `index[begin..end)` of d, in that order.
Dataset gather_rows(const Dataset& d, const std::vector<int32_t>& index, int64_t begin, int64_t end);

// Scales every feature by 1/scale (digits pixels are 0..16).
void scale_features(Dataset& d, float scale);

}  // namespace digits
