#include "mcx/data/csv_source.h"

#include <charconv>
#include <cstring>
#include <cmath>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/data/file_bytes.h"

namespace mcx::data {
namespace {

absl::Status bad(const std::string& path, int64_t line, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("[data] ", path, ": line ", line, ": ", what));
}

std::shared_ptr<const void> own(std::vector<std::byte>* v, std::span<const std::byte>* view) {
  auto p = std::make_shared<std::vector<std::byte>>(std::move(*v));
  *view = std::span<const std::byte>(p->data(), p->size());
  return p;
}

}  // namespace

absl::StatusOr<CsvSources> load_csv(const std::string& path, int label_column) {
  MCX_ASSIGN_OR_RETURN(FileBytes f, read_maybe_gzip(path));
  std::string_view text(reinterpret_cast<const char*>(f.bytes.data()), f.bytes.size());
  std::vector<float> features;
  std::vector<int32_t> labels;
  int64_t columns = -1, line_no = 0, rows = 0;
  size_t label = 0;
  std::vector<double> row;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    row.clear();
    size_t col = 0;
    while (true) {
      const size_t comma = line.find(',');
      std::string_view cell = line.substr(0, comma);
      while (!cell.empty() && cell.front() == ' ') cell.remove_prefix(1);
      while (!cell.empty() && cell.back() == ' ') cell.remove_suffix(1);
      double v = 0;
      auto [ptr, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), v);
      if (ec != std::errc() || ptr != cell.data() + cell.size() || cell.empty()) {
        return bad(path, line_no, absl::StrCat("column ", col + 1, ": expected a number, found '", std::string(cell), "'"));
      }
      row.push_back(v);
      ++col;
      if (comma == std::string_view::npos) break;
      line.remove_prefix(comma + 1);
    }
    if (columns < 0) {
      columns = static_cast<int64_t>(row.size());
      const int64_t lc = label_column < 0 ? columns + label_column : label_column;
      if (columns < 2 || lc < 0 || lc >= columns) {
        return bad(path, line_no, absl::StrCat("expected at least 2 columns and the label column ", label_column,
                                               " among them, found ", columns, " columns"));
      }
      label = static_cast<size_t>(lc);
    } else if (static_cast<int64_t>(row.size()) != columns) {
      return bad(path, line_no, absl::StrCat("expected ", columns, " columns (as the first row), found ", row.size()));
    }
    if (row[label] != std::floor(row[label])) {
      return bad(path, line_no, absl::StrCat("column ", label + 1, ": expected an integer label, found ", row[label]));
    }
    for (size_t c = 0; c < row.size(); ++c) {
      if (c == label) labels.push_back(static_cast<int32_t>(row[c]));
      else features.push_back(static_cast<float>(row[c]));
    }
    ++rows;
  }
  if (rows == 0) return absl::InvalidArgumentError(absl::StrCat("[data] ", path, ": expected CSV rows, found none"));
  std::vector<std::byte> fb(features.size() * sizeof(float)), lb(labels.size() * sizeof(int32_t));
  std::memcpy(fb.data(), features.data(), fb.size());
  std::memcpy(lb.data(), labels.data(), lb.size());
  std::span<const std::byte> fv, lv;
  auto fkeep = own(&fb, &fv);
  auto lkeep = own(&lb, &lv);
  CsvSources out;
  MCX_ASSIGN_OR_RETURN(out.features, make_memory_source(path + " (features)", ExampleSpec{DType::kFloat32, {columns - 1}},
                                                        rows, fv, fkeep));
  MCX_ASSIGN_OR_RETURN(out.labels, make_memory_source(path + " (labels)", ExampleSpec{DType::kInt32, {}}, rows, lv, lkeep));
  return out;
}

CsvSources open_csv(const std::string& path, int label_column) { return value_or_throw(load_csv(path, label_column)); }

}  // namespace mcx::data
