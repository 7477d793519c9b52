// Collectives across processes through the real launcher and the real data plane (mcx's TCP transport over
// loopback, and Gloo; over TLS in mtls_test.cc): collectives_worker runs every opset-2 collective and the
// partitioner's communication on 1, 2, 3 and 4 processes x 1 and 2 CPU devices and checks its shards against
// a double-precision reference; the deterministic mode is bitwise identical to one process; processes that
// launch different computations fail at once; a peer killed with SIGKILL fails the survivors' collective
// within a second, naming it, and the survivors' devices keep working.
#include <csignal>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/distributed/multiprocess/mp_harness.h"
#include "tests/distributed/shared_memory_probe.h"

namespace mcx::mptest {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kChecks = {
    "psum",     "pmax",       "pmin",    "pmean",          "all_gather",
    "psum_scatter", "all_to_all", "ppermute", "axis_index", "jit_sum",
    "jit_matmul_contracting_sharded", "reshard_to_replicated", "device_put_rows_to_replicated",
    "device_put_replicated_to_rows", "device_put_rows_to_columns", "device_put_onto_a_reversed_mesh", "local_devices_of_each_process", "after_all"};

struct JobOutput {
  std::map<int, std::map<std::string, std::string>> checks;  // process -> check -> "OK" / "FAIL ..."
  std::map<int, std::map<std::string, std::string>> hashes;  // process -> name -> hex
  std::string all;
};

JobOutput parse(const std::string& out) {
  JobOutput r;
  r.all = out;
  const std::regex check_re(R"(\[p(\d+)\] CHECK (\S+) (OK|FAIL.*))");
  const std::regex hash_re(R"(\[p(\d+)\] HASH (\S+) (\S+))");
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, check_re)) r.checks[std::stoi(m[1])][m[2]] = m[3];
    if (std::regex_match(line, m, hash_re)) r.hashes[std::stoi(m[1])][m[2]] = m[3];
  }
  return r;
}

// Runs collectives_worker under mcx-run with `devices` (launcher flags giving each process its devices); returns its
// output (ADD_FAILURE on a non-zero exit).
JobOutput run_job_with(int n, const std::vector<std::string>& devices, const std::string& mode, const Env& env = {}) {
  Harness h;
  Env e = env;
  e["MCX_DEVICE_TIMEOUT_S"] = "20";
  std::vector<std::string> args = {tool_path("mcx-run"), "-n", std::to_string(n)};
  args.insert(args.end(), devices.begin(), devices.end());
  for (const char* a : {"--init-timeout", "20", "--timeout", "60", "--grace-period", "1", "--"}) args.push_back(a);
  args.push_back(collectives_worker_path());
  args.push_back(mode);
  int r = h.spawn("mcx-run", args, e);
  EXPECT_TRUE(h.wait_exit(r, milliseconds(65000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 0) << h.dump(r);
  return parse(h.out(r) + h.err(r));
}

JobOutput run_job(int n, int d, const std::string& mode, const Env& env = {}) {
  return run_job_with(n, {"--cpu-devices", std::to_string(d)}, mode, env);
}

struct Layout {
  int processes;
  int devices;
};

class CollectivesAcrossProcesses : public ::testing::TestWithParam<Layout> {};

TEST_P(CollectivesAcrossProcesses, EveryCollectiveMatchesTheReference) {
  const Layout l = GetParam();
  JobOutput out = run_job(l.processes, l.devices, "all");
  ASSERT_EQ(out.checks.size(), static_cast<size_t>(l.processes)) << out.all;
  std::vector<std::string> checks = kChecks;
  if (l.processes >= 2) {
    checks.push_back("device_put_across_processes");
    checks.push_back("device_put_to_another_device_count");
    checks.push_back("device_put_gather_onto_one_process");
    checks.push_back("device_put_reshard_is_guarded");
  }
  if (l.processes * l.devices % 2 == 0) checks.push_back("device_put_onto_a_2d_mesh");
  for (int p = 0; p < l.processes; ++p) {
    for (const std::string& name : checks) {
      auto it = out.checks[p].find(name);
      if (it == out.checks[p].end()) {
        ADD_FAILURE() << "process " << p << " did not report " << name << "\n" << out.all;
      } else {
        EXPECT_EQ(it->second, "OK") << "process " << p << " check " << name;
      }
    }
    // Replicas never drift: every process holds the same bits of the float all-reduce.
    EXPECT_EQ(out.hashes[p]["psum_float"], out.hashes[0]["psum_float"]) << "process " << p << "\n" << out.all;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CollectivesAcrossProcesses,
                         ::testing::Values(Layout{1, 2}, Layout{2, 1}, Layout{2, 2}, Layout{3, 1}, Layout{3, 2},
                                           Layout{4, 1}, Layout{4, 2}),
                         [](const ::testing::TestParamInfo<Layout>& i) {
                           return std::to_string(i.param.processes) + "x" + std::to_string(i.param.devices);
                         });

// The previous default transport stays supported: the same checks over Gloo.
TEST(CollectivesAcrossProcesses, EveryCollectiveMatchesTheReferenceOverGloo) {
  JobOutput out = run_job(3, 1, "all", {{"MCX_COLLECTIVES", "gloo"}});
  ASSERT_EQ(out.checks.size(), 3u) << out.all;
  for (int p = 0; p < 3; ++p) {
    for (const std::string& name : kChecks) EXPECT_EQ(out.checks[p][name], "OK") << "process " << p << " " << name;
  }
}

// Processes grouped on (simulated) hosts, 2 per host: the all-reduces go hierarchical (within each host to its
// leader, the leaders' all-reduce, back to the members; peer_collectives.h). Every check still matches, the
// replicas are still bitwise identical, and on 6 processes the float psum's bits differ from the flat group's (its
// order changed: the hierarchical path really ran; on 4, the flat recursive doubling happens to add in the same
// order as the hierarchy, (x0 + x1) + (x2 + x3)).
TEST(CollectivesAcrossProcesses, EveryCollectiveMatchesTheReferenceOnHostsOfTwoProcesses) {
  const std::string flat = run_job(6, 2, "all").hashes[0]["psum_float"];
  for (int n : {4, 6}) {
    JobOutput out = run_job(n, 2, "all", {{"COLLECTIVES_WORKER_PROCESSES_PER_HOST", "2"}});
    ASSERT_EQ(out.checks.size(), static_cast<size_t>(n)) << out.all;
    for (int p = 0; p < n; ++p) {
      for (const std::string& name : kChecks) EXPECT_EQ(out.checks[p][name], "OK") << "process " << p << " " << name;
      EXPECT_EQ(out.hashes[p]["psum_float"], out.hashes[0]["psum_float"]) << "process " << p << "\n" << out.all;
    }
    if (n == 6) EXPECT_NE(out.hashes[0]["psum_float"], flat) << "the 6-process psum did not take the hierarchical path";
  }
}

TEST(CollectivesAcrossProcesses, DeterministicModeIsBitwiseIdenticalToOneProcess) {
  const Env det = {{"MCX_DETERMINISTIC_REDUCTIONS", "1"}};
  std::set<std::string> seen;
  for (Layout l : {Layout{1, 4}, Layout{2, 2}, Layout{4, 1}}) {
    JobOutput out = run_job(l.processes, l.devices, "all", det);
    for (int p = 0; p < l.processes; ++p) {
      ASSERT_FALSE(out.hashes[p]["psum_float"].empty()) << out.all;
      seen.insert(out.hashes[p]["psum_float"]);
    }
  }
  EXPECT_EQ(seen.size(), 1u) << "the psum bits differ between layouts of 4 devices in deterministic mode";
}

void expect_mismatch_fails_at_once_naming_both(JobOutput out) {
  bool named_both = false;
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ(out.checks[p]["mismatch_detected"], "OK") << out.all;
    EXPECT_EQ(out.checks[p]["after_mismatch"], "OK") << out.all;
  }
  std::istringstream lines(out.all);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("NOTE mismatch error") == std::string::npos) continue;
    named_both = named_both || (line.find("sum_step") != std::string::npos &&
                                line.find("max_step") != std::string::npos && line.find("process 0") != std::string::npos &&
                                line.find("process 1") != std::string::npos);
  }
  EXPECT_TRUE(named_both) << "no error named both programs and both processes:\n" << out.all;
}

TEST(CollectivesAcrossProcesses, ProcessesRunningDifferentComputationsFailAtOnce) {
  expect_mismatch_fails_at_once_naming_both(run_job(2, 1, "mismatch"));
}

Env with(Env a, const Env& b) {
  for (const auto& [k, v] : b) a[k] = v;
  return a;
}

// Three processes all-reducing in a loop (with `env`); one is killed with SIGKILL: the survivors' collective fails
// within a second, thrown as that process's failure, and their devices keep working.
// own_gpu: process i gets GPU i (MCX_LOCAL_DEVICE_IDS). victim_env: process 2's extra environment; with
// kills_itself, the test does not kill it (it dies on its own, as the stand-in NCCL's MCX_FAKE_NCCL_KILL_AT makes it).
// At least one survivor's error must contain `error_says` (the other may have been between collectives).
void expect_killed_peer_fails_the_survivors_within_a_second(const Env& env, bool own_gpu = false,
                                                            const Env& victim_env = {}, bool kills_itself = false,
                                                            const std::string& error_says = "") {
  Harness h;
  const int n = 3;
  const std::string address = h.start_coordinator(n, {"--recoverable"});
  ASSERT_FALSE(address.empty());
  std::vector<int> procs;
  for (int id = 0; id < n; ++id) {
    Env e = with(env, {{"MCX_DEVICE_TIMEOUT_S", "30"}});
    if (own_gpu) e["MCX_LOCAL_DEVICE_IDS"] = std::to_string(id);
    if (id == 2) e = with(e, victim_env);
    procs.push_back(h.spawn("p" + std::to_string(id), {collectives_worker_path(), "kill"},
                            Harness::worker_env(address, n, id, e)));
  }
  for (int i : procs) ASSERT_TRUE(h.wait_output(i, "LOOPING", milliseconds(20000))) << h.dump(i);
  // The three processes share a host: their data plane runs through shared memory (mapped, its names gone).
  const int mapped = distributed::test::mapped_data_plane_segments(std::to_string(h.proc(procs[0]).sub->pid()));
  if (!kills_itself) h.proc(procs[2]).sub->signal(SIGKILL);
  const auto killed_at = Clock::now();
  for (int i : {procs[0], procs[1]}) {
    ASSERT_TRUE(h.wait_output(i, "AFTER", milliseconds(10000))) << h.dump(i);
  }
  bool named = false, says = false;
  for (int i : {procs[0], procs[1]}) {
    const std::string& o = h.out(i);
    size_t at = o.find("SURVIVOR_ERROR ");
    ASSERT_NE(at, std::string::npos) << h.dump(i);
    std::string line = o.substr(at, o.find('\n', at) - at);
    named = named || line.find("process 2") != std::string::npos;
    // One device per process: process 2's is device 2 (JAX's failed_devices).
    EXPECT_THAT(line, HasSubstr("ProcessFailure(process=2 failed_devices={2})")) << "not thrown as the failure of process 2";
    says = says || line.find(error_says) != std::string::npos;
    EXPECT_THAT(o, HasSubstr("AFTER f32[3]{2, 4, 6}")) << "the devices are unusable after the failure";
    (void)killed_at;
  }
  if (env.empty()) EXPECT_EQ(mapped, 2) << "process 0 should map one segment per peer";
  EXPECT_EQ(distributed::test::named_data_plane_segments(), 0) << "a shared-memory segment outlived the kill";
  EXPECT_TRUE(named) << "no survivor's error names process 2:\n" << h.dump(procs[0]) << h.dump(procs[1]);
  EXPECT_TRUE(says) << "no survivor's error says '" << error_says << "':\n" << h.dump(procs[0]) << h.dump(procs[1]);
  // Within a second of the kill (measured by the survivors from their last completed all-reduce).
  for (int i : {procs[0], procs[1]}) {
    const std::string& o = h.out(i);
    size_t at = o.find("SURVIVOR_ERROR ") + 15;
    EXPECT_LE(std::stoi(o.substr(at)), 1000) << h.dump(i);
    std::printf("killed peer: %s\n", o.substr(at - 15, o.find('\n', at) - at + 15).c_str());
  }
}

TEST(CollectivesAcrossProcesses, KilledPeerFailsTheSurvivorsWithinASecond) {
  expect_killed_peer_fails_the_survivors_within_a_second({});
}

// A stopped (SIGSTOP) peer closes no socket: only the coordination service notices, when its heartbeats stop.
// Collectives abort on failure: the survivors' collective fails as soon as the service declares the process
// failed (heartbeat timeout 2 s here), with ProcessFailure naming it, instead of waiting for the 30 s deadline.
TEST(CollectivesAcrossProcesses, StoppedPeerFailsTheSurvivorsWhenTheServiceDeclaresItFailed) {
  Harness h;
  const int n = 3;
  const std::string address = h.start_coordinator(n, {"--recoverable", "--heartbeat-timeout", "2"});
  ASSERT_FALSE(address.empty());
  std::vector<int> procs;
  for (int id = 0; id < n; ++id) {
    procs.push_back(h.spawn("p" + std::to_string(id), {collectives_worker_path(), "kill"},
                            Harness::worker_env(address, n, id,
                                                {{"MCX_DEVICE_TIMEOUT_S", "30"}, {"MCX_HEARTBEAT_TIMEOUT", "2"},
                                                 {"MCX_HEARTBEAT_INTERVAL", "0.5"}})));
  }
  for (int i : procs) ASSERT_TRUE(h.wait_output(i, "LOOPING", milliseconds(20000))) << h.dump(i);
  h.proc(procs[2]).sub->signal(SIGSTOP);
  for (int i : {procs[0], procs[1]}) {
    ASSERT_TRUE(h.wait_output(i, "AFTER", milliseconds(15000))) << h.dump(i);
    const std::string& o = h.out(i);
    size_t at = o.find("SURVIVOR_ERROR ");
    ASSERT_NE(at, std::string::npos) << h.dump(i);
    const std::string line = o.substr(at, o.find('\n', at) - at);
    EXPECT_THAT(line, HasSubstr("ProcessFailure(process=2 failed_devices={2})")) << h.dump(i);
    EXPECT_THAT(line, HasSubstr("process 2 failed")) << h.dump(i);
    // The 2 s heartbeat timeout, plus at most a second for the report to reach them and the abort to land.
    EXPECT_LE(std::stoi(o.substr(at + 15)), 3500) << h.dump(i);
    std::printf("stopped peer: a survivor's collective failed %d ms after its last good one\n", std::stoi(o.substr(at + 15)));
    EXPECT_THAT(o, HasSubstr("AFTER f32[3]{2, 4, 6}")) << "the devices are unusable after the failure";
  }
  h.proc(procs[2]).sub->signal(SIGKILL);
}

#ifdef MCX_TEST_FAKE_CUDA_DIR
// The processes' default platform the (emulated) GPU: each process's GPUs given by mcx-run --gpus-per-process, the
// collectives through host staging and the data plane. Two processes sharing one GPU (the lent machine's layout),
// and two with two GPUs each on a host of two (so they share both).
Env emulated_gpus(int gpus) {
  return {{"MCX_CUDA_LIBRARY_PATH", MCX_TEST_FAKE_CUDA_DIR}, {"MCX_CUDA_KERNEL_TARGET", "host"},
          {"MCX_PLATFORMS", "cuda"}, {"MCX_FAKE_CUDA_DEVICES", std::to_string(gpus)}, {"MCX_FAKE_CUDA_MEMORY_MB", "256"}};
}

TEST(CollectivesAcrossProcesses, EveryCollectiveOnEmulatedGpusSharingOneGpu) {
  JobOutput out = run_job_with(2, {"--gpus-per-process", "1", "--gpus", "1"}, "all", emulated_gpus(1));
  ASSERT_EQ(out.checks.size(), 2u) << out.all;
  EXPECT_THAT(out.all, HasSubstr("collectives of GPU arrays run through host staging"));
  for (int p = 0; p < 2; ++p) {
    for (const std::string& name : kChecks) EXPECT_EQ(out.checks[p][name], "OK") << "process " << p << " " << name;
    EXPECT_EQ(out.checks[p]["device_put_across_processes"], "OK") << out.all;
  }
}

TEST(CollectivesAcrossProcesses, EveryCollectiveOnEmulatedGpusTwoPerProcess) {
  JobOutput out = run_job_with(2, {"--gpus-per-process", "2", "--gpus", "2"}, "all", emulated_gpus(2));
  ASSERT_EQ(out.checks.size(), 2u) << out.all;
  for (int p = 0; p < 2; ++p) {
    for (const std::string& name : kChecks) EXPECT_EQ(out.checks[p][name], "OK") << "process " << p << " " << name;
  }
}

// Two processes with two GPUs each of a host of four: every GPU distinct, so the collectives between the GPUs
// run over NCCL (the stand-in NCCL between the processes), named in the log.
TEST(CollectivesAcrossProcesses, EveryCollectiveOverNcclOnEmulatedGpus) {
  JobOutput out = run_job_with(2, {"--gpus-per-process", "2", "--gpus", "4"}, "all", emulated_gpus(4));
  ASSERT_EQ(out.checks.size(), 2u) << out.all;
  EXPECT_THAT(out.all, HasSubstr("collectives of GPU arrays run device to device over NCCL"));
  for (int p = 0; p < 2; ++p) {
    for (const std::string& name : kChecks) EXPECT_EQ(out.checks[p][name], "OK") << "process " << p << " " << name;
    EXPECT_EQ(out.checks[p]["device_put_across_processes"], "OK") << out.all;
  }
}

// The launch check on GPUs over NCCL: the mismatched launch comes after the NCCL communicators were built, so
// only the check that runs before an NCCL collective (Communicator::check_launch) can catch it.
TEST(CollectivesAcrossProcesses, ProcessesRunningDifferentComputationsOverNcclFailAtOnce) {
  expect_mismatch_fails_at_once_naming_both(run_job_with(2, {"--gpus-per-process", "1", "--gpus", "2"}, "mismatch",
                                                         with(emulated_gpus(2), {{"MCX_GPU_COLLECTIVES", "nccl"}})));
}

// The same kill with every process on the (emulated) GPU they share: the staged collectives fail as promptly.
TEST(CollectivesAcrossProcesses, KilledPeerFailsTheSurvivorsWithinASecondOnEmulatedGpus) {
  expect_killed_peer_fails_the_survivors_within_a_second(with(emulated_gpus(1), {{"MCX_LOCAL_DEVICE_IDS", "0"}}));
}

// And with a GPU each, the all-reduce over NCCL (killed from outside: the survivors may be in the NCCL
// collective or in the launch check's host barrier before it).
TEST(CollectivesAcrossProcesses, KilledPeerFailsTheSurvivorsNcclCollectiveWithinASecond) {
  expect_killed_peer_fails_the_survivors_within_a_second(with(emulated_gpus(3), {{"MCX_GPU_COLLECTIVES", "nccl"}}),
                                                         /*own_gpu=*/true);
}

// Process 2 dies inside its 30th NCCL all-reduce, while the survivors wait in theirs: nothing of theirs reads a
// socket of the dead process; the coordination service's report aborts the host group, whose failure the NCCL
// wait polls, and the NCCL communicator is aborted ("[nccl] ... aborted").
TEST(CollectivesAcrossProcesses, APeerDyingInsideAnNcclCollectiveFailsTheSurvivorsWithinASecond) {
  Env survivors = with(emulated_gpus(3), {{"MCX_GPU_COLLECTIVES", "nccl"}});
  expect_killed_peer_fails_the_survivors_within_a_second(survivors, /*own_gpu=*/true,
                                                         {{"MCX_FAKE_NCCL_KILL_AT", "30"}}, /*kills_itself=*/true,
                                                         "[nccl] all_reduce on NCCL");
}

// A GPU the process does not have is refused at initialize, naming it and what the process sees.
TEST(CollectivesAcrossProcesses, AMissingGpuIsNamedAtInitialize) {
  Harness h;
  Env e = emulated_gpus(1);
  int r = h.spawn("mcx-run", {tool_path("mcx-run"), "-n", "2", "--gpus-per-process", "1", "--init-timeout", "10",
                              "--timeout", "30", "--grace-period", "1", "--", collectives_worker_path(), "all"},
                  e);
  ASSERT_TRUE(h.wait_exit(r, milliseconds(35000))) << h.dump(r);
  EXPECT_NE(h.exit_code(r), 0);
  EXPECT_THAT(h.out(r) + h.err(r), HasSubstr("GPU 1 does not exist; this process sees 1 GPUs")) << h.dump(r);
}
#endif

}  // namespace
}  // namespace mcx::mptest
