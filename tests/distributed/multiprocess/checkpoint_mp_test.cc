// Checkpoints through the real launcher: a job of N processes (2 CPU devices each) saves (sync and async) and
// restores on three layouts; jobs of other process counts restore the same checkpoint onto their own meshes,
// bit for bit; a process killed with SIGKILL during a save leaves the previous step intact and the partial
// one ignored, and the next job's save removes it; a save that fails on one process before writing fails on
// every process at once.
#include <filesystem>
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

struct JobResult {
  int exit_code = -1;
  std::map<int, std::map<std::string, std::string>> checks;  // process -> check -> "OK" / "FAIL ..."
  std::string all;
};

JobResult run_job(int n, const std::string& mode, const std::string& root, bool recoverable = false) {
  Harness h;
  std::vector<std::string> argv = {tool_path("mcx-run"), "-n", std::to_string(n), "--cpu-devices", "2",
                                   "--init-timeout", "20", "--timeout", "50", "--grace-period", "1"};
  if (recoverable) argv.push_back("--recoverable");
  for (const std::string& a : {std::string("--"), std::string(MCX_TEST_CHECKPOINT_WORKER), mode, root}) argv.push_back(a);
  int r = h.spawn("mcx-run", argv, {{"MCX_DEVICE_TIMEOUT_S", "20"}, {"MCX_HEARTBEAT_TIMEOUT", "3"}});
  JobResult out;
  EXPECT_TRUE(h.wait_exit(r, milliseconds(55000))) << h.dump(r);
  out.exit_code = h.exit_code(r);
  out.all = h.dump(r);
  const std::regex re(R"(\[p(\d+)\] CHECK (\S+) (OK|FAIL.*))");
  std::istringstream lines(h.out(r));
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, re)) out.checks[std::stoi(m[1])][m[2]] = m[3];
  }
  return out;
}

void expect_all_ok(const JobResult& r, int n, const std::vector<std::string>& names) {
  EXPECT_EQ(r.exit_code, 0) << r.all;
  ASSERT_EQ(r.checks.size(), static_cast<size_t>(n)) << r.all;
  for (int p = 0; p < n; ++p) {
    for (const std::string& name : names) {
      EXPECT_EQ(r.checks.at(p).count(name) ? r.checks.at(p).at(name) : "missing", "OK")
          << "process " << p << " " << name << "\n" << r.all;
    }
  }
}

std::vector<std::string> restore_checks() {
  std::vector<std::string> names;
  for (int step : {1, 2}) {
    for (int layout = 0; layout < 3; ++layout) {
      names.push_back("restore_step" + std::to_string(step) + "_layout" + std::to_string(layout));
    }
    names.push_back("metadata_step" + std::to_string(step));
  }
  return names;
}

// Written by `writers` processes, then read by each process count in `readers`.
struct Case {
  int writers;
  std::vector<int> readers;
};

class CheckpointAcrossProcesses : public ::testing::TestWithParam<Case> {};

TEST_P(CheckpointAcrossProcesses, EveryReshardingIsBitExact) {
  const Case c = GetParam();
  TempDir dir;
  const std::string root = dir.file("ckpt");
  std::vector<std::string> saved = restore_checks();
  saved.insert(saved.end(), {"save_step1", "save_async_step2", "steps"});
  expect_all_ok(run_job(c.writers, "save", root), c.writers, saved);
  for (int n : c.readers) {
    SCOPED_TRACE("read by " + std::to_string(n) + " processes");
    expect_all_ok(run_job(n, "restore", root), n, restore_checks());
  }
}

INSTANTIATE_TEST_SUITE_P(Processes, CheckpointAcrossProcesses,
                         ::testing::Values(Case{1, {4}}, Case{2, {3}}, Case{3, {2}}, Case{4, {1, 2, 3}}),
                         [](const auto& info) { return "WrittenBy" + std::to_string(info.param.writers); });

TEST(CheckpointKill9, PartialSaveIsIgnoredAndCleanedUp) {
  TempDir dir;
  const std::string root = dir.file("ckpt");
  JobResult crashed = run_job(3, "crash", root);
  EXPECT_NE(crashed.exit_code, 0) << crashed.all;
  EXPECT_THAT(crashed.all, ::testing::HasSubstr("KILLING myself"));
  for (int p = 0; p < 3; ++p) EXPECT_EQ(crashed.checks[p]["save_step1"], "OK") << crashed.all;
  // The survivors wrote their shards of step 2 into the temporary directory; nothing committed it.
  bool partial_has_shards = false;
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    if (e.path().filename().string().rfind("2.tmp-", 0) != 0) continue;
    for (const auto& f : std::filesystem::directory_iterator(e.path())) {
      partial_has_shards = partial_has_shards || f.path().extension() == ".npy";
    }
  }
  EXPECT_TRUE(partial_has_shards) << crashed.all;
  EXPECT_FALSE(std::filesystem::exists(root + "/2")) << crashed.all;
  // Another job (another process count) finds step 1 intact and the partial step 2 ignored, then saves it.
  expect_all_ok(run_job(2, "resume", root), 2,
                {"latest_is_step1", "partial_step2_present", "restore_step1", "save_step2_again", "partial_cleaned",
                 "restore_step2"});
}

// A save whose preparation fails on one process (here: its metadata) fails on every process within seconds,
// naming that process, instead of making the others wait for it until the timeout; later saves still agree.
TEST(CheckpointFailure, APreparationFailureReachesEveryProcessAtOnce) {
  TempDir dir;
  expect_all_ok(run_job(3, "prepfail", dir.file("ckpt")), 3,
                {"save_fails_everywhere", "save_async_fails_everywhere", "save_after_failures", "restore_step3"});
}

// A recoverable job whose process died before the first save: the managers follow the live set by themselves
// (no set_processes), so the survivors' saves commit at once instead of waiting out the timeout for the dead
// process; when the saves' leader dies during a save the other fails it at once, and its next save commits alone.
TEST(CheckpointRecoverable, SavesFollowTheLiveSetAndNeverWaitForADeadProcess) {
  TempDir dir;
  JobResult r = run_job(3, "survive", dir.file("ckpt"), /*recoverable=*/true);
  const std::vector<std::string> both = {"live_set_lacks_the_dead", "save_step1_on_survivors",
                                         "save_async_step2_on_survivors", "restore_step2"};
  for (int p : {0, 1}) {
    for (const std::string& name : both) {
      EXPECT_EQ(r.checks[p].count(name) ? r.checks[p][name] : "missing", "OK") << "process " << p << " " << name << "\n" << r.all;
    }
  }
  for (const std::string& name : {"save_step3_fails_at_once", "save_step4_alone", "steps", "restore_step4"}) {
    EXPECT_EQ(r.checks[1].count(name) ? r.checks[1][name] : "missing", "OK") << name << "\n" << r.all;
  }
}

}  // namespace
}  // namespace mcx::mptest
