// Process-spanning meshes and global arrays: a real 2-process job (mcx-run -n 2 --cpu-devices 2) runs
// sharded_worker, which checks devices, a mesh over both processes, index maths, arrays made from
// process-local data, a jit over the spanning sharding, reading a partial array, the thread guard, and a jit
// and a shard_map whose reductions cross processes. Each check
// prints "CHECK <name> OK|FAIL <details>"; this test requires every expected check to say OK in both
// processes.
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

using ::testing::HasSubstr;

// The checks sharded_worker runs, in every process.
const std::vector<std::string> kExpectedChecks = {
    "initialize", "a_devices", "b_mesh_and_sharding", "c_process_local_data", "d_jit_elementwise",
    "e_device_get_partial", "g_thread_guard", "f_jit_sum_across_processes", "f_shard_map_psum_across_processes",
    "f_jit_grad_of_shard_map_across_processes", "f_exported_call_across_processes", "h_after_collectives", "shutdown"};

TEST(ShardedArrays, EveryCheckPassesInBothProcesses) {
  Harness h;
  // --timeout ends the job if anything hangs; the worker's own watchdog normally fails a stuck check first.
  int r = h.spawn("mcx-run",
                  {tool_path("mcx-run"), "-n", "2", "--cpu-devices", "2", "--init-timeout", "15", "--timeout", "30",
                   "--grace-period", "1", "--", MCX_TEST_SHARDED_WORKER},
                  {{"MCX_DEVICE_TIMEOUT_S", "20"}});
  ASSERT_TRUE(h.wait_exit(r, milliseconds(35000))) << h.dump(r);

  // process -> check name -> "OK" or "FAIL <details>".
  std::map<int, std::map<std::string, std::string>> results;
  const std::regex line_re(R"(\[p(\d+)\] CHECK (\S+) (OK|FAIL.*))");
  std::istringstream lines(h.out(r));
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, line_re)) continue;
    int p = std::stoi(m[1].str());
    EXPECT_FALSE(results[p].count(m[2].str())) << "check " << m[2] << " reported twice by process " << p;
    results[p][m[2].str()] = m[3].str();
  }
  EXPECT_EQ(results.size(), 2u) << "expected CHECK lines from processes 0 and 1" << h.dump(r);
  for (int p = 0; p < 2; ++p) {
    for (const std::string& name : kExpectedChecks) {
      auto it = results[p].find(name);
      if (it == results[p].end()) {
        ADD_FAILURE() << "process " << p << " did not report check " << name;
        continue;
      }
      EXPECT_EQ(it->second, "OK") << "process " << p << " check " << name;
    }
    // Any other check line (e.g. a watchdog report) must not be a failure either.
    for (const auto& [name, status] : results[p]) {
      EXPECT_EQ(status, "OK") << "process " << p << " check " << name;
    }
    EXPECT_THAT(h.out(r), HasSubstr("[p" + std::to_string(p) + "] DONE 0 failed"));
  }
  EXPECT_EQ(h.exit_code(r), 0) << h.dump(r);
}

}  // namespace
}  // namespace mcx::mptest
