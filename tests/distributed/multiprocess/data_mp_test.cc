// The mcx/data loader across 1-4 real processes through mcx-run (data_worker, one CPU device each): every example
// is read exactly once per epoch by exactly one process (padded and drop-remainder), the shards hold what the
// processes say they read (checked in the worker), and the global batches do not depend on the process count.
#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/distributed/multiprocess/mp_harness.h"

namespace mcx::mptest {
namespace {

constexpr int kExamples = 103;
constexpr int kBatch = 12;
constexpr int kEpochs = 2;

// (epoch, position) -> the examples every process read for that batch, sorted (-1 for padding rows).
using Batches = std::map<std::pair<int, int>, std::vector<int>>;

Batches run_loader(int n, const std::string& remainder, std::string* all) {
  Harness h;
  int r = h.spawn("mcx-run", {tool_path("mcx-run"), "-n", std::to_string(n), "--cpu-devices", "1", "--init-timeout",
                              "20", "--timeout", "50", "--grace-period", "1", "--", MCX_TEST_DATA_WORKER, remainder,
                              std::to_string(kBatch), std::to_string(kEpochs)},
                  {{"MCX_DEVICE_TIMEOUT_S", "20"}});
  EXPECT_TRUE(h.wait_exit(r, milliseconds(55000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 0) << h.dump(r);
  *all = h.dump(r);
  Batches batches;
  std::map<int, int> lines_per_process;
  const std::regex re(R"(\[p(\d+)\] BATCH (\d+) (\d+)((?: -?\d+)*))");
  std::istringstream lines(h.out(r));
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, re)) continue;
    ++lines_per_process[std::stoi(m[1])];
    std::vector<int>& b = batches[{std::stoi(m[2]), std::stoi(m[3])}];
    std::istringstream idx(m[4].str());
    for (int i; idx >> i;) b.push_back(i);
  }
  EXPECT_EQ(lines_per_process.size(), static_cast<size_t>(n)) << *all;
  for (auto& [key, b] : batches) std::sort(b.begin(), b.end());
  return batches;
}

class DataLoaderAcrossProcesses : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(DataLoaderAcrossProcesses, EveryExampleOncePerEpochAndTheSameBatchesAsOneProcess) {
  const auto [n, remainder] = GetParam();
  std::string all, all_one;
  const Batches batches = run_loader(n, remainder, &all);
  const int full = kExamples / kBatch;
  const int per_epoch = remainder == "pad" ? full + 1 : full;
  ASSERT_EQ(batches.size(), static_cast<size_t>(per_epoch * kEpochs)) << all;
  for (int e = 0; e < kEpochs; ++e) {
    std::multiset<int> seen;
    int padding = 0;
    for (const auto& [key, b] : batches) {
      if (key.first != e) continue;
      EXPECT_EQ(b.size(), static_cast<size_t>(kBatch)) << "epoch " << e << " position " << key.second << "\n" << all;
      for (int i : b) {
        if (i < 0) {
          ++padding;
        } else {
          seen.insert(i);
        }
      }
    }
    const int expected = remainder == "pad" ? kExamples : full * kBatch;
    EXPECT_EQ(seen.size(), static_cast<size_t>(expected)) << "epoch " << e << "\n" << all;
    EXPECT_EQ(std::set<int>(seen.begin(), seen.end()).size(), seen.size()) << "an example read twice in epoch " << e;
    for (int i : seen) EXPECT_TRUE(i >= 0 && i < kExamples) << i;
    EXPECT_EQ(padding, remainder == "pad" ? per_epoch * kBatch - kExamples : 0) << all;
  }
  if (n > 1) {  // the order does not depend on how many processes read it
    EXPECT_EQ(batches, run_loader(1, remainder, &all_one)) << all << "\n--- one process ---\n" << all_one;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, DataLoaderAcrossProcesses,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values("pad", "drop")),
                         [](const auto& i) { return std::to_string(std::get<0>(i.param)) + "_processes_" + std::get<1>(i.param); });

}  // namespace
}  // namespace mcx::mptest
