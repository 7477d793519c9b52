#include "mcx/runtime/sharding_view.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/error.h"

namespace mcx {
namespace {

// The intervals [b[i], b[i+1]) that the boxes' starts cut dimension `d` (of size n) into; one interval [0, 1)
// for a dimension the array does not have.
std::vector<int64_t> cuts(const std::vector<std::pair<Device, IndexBox>>& map, size_t d, int64_t n, bool present) {
  if (!present) return {0, 1};
  std::set<int64_t> b = {n};
  for (const auto& [device, box] : map) b.insert(box.start[d]);
  if (b.size() == 1) b.insert(n + 1);  // an empty dimension: one interval all the same
  return std::vector<int64_t>(b.begin(), b.end());
}

std::string rule(const std::vector<size_t>& widths) {
  std::string line = "+";
  for (size_t w : widths) absl::StrAppend(&line, std::string(w + 2, '-'), "+");
  return line;
}

}  // namespace

std::string visualize_sharding(std::span<const int64_t> dims, const Sharding& sharding) {
  if (dims.size() > 2) {
    throw InvalidArgument(absl::StrCat("[visualize_sharding] expected an array of rank 0, 1 or 2, found rank ",
                                       dims.size(), " ([", absl::StrJoin(dims, ", "), "])"));
  }
  const std::vector<std::pair<Device, IndexBox>> map = sharding.devices_indices_map(dims);
  // Rows along dimension 0 of a rank-2 array; a rank-1 array is one row cut along its dimension 0.
  const bool two = dims.size() == 2;
  const std::vector<int64_t> rows = cuts(map, 0, two ? dims[0] : 1, two);
  const std::vector<int64_t> cols = cuts(map, two ? 1 : 0, dims.empty() ? 1 : dims[two ? 1 : 0], !dims.empty());
  auto holds = [&](const IndexBox& box, int64_t r, int64_t c) {
    const bool row_ok = !two || (box.start[0] <= r && r < std::max(box.limit[0], box.start[0] + 1));
    if (dims.empty()) return true;
    const size_t cd = two ? 1 : 0;
    return row_ok && box.start[cd] <= c && c < std::max(box.limit[cd], box.start[cd] + 1);
  };
  std::vector<std::vector<std::string>> labels(rows.size() - 1, std::vector<std::string>(cols.size() - 1));
  std::vector<size_t> widths(cols.size() - 1, 0);
  for (size_t i = 0; i + 1 < rows.size(); ++i) {
    for (size_t j = 0; j + 1 < cols.size(); ++j) {
      std::vector<std::string> names;
      for (const auto& [device, box] : map) {
        if (holds(box, rows[i], cols[j])) names.push_back(device.to_string());
      }
      labels[i][j] = absl::StrJoin(names, ",");
      widths[j] = std::max(widths[j], labels[i][j].size());
    }
  }
  std::string out = rule(widths) + "\n";
  for (const std::vector<std::string>& row : labels) {
    std::string line = "|";
    for (size_t j = 0; j < row.size(); ++j) {
      absl::StrAppend(&line, " ", row[j], std::string(widths[j] - row[j].size(), ' '), " |");
    }
    absl::StrAppend(&out, line, "\n", rule(widths), "\n");
  }
  return out;
}

}  // namespace mcx
