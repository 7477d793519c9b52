// live_devices_worker: mcx::live_devices across a failure (live_devices_test.cc). One process per device, a
// recoverable job. Round 1: every process agrees on the live set and sums each device's id + 1 over a mesh of
// it. Then process `victim` (argv[1]) kills itself with SIGKILL. Round 2: the survivors agree on the smaller
// set (a newer generation), rebuild the mesh over it without renumbering the devices, and sum again.
// Prints "LIVE <round> generation=<g> processes=<p,...> devices=<n> sum=<s>" and "DONE".
#include <csignal>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/distributed/distributed.h"
#include "mcx/mcx.h"
#include "mcx/multihost/live_devices.h"
#include "tests/distributed/multiprocess/worker_output.h"

namespace {

using mcx::mptest::one_line;
using mcx::mptest::print_line;

void round(int k) {
  const mcx::LiveDevices live = mcx::live_devices(mcx::devices(), absl::Seconds(20));
  const mcx::Mesh mesh =
      mcx::make_mesh({static_cast<int64_t>(live.devices.size())}, {"i"}, live.devices);
  const mcx::Sharding rows = mcx::NamedSharding(mesh, mcx::P("i"));
  // Element r is the id + 1 of the device holding row r (ids are the job-wide ones, never renumbered).
  mcx::Array x = mcx::make_array_from_callback(
      {static_cast<int64_t>(live.devices.size())}, mcx::DType::kFloat32, rows, [&](const mcx::IndexBox& box) {
        std::vector<float> v;
        for (int64_t r = box.start[0]; r < box.limit[0]; ++r) v.push_back(static_cast<float>(live.devices[r].global_id + 1));
        return mcx::Buffer::from_vector<float>(v, box.shape());
      });
  auto total = mcx::shard_map([](const mcx::Array& v) { return mcx::psum(v, "i"); }, mesh, {mcx::P("i")},
                              {mcx::P()}, "live_sum");
  const float sum = total(x).addressable_shards().front().data.to_vector<float>().front();
  print_line(absl::StrCat("LIVE ", k, " generation=", live.generation, " processes=", absl::StrJoin(live.processes, ","),
                          " devices=", live.devices.size(), " sum=", sum));
}

}  // namespace

int main(int argc, char** argv) {
  const int victim = argc > 1 ? std::atoi(argv[1]) : -1;
  try {
    mcx::distributed::InitializeOptions options;
    options.on_failure = [](const mcx::distributed::TaskFailure& f) {
      print_line(absl::StrCat("NOTE task ", f.task, " failed"));
    };
    mcx::distributed::initialize(options);
    round(1);
    if (mcx::process_index() == victim) std::raise(SIGKILL);
    round(2);
    // Leave only once every survivor has finished round 2's collective: a process that exits is reported
    // failed, and that report aborts the groups of a peer still receiving its last message.
    mcx::live_devices(mcx::devices(), absl::Seconds(20));
    print_line("DONE");
    std::fflush(stdout);
    std::_Exit(0);  // a member died: leave without the shutdown of a full job
  } catch (const std::exception& e) {
    print_line(absl::StrCat("ERROR ", one_line(e.what())));
    return 1;
  }
}
