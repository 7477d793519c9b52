// The process-wide SPMD executable cache drops executables over a mesh that includes a process the job agreed
// is gone (core/live_set.h), and keeps the others. In a child process with a two-process topology (devices 0, 1
// here, 2, 3 on process 1); the programs are element-wise, so they run without a data plane.
#include <cstdio>
#include <cstdlib>

#include "gtest/gtest.h"
#include "mcx/core/live_set.h"
#include "mcx/core/topology.h"
#include "mcx/mcx.h"
#include "mcx/runtime/program_runner.h"

namespace mcx {
namespace {

#define CHILD_CHECK(cond)                                      \
  do {                                                         \
    if (!(cond)) {                                             \
      std::fprintf(stderr, "child check failed: %s\n", #cond); \
      std::exit(1);                                            \
    }                                                          \
  } while (0)

// x * factor over `mesh` (programs with another factor are other cache entries).
Array scaled_on(const Mesh& mesh, float factor) {
  auto f = jit([factor](const Array& x) { return x * factor; });
  const Array x = make_array_from_callback({static_cast<int64_t>(mesh.size())}, DType::kFloat32,
                                           NamedSharding(mesh, P("i")), [](const IndexBox& box) {
                                             return Buffer::from_vector<float>(std::vector<float>(1, 1.0f), box.shape());
                                           });
  return f(x);
}

TEST(LiveSetCache, ExecutablesOverAnExcludedProcessAreDropped) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("MCX_CPU_DEVICE_COUNT", "2", 1);
        Topology t;
        t.process_index = 0;
        t.process_count = 2;
        for (int g = 0; g < 4; ++g) t.devices.push_back(TopologyDevice{g, g / 2, g % 2, "cpu", "cpu"});
        CHILD_CHECK(set_distributed_topology(t).ok());
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

}  // namespace
}  // namespace mcx
