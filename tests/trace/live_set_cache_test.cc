// The process-wide SPMD executable cache drops executables over a mesh that includes a process the job agreed
// is gone (collectives/live_set.h), and keeps the others. In a child process with a two-process topology (devices 0, 1
// here, 2, 3 on process 1); the programs are element-wise, so they run without a data plane.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mcx/collectives/live_set.h"
#include "mcx/core/topology.h"
#include "mcx/mcx.h"
#include "mcx/runtime/program_runner.h"
#include "tests/support/child_check.h"

namespace mcx {
namespace {

// This process is process 0 of `processes`, each with two devices (2p, 2p+1); call before any device exists.
void install_topology(int processes) {
  setenv("MCX_CPU_DEVICE_COUNT", "2", 1);
  Topology t;
  t.process_index = 0;
  t.process_count = processes;
  for (int g = 0; g < 2 * processes; ++g) t.devices.push_back(TopologyDevice{g, g / 2, g % 2, "cpu", "cpu"});
  CHILD_CHECK(set_distributed_topology(t).ok());
}

// f32 ones, one per device of `mesh`, split over its axis "i" (each process fills its own shards).
Array ones_over(const Mesh& mesh) {
  return make_array_from_callback({static_cast<int64_t>(mesh.size())}, DType::kFloat32, NamedSharding(mesh, P("i")),
                                  [](const IndexBox& box) {
                                    return Buffer::from_vector<float>(std::vector<float>(1, 1.0f), box.shape());
                                  });
}

// x * factor over `mesh` (programs with another factor are other cache entries).
Array scaled_on(const Mesh& mesh, float factor) {
  auto f = jit([factor](const Array& x) { return x * factor; });
  const Array x = ones_over(mesh);
  return f(x);
}

TEST(LiveSetCache, ExecutablesOverAnExcludedProcessAreDropped) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        install_topology(2);
        const Mesh both = make_mesh({4}, {"i"}, devices());
        const Mesh mine = make_mesh({2}, {"i"}, local_devices());
        scaled_on(both, 2.0f).addressable_shards().front().data.to_host();
        scaled_on(mine, 2.0f).addressable_shards().front().data.to_host();
        CHILD_CHECK(run_stats().spmd_cached == 2);
        // The job agrees that process 1 is gone: the next compile drops the executable over both processes.
        record_live_set(LiveSet{1, {0, 1}, {0}, {7}});
        scaled_on(mine, 3.0f).addressable_shards().front().data.to_host();
        CHILD_CHECK(run_stats().spmd_cached == 2);  // x * 2 and x * 3 over this process's devices
        std::fprintf(stderr, "dropped\n");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "dropped");
}

// The error a collective over `mesh` ends with, thrown when its result is read.
std::string collective_error(const Mesh& mesh, int* process) {
  auto total = shard_map([](const Array& v) { return psum(v, "i"); }, mesh, {P("i")}, {P()}, "sum_over_mesh");
  const Array x = ones_over(mesh);
  try {
    total(x).addressable_shards().front().data.to_host();
  } catch (const ProcessFailure& e) {
    *process = e.process();
    return e.what();
  } catch (const Error& e) {
    return std::string("not a ProcessFailure: ") + e.what();
  }
  return "no error";
}

// In the child: a three-process topology (devices 2i, 2i+1 on process i); process 1 is excluded by a live set,
// process 2 reported failed.
void refuse_groups_child() {
  install_topology(3);
  const std::vector<Device> d01 = {devices()[0], devices()[1], devices()[2], devices()[3]};
  const std::vector<Device> d02 = {devices()[0], devices()[1], devices()[4], devices()[5]};
  record_live_set(LiveSet{4, {0, 1}, {0}, {7}});  // process 1 is not live
  int process = -1;
  std::string e = collective_error(make_mesh({4}, {"i"}, d01), &process);
  std::fprintf(stderr, "%s\n", e.c_str());
  CHILD_CHECK(process == 1 && e.find("not in the live set generation 4") != std::string::npos);
  record_process_failure(2, 9, absl::UnavailableError("process 2 was killed"));
  process = -1;
  e = collective_error(make_mesh({4}, {"i"}, d02), &process);
  std::fprintf(stderr, "%s\n", e.c_str());
  CHILD_CHECK(process == 2 && e.find("process 2 was killed") != std::string::npos);
  std::fprintf(stderr, "refused\n");
  std::exit(0);
}

// A collective over a process the live set excludes, or one the coordination service reported failed, fails at
// once as that process's failure instead of waiting for it.
TEST(LiveSetCache, GroupsWithAProcessKnownGoneAreRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(refuse_groups_child(), ::testing::ExitedWithCode(0), "refused");
}

}  // namespace
}  // namespace mcx
