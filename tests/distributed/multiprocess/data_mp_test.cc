// The mcx/data loader across 1-4 real processes through mcx-run (data_worker, one CPU device each): every example
// is read exactly once per epoch by exactly one process (padded and drop-remainder), the shards hold what the
// processes say they read (checked in the worker), the global batches do not depend on the process count,
// replicas spanning processes read the same rows (and MCX_DATA_VERIFY names the processes when they do not), and
// a loader state saved mid-run on one process count restores onto another with no example lost or repeated.
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

// (epoch, position) -> example indices (sorted; -1 for padding rows).
using Batches = std::map<std::pair<int, int>, std::vector<int>>;

struct JobOutput {
  int exit_code = -1;
  std::string all;                       // everything the job printed (for failure messages)
  std::map<int, Batches> per_process;    // what each process read
  std::map<int, std::string> states;     // "STATE ..." lines (--stop-after)
  // Every process's batches merged: the rows of each global batch the job read.
  Batches merged(const std::set<int>& processes = {}) const {
    Batches out;
    for (const auto& [p, batches] : per_process) {
      if (!processes.empty() && !processes.count(p)) continue;
      for (const auto& [key, b] : batches) out[key].insert(out[key].end(), b.begin(), b.end());
    }
    for (auto& [key, b] : out) std::sort(b.begin(), b.end());
    return out;
  }
};

JobOutput run_job(int n, const std::string& remainder, const std::vector<std::string>& options = {}, const Env& env = {}) {
  Harness h;
  std::vector<std::string> argv = {tool_path("mcx-run"), "-n", std::to_string(n), "--cpu-devices", "1", "--init-timeout",
                                   "20", "--timeout", "50", "--grace-period", "1", "--", MCX_TEST_DATA_WORKER};
  argv.insert(argv.end(), options.begin(), options.end());
  for (const std::string& a : {remainder, std::to_string(kBatch), std::to_string(kEpochs)}) argv.push_back(a);
  Env all_env = {{"MCX_DEVICE_TIMEOUT_S", "20"}};
  all_env.insert(env.begin(), env.end());
  const int r = h.spawn("mcx-run", argv, all_env);
  EXPECT_TRUE(h.wait_exit(r, milliseconds(55000))) << h.dump(r);
  JobOutput out;
  out.exit_code = h.exit_code(r);
  out.all = h.dump(r);
  const std::regex batch_re(R"(\[p(\d+)\] BATCH (\d+) (\d+)((?: -?\d+)*))");
  const std::regex state_re(R"(\[p(\d+)\] STATE (.*))");
  std::istringstream lines(h.out(r));
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, state_re)) {
      out.states[std::stoi(m[1])] = m[2];
      continue;
    }
    if (!std::regex_match(line, m, batch_re)) continue;
    std::vector<int>& b = out.per_process[std::stoi(m[1])][{std::stoi(m[2]), std::stoi(m[3])}];
    std::istringstream idx(m[4].str());
    for (int i; idx >> i;) b.push_back(i);
  }
  return out;
}

// The batches one process reads with the default layout (computed once per remainder).
const Batches& one_process_batches(const std::string& remainder) {
  static std::map<std::string, Batches> cache;
  auto it = cache.find(remainder);
  if (it == cache.end()) {
    const JobOutput one = run_job(1, remainder);
    EXPECT_EQ(one.exit_code, 0) << one.all;
    it = cache.emplace(remainder, one.merged()).first;
  }
  return it->second;
}

// Every example once per epoch (padding rows only in a padded last batch), kBatch rows per batch.
void expect_exactly_once(const Batches& batches, const std::string& remainder, const std::string& all) {
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
}

class DataLoaderAcrossProcesses : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(DataLoaderAcrossProcesses, EveryExampleOncePerEpochAndTheSameBatchesAsOneProcess) {
  const auto [n, remainder] = GetParam();
  const JobOutput job = run_job(n, remainder);
  ASSERT_EQ(job.exit_code, 0) << job.all;
  EXPECT_EQ(job.per_process.size(), static_cast<size_t>(n)) << job.all;
  const Batches batches = job.merged();
  expect_exactly_once(batches, remainder, job.all);
  // The order does not depend on how many processes read it.
  if (n > 1) EXPECT_EQ(batches, one_process_batches(remainder)) << job.all;
}

INSTANTIATE_TEST_SUITE_P(Layouts, DataLoaderAcrossProcesses,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values("pad", "drop")),
                         [](const auto& i) { return std::to_string(std::get<0>(i.param)) + "_processes_" + std::get<1>(i.param); });

// Replicas spanning processes: mesh {2, n/2} ("replica", "data"), the batch split over "data": processes p and
// p + n/2 hold the same rows, read the same examples, and MCX_DATA_VERIFY=1 finds them equal.
class DataLoaderReplicas : public ::testing::TestWithParam<int> {};

TEST_P(DataLoaderReplicas, ProcessesHoldingTheSameRowsReadTheSameExamples) {
  const int n = GetParam();
  const JobOutput job = run_job(n, "pad", {"--layout=replicas"}, {{"MCX_DATA_VERIFY", "1"}});
  ASSERT_EQ(job.exit_code, 0) << job.all;
  ASSERT_EQ(job.per_process.size(), static_cast<size_t>(n)) << job.all;
  std::set<int> first_replica;
  for (int p = 0; p < n / 2; ++p) {
    first_replica.insert(p);
    EXPECT_EQ(job.per_process.at(p), job.per_process.at(p + n / 2)) << "processes " << p << " and " << p + n / 2 << "\n" << job.all;
  }
  const Batches batches = job.merged(first_replica);
  expect_exactly_once(batches, "pad", job.all);
  EXPECT_EQ(batches, one_process_batches("pad")) << job.all;
}

INSTANTIATE_TEST_SUITE_P(Sizes, DataLoaderReplicas, ::testing::Values(2, 4),
                         [](const auto& i) { return std::to_string(i.param) + "_processes"; });

TEST(DataLoaderReplicas, VerifyNamesTheProcessesWhoseReplicasDiffer) {
  // Process 2's source returns other values than process 0's for the same examples: the two hold the same rows.
  const JobOutput job = run_job(4, "pad", {"--layout=replicas", "--corrupt-process=2"}, {{"MCX_DATA_VERIFY", "1"}});
  EXPECT_NE(job.exit_code, 0) << job.all;
  EXPECT_THAT(job.all, ::testing::HasSubstr("MCX_DATA_VERIFY: loader 'mp' epoch 0 position 0"));
  EXPECT_THAT(job.all, ::testing::HasSubstr("processes 0 and 2 loaded different data"));
  EXPECT_THAT(job.all, ::testing::Not(::testing::HasSubstr("processes 1 and 3")));
}

TEST(DataLoaderReplicas, WithoutVerifyTheSameCorruptionRunsThrough) {
  // The check is what catches it: without MCX_DATA_VERIFY the job trains on inconsistent replicas.
  const JobOutput job = run_job(2, "pad", {"--layout=replicas", "--corrupt-process=1"});
  EXPECT_EQ(job.exit_code, 0) << job.all;
}

// A state saved after `stop_after` batches on `from` processes, restored on `to` processes: the two runs
// together read exactly the batches of one uninterrupted run.
class DataLoaderElasticRestore : public ::testing::TestWithParam<std::tuple<int, int, int, std::string>> {};

TEST_P(DataLoaderElasticRestore, ContinuesWithExactlyTheExamplesNotYetSeen) {
  const auto [from, to, stop_after, remainder] = GetParam();
  const JobOutput first = run_job(from, remainder, {"--stop-after=" + std::to_string(stop_after)});
  ASSERT_EQ(first.exit_code, 0) << first.all;
  ASSERT_EQ(first.states.size(), static_cast<size_t>(from)) << first.all;
  const std::string state = first.states.begin()->second;
  for (const auto& [p, s] : first.states) EXPECT_EQ(s, state) << "process " << p << "\n" << first.all;
  const JobOutput second = run_job(to, remainder, {"--restore=" + state});
  ASSERT_EQ(second.exit_code, 0) << second.all;

  const Batches before = first.merged(), after = second.merged();
  EXPECT_EQ(before.size(), static_cast<size_t>(stop_after)) << first.all;
  Batches both = before;
  for (const auto& [key, b] : after) {
    EXPECT_FALSE(before.count(key)) << "batch (" << key.first << ", " << key.second << ") read by both runs";
    both[key] = b;
  }
  expect_exactly_once(both, remainder, first.all + "\n--- restored ---\n" + second.all);
  EXPECT_EQ(both, one_process_batches(remainder)) << first.all << "\n--- restored ---\n" << second.all;
}

INSTANTIATE_TEST_SUITE_P(
    Counts, DataLoaderElasticRestore,
    ::testing::Values(std::make_tuple(4, 2, 3, "drop"), std::make_tuple(2, 3, 11, "pad"), std::make_tuple(3, 4, 5, "pad"),
                      std::make_tuple(2, 2, 8, "drop")),
    [](const auto& i) {
      return std::to_string(std::get<0>(i.param)) + "_to_" + std::to_string(std::get<1>(i.param)) + "_after_" +
             std::to_string(std::get<2>(i.param)) + "_" + std::get<3>(i.param);
    });

}  // namespace
}  // namespace mcx::mptest
