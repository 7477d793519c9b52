#include "examples/train_digits/digits_data.h"

#include <zlib.h>

#include <charconv>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace digits {

absl::StatusOr<Dataset> load_csv_gz(const std::string& path) {
  std::unique_ptr<gzFile_s, int (*)(gzFile)> f(gzopen(path.c_str(), "rb"), gzclose);
  if (!f) return absl::NotFoundError(absl::StrCat("[load_csv_gz] cannot open '", path, "'"));
  Dataset d;
  std::string line;
  char buf[8192];
  int64_t line_no = 0;
  std::vector<double> row;
  while (gzgets(f.get(), buf, sizeof(buf)) != nullptr) {
    line += buf;
    if (!line.empty() && line.back() != '\n' && !gzeof(f.get())) continue;  // long line: keep reading
    ++line_no;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (line.empty()) continue;
    row.clear();
    const char* p = line.data();
    const char* end = p + line.size();
    while (p < end) {
      double v = 0;
      auto [next, ec] = std::from_chars(p, end, v);
      if (ec != std::errc()) {
        return absl::InvalidArgumentError(
            absl::StrCat("[load_csv_gz] ", path, ":", line_no, ": expected a number at column ",
                         row.size() + 1, ", found '", std::string(p, std::min<size_t>(end - p, 16)), "'"));
      }
      row.push_back(v);
      p = next;
      if (p < end && *p == ',') ++p;
    }
    if (row.size() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("[load_csv_gz] ", path, ":", line_no, ": expected features and a label, found ",
                       row.size(), " values"));
    }
    if (d.features == 0) d.features = static_cast<int64_t>(row.size()) - 1;
    if (static_cast<int64_t>(row.size()) != d.features + 1) {
      return absl::InvalidArgumentError(absl::StrCat("[load_csv_gz] ", path, ":", line_no, ": expected ",
                                                     d.features + 1, " values, found ", row.size()));
    }
    for (int64_t j = 0; j < d.features; ++j) d.x.push_back(static_cast<float>(row[j]));
    d.y.push_back(static_cast<int32_t>(row.back()));
    ++d.rows;
    line.clear();
  }
  if (d.rows == 0) return absl::InvalidArgumentError(absl::StrCat("[load_csv_gz] '", path, "' has no rows"));
  return d;
}

Dataset gather_rows(const Dataset& d, const std::vector<int32_t>& index, int64_t begin, int64_t end) {
  Dataset out;
  out.features = d.features;
  out.rows = end - begin;
  out.x.reserve(out.rows * d.features);
  out.y.reserve(out.rows);
  for (int64_t i = begin; i < end; ++i) {
    int64_t r = index[i];
    out.x.insert(out.x.end(), d.x.begin() + r * d.features, d.x.begin() + (r + 1) * d.features);
    out.y.push_back(d.y[r]);
  }
  return out;
}

void scale_features(Dataset& d, float scale) {
  for (float& v : d.x) v /= scale;
}

}  // namespace digits
