// mcx::multihost through the real launcher and data plane: multihost_worker checks every utility on 1, 2 and 3
// processes (2 CPU devices each); a process that never arrives makes sync_global_devices time out naming it;
// processes that sync under different names fail at once naming both.
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/distributed/multiprocess/mp_harness.h"

namespace mcx::mptest {
namespace {

// process -> check -> "OK" / "FAIL ..."
// expect_success: the job exits 0 (modes that leave the job out of step end it with a failure instead).
std::map<int, std::map<std::string, std::string>> run_worker(int n, const std::string& mode, std::string* all,
                                                             bool expect_success = true, Env env = {}) {
  Harness h;
  env["MCX_DEVICE_TIMEOUT_S"] = "20";
  int r = h.spawn("mcx-run", {tool_path("mcx-run"), "-n", std::to_string(n), "--cpu-devices", "2", "--init-timeout",
                              "20", "--timeout", "60", "--grace-period", "1", "--", multihost_worker_path(), mode},
                  env);
  EXPECT_TRUE(h.wait_exit(r, milliseconds(65000))) << h.dump(r);
  if (expect_success) EXPECT_EQ(h.exit_code(r), 0) << h.dump(r);
  *all = h.dump(r);
  std::map<int, std::map<std::string, std::string>> checks;
  const std::regex re(R"(\[p(\d+)\] CHECK (\S+) (OK|FAIL.*))");
  std::istringstream lines(h.out(r));
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, re)) checks[std::stoi(m[1])][m[2]] = m[3];
  }
  return checks;
}

class Multihost : public ::testing::TestWithParam<int> {};

TEST_P(Multihost, EveryUtilityWorks) {
  const int n = GetParam();
  std::string all;
  auto checks = run_worker(n, "all", &all);
  const std::vector<std::string> expected = {
      "sync_global_devices", "broadcast_one_to_all", "broadcast_needs_one_source",
      "process_allgather", "process_allgather_of_a_global_array", "assert_equal_passes",
      "assert_equal_names_leaf_and_processes", "host_local_global_round_trip", "host_local_global_inside_jit",
      "sync_global_devices_end"};
  ASSERT_EQ(checks.size(), static_cast<size_t>(n)) << all;
  for (int p = 0; p < n; ++p) {
    for (const std::string& name : expected) EXPECT_EQ(checks[p][name], "OK") << "process " << p << " " << name << "\n" << all;
  }
}

INSTANTIATE_TEST_SUITE_P(Processes, Multihost, ::testing::Values(1, 2, 3));

TEST(Multihost, SyncTimesOutNamingTheMissingProcess) {
  std::string all;
  auto checks = run_worker(3, "timeout", &all, /*expect_success=*/false);
  for (int p = 0; p < 2; ++p) EXPECT_EQ(checks[p]["sync_timeout_names_missing"], "OK") << all;
}

// "[pN] NOTE kernels compiled=C from_peers=P" of each process.
std::map<int, std::pair<int, int>> kernel_counts(const std::string& out) {
  std::map<int, std::pair<int, int>> counts;
  const std::regex re(R"(\[p(\d+)\] NOTE kernels compiled=(\d+) from_peers=(\d+))");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it) {
    counts[std::stoi((*it)[1])] = {std::stoi((*it)[2]), std::stoi((*it)[3])};
  }
  return counts;
}

class ShareCompiled : public ::testing::TestWithParam<int> {};

// MCX_SHARE_COMPILED=1, processes starting together on no cache: each of the 3 kernels is compiled by exactly
// one process and linked by the others, with the interpreter's values everywhere.
TEST_P(ShareCompiled, EachKernelIsCompiledOnceInTheJob) {
  const int n = GetParam();
  std::string all;
  auto checks = run_worker(n, "share_kernels", &all, true, {{"MCX_SHARE_COMPILED", "1"}});
  const auto counts = kernel_counts(all);
  ASSERT_EQ(counts.size(), static_cast<size_t>(n)) << all;
  int compiled = 0, from_peers = 0;
  for (int p = 0; p < n; ++p) {
    EXPECT_EQ(checks[p]["shared_kernels_compute_the_interpreters_values"], "OK") << all;
    EXPECT_EQ(counts.at(p).first + counts.at(p).second, 3) << "process " << p << "\n" << all;
    compiled += counts.at(p).first;
    from_peers += counts.at(p).second;
  }
  EXPECT_EQ(compiled, 3) << all;
  EXPECT_EQ(from_peers, 3 * (n - 1)) << all;
}

INSTANTIATE_TEST_SUITE_P(Processes, ShareCompiled, ::testing::Values(2, 3, 4));

// A process that claims every kernel and never publishes one (as a claimant that hangs) costs the others the
// wait (MCX_SHARE_COMPILED_TIMEOUT_S=1 per kernel), then they compile themselves: no hang, the same values.
TEST(ShareCompiledFaults, ASilentClaimantOnlyDelaysTheOthers) {
  std::string all;
  auto checks = run_worker(3, "share_kernels_silent_claimant", &all, true,
                           {{"MCX_SHARE_COMPILED", "1"}, {"MCX_SHARE_COMPILED_TIMEOUT_S", "1"}});
  const auto counts = kernel_counts(all);
  EXPECT_EQ(checks[2]["claim_every_kernel"], "OK") << all;
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ(checks[p]["shared_kernels_compute_the_interpreters_values"], "OK") << all;
    ASSERT_TRUE(counts.count(p)) << all;
    EXPECT_EQ(counts.at(p).first, 3) << all;
    EXPECT_EQ(counts.at(p).second, 0) << all;
  }
  EXPECT_THAT(all, ::testing::HasSubstr("claimed it but its object did not arrive within 1 s")) << all;
}

TEST(Multihost, DifferentNamesFailNamingBoth) {
  std::string all;
  auto checks = run_worker(2, "names", &all);
  for (int p = 0; p < 2; ++p) EXPECT_EQ(checks[p]["sync_names_differ"], "OK") << all;
}

// A mesh over processes 0 and 1 of 3: process 2 holds the arrays' metadata, skips the computation and takes
// part in no collective; 0 and 1 compute the reduction between them; all three stay in step.
TEST(Multihost, AMeshOverASubsetOfTheProcesses) {
  std::string all;
  auto checks = run_worker(3, "subset_mesh", &all);
  for (int p = 0; p < 3; ++p) {
    for (const char* name : {"subset_make_array", "subset_jit", "subset_everyone_in_step_after"}) {
      EXPECT_EQ(checks[p][name], "OK") << "process " << p << " " << name << all;
    }
  }
}

}  // namespace
}  // namespace mcx::mptest
