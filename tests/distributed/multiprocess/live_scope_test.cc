// mcx::with_live_devices with real processes (live_scope_worker.cc): the body completes on every live process
// or raises on every one, an error inside one process's body reaches all of them promptly, and a restarted
// process joins the others at a scope's exit. Processes 0..n-1, one device each.
#include <regex>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/distributed/multiprocess/mp_harness.h"

namespace mcx::mptest {
namespace {

using ::testing::HasSubstr;
using std::chrono::milliseconds;

struct Case {
  int processes, who;
};

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  return std::to_string(i.param.processes) + "_processes_process_" + std::to_string(i.param.who);
}

int sum_of_ids(int n, int except) { return n * (n + 1) / 2 - (except >= 0 ? except + 1 : 0); }

// The "after=<seconds>" of the first line starting with `prefix`, or -1.
double seconds_after(const std::string& out, const std::string& prefix) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(prefix + "[^\\n]* after=([0-9.e-]+)"))) return -1;
  return std::stod(m[1]);
}

std::vector<int> start_job(Harness& h, int n, const std::string& mode, int who, const std::string& address) {
  std::vector<int> procs;
  for (int id = 0; id < n; ++id) {
    procs.push_back(h.spawn("p" + std::to_string(id), {live_scope_worker_path(), mode, std::to_string(who)},
                            Harness::worker_env(address, n, id, {{"MCX_CPU_DEVICE_COUNT", "1"}})));
  }
  return procs;
}

class LiveScope : public ::testing::TestWithParam<Case> {};

// Every survivor's body finished, but a member died before the exit: all of them raise, naming it.
TEST_P(LiveScope, AMemberDyingAfterItsBodyMakesEverySurvivorRaise) {
  const int n = GetParam().processes, victim = GetParam().who;
  Harness h;
  const std::string address = h.start_coordinator(n, {"--recoverable"});
  ASSERT_FALSE(address.empty());
  const std::vector<int> procs = start_job(h, n, "die-after-body", victim, address);
  for (int id = 0; id < n; ++id) {
    if (id == victim) continue;
    ASSERT_TRUE(h.wait_output(procs[id], "DONE", milliseconds(30000))) << h.dump(procs[id]);
    const std::string& o = h.out(procs[id]);
    EXPECT_THAT(o, HasSubstr("SCOPE 1 ok generation=1 processes=" + process_ids(n, -1) +
                             " sum=" + std::to_string(sum_of_ids(n, -1))));
    EXPECT_THAT(o, HasSubstr("SCOPE 2 raised ProcessFailure process=" + std::to_string(victim)));
    EXPECT_THAT(o, HasSubstr("SCOPE 3 ok generation=2 processes=" + process_ids(n, victim) +
                             " sum=" + std::to_string(sum_of_ids(n, victim))));
  }
}

// One process's body throws before a collective the others wait in: every process raises (the thrower its own
// exception, the others an mcx::Error naming it) within seconds, not at the collective's deadline, and the
// next scope runs on everyone.
TEST_P(LiveScope, AnErrorInOneBodyReachesEveryProcessPromptly) {
  const int n = GetParam().processes, thrower = GetParam().who;
  Harness h;
  const std::string address = h.start_coordinator(n, {"--recoverable"});
  ASSERT_FALSE(address.empty());
  const std::vector<int> procs = start_job(h, n, "raise-in-body", thrower, address);
  for (int id = 0; id < n; ++id) {
    ASSERT_TRUE(h.wait_output(procs[id], "DONE", milliseconds(30000))) << h.dump(procs[id]);
    const std::string& o = h.out(procs[id]);
    if (id == thrower) {
      EXPECT_THAT(o, HasSubstr("SCOPE 2 raised std::exception"));
      EXPECT_THAT(o, HasSubstr("what=a bad batch on purpose"));
    } else {
      EXPECT_THAT(o, HasSubstr("SCOPE 2 raised Error code=13"));  // Internal: a plain std::exception
      EXPECT_THAT(o, HasSubstr("the body failed on process " + std::to_string(thrower) + ": a bad batch on purpose"));
      const double after = seconds_after(o, "SCOPE 2 raised");
      EXPECT_GE(after, 0) << o;
      EXPECT_LT(after, 5.0) << "the others should not wait out the collective's deadline\n" << o;
    }
    EXPECT_THAT(o, HasSubstr("SCOPE 3 ok generation=1 processes=" + process_ids(n, -1) +
                             " sum=" + std::to_string(sum_of_ids(n, -1))))
        << o;
  }
}

// A process dies in a body and is restarted (a new incarnation): the survivors retry on the smaller set and
// carry on; the restarted process meets them at a scope's exit, and everyone ends on the full set.
TEST_P(LiveScope, ARestartedProcessJoinsAtAScopeExit) {
  const int n = GetParam().processes, victim = GetParam().who;
  Harness h;
  const std::string address = h.start_coordinator(n, {"--recoverable"});
  ASSERT_FALSE(address.empty());
  const std::vector<int> procs = start_job(h, n, "rejoin", victim, address);
  ASSERT_TRUE(h.wait_exit(procs[victim], milliseconds(20000))) << h.dump(procs[victim]);
  // Let the survivors notice and retry on their own first.
  for (int id = 0; id < n; ++id) {
    if (id == victim) continue;
    ASSERT_TRUE(h.wait_output(procs[id], "ok generation=2 processes=" + process_ids(n, victim), milliseconds(20000)))
        << h.dump(procs[id]);
  }
  const int restarted = h.spawn("p" + std::to_string(victim) + "'",
                                {live_scope_worker_path(), "rejoin", std::to_string(victim)},
                                Harness::worker_env(address, n, victim,
                                                    {{"MCX_CPU_DEVICE_COUNT", "1"}, {"LIVE_SCOPE_RESTARTED", "1"}}));
  const std::string full = "FULL generation=3 processes=" + process_ids(n, -1) + " sum=" + std::to_string(sum_of_ids(n, -1));
  for (int id = 0; id < n; ++id) {
    const int p = id == victim ? restarted : procs[id];
    ASSERT_TRUE(h.wait_output(p, "DONE", milliseconds(30000))) << h.dump(p);
    EXPECT_THAT(h.out(p), HasSubstr(full)) << h.dump(p);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, LiveScope,
                         ::testing::Values(Case{2, 1}, Case{3, 0}, Case{4, 2}), case_name);

}  // namespace
}  // namespace mcx::mptest
