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
  // Each process on an emulated GPU of its own, the collectives over the stand-in NCCL (MCX_GPU_COLLECTIVES=nccl):
  // the live-set recovery on GPU meshes, with an NCCL communicator per group that is dropped with it.
  bool nccl = false;
};

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  return std::to_string(i.param.processes) + "_processes_process_" + std::to_string(i.param.who) +
         (i.param.nccl ? "_nccl_gpus" : "");
}

// Process `id`'s environment for `c` (plus `extra`).
Env job_env(const Case& c, int id, Env extra = {}) {
  extra["MCX_CPU_DEVICE_COUNT"] = "1";
#ifdef MCX_TEST_FAKE_CUDA_DIR
  if (c.nccl) {
    for (const auto& [k, v] : Env{{"MCX_CUDA_LIBRARY_PATH", MCX_TEST_FAKE_CUDA_DIR}, {"MCX_CUDA_KERNEL_TARGET", "host"},
                                  {"MCX_PLATFORMS", "cuda"}, {"MCX_FAKE_CUDA_DEVICES", std::to_string(c.processes)},
                                  {"MCX_FAKE_CUDA_MEMORY_MB", "256"}, {"MCX_LOCAL_DEVICE_IDS", std::to_string(id)},
                                  {"MCX_GPU_COLLECTIVES", "nccl"}}) {
      extra[k] = v;
    }
  }
#endif
  return extra;
}

int sum_of_ids(int n, int except) { return n * (n + 1) / 2 - (except >= 0 ? except + 1 : 0); }

// The "after=<seconds>" of the first line starting with `prefix`, or -1.
double seconds_after(const std::string& out, const std::string& prefix) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(prefix + "[^\\n]* after=([0-9.e-]+)"))) return -1;
  return std::stod(m[1]);
}

std::vector<int> start_job(Harness& h, const Case& c, const std::string& mode, const std::string& address) {
  std::vector<int> procs;
  for (int id = 0; id < c.processes; ++id) {
    procs.push_back(h.spawn("p" + std::to_string(id), {live_scope_worker_path(), mode, std::to_string(c.who)},
                            Harness::worker_env(address, c.processes, id, job_env(c, id))));
  }
  return procs;
}

class LiveScope : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
#ifndef MCX_TEST_FAKE_CUDA_DIR
    if (GetParam().nccl) GTEST_SKIP() << "no stand-in CUDA driver in this build";
#endif
  }
};

// Every survivor's body finished, but a member died before the exit: all of them raise, naming it.
TEST_P(LiveScope, AMemberDyingAfterItsBodyMakesEverySurvivorRaise) {
  const int n = GetParam().processes, victim = GetParam().who;
  Harness h;
  const std::string address = h.start_coordinator(n, {"--recoverable"});
  ASSERT_FALSE(address.empty());
  const std::vector<int> procs = start_job(h, GetParam(), "die-after-body", address);
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
  const std::vector<int> procs = start_job(h, GetParam(), "raise-in-body", address);
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
  const std::vector<int> procs = start_job(h, GetParam(), "rejoin", address);
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
                                                    job_env(GetParam(), victim, {{"LIVE_SCOPE_RESTARTED", "1"}})));
  const std::string full = "FULL generation=3 processes=" + process_ids(n, -1) + " sum=" + std::to_string(sum_of_ids(n, -1));
  for (int id = 0; id < n; ++id) {
    const int p = id == victim ? restarted : procs[id];
    ASSERT_TRUE(h.wait_output(p, "DONE", milliseconds(30000))) << h.dump(p);
    EXPECT_THAT(h.out(p), HasSubstr(full)) << h.dump(p);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, LiveScope,
                         ::testing::Values(Case{2, 1}, Case{3, 0}, Case{4, 2}, Case{3, 1, true}), case_name);

}  // namespace
}  // namespace mcx::mptest
