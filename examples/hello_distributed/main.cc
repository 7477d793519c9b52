// hello_distributed: the smallest multi-process mcx program.
//
// Each process joins the job (mcx::distributed::initialize reads mcx-run's MCX_* variables, or OpenMPI's /
// Slurm's / a Kubernetes indexed Job's), prints its index, the process count and the global and local device
// counts, publishes a value in the coordination key-value store, reads its right neighbour's value, and
// meets the others at a barrier before leaving.
//
//   mcx-run -n 4 --cpu-devices 2 -- hello_distributed
//   mpirun --allow-run-as-root --oversubscribe -n 2 hello_distributed
//
// Exit codes: 0 ok; 1 an mcx error (printed); 43 another process failed (fate-sharing).
#include <cstdio>
#include <string>

#include "mcx/core/error.h"
#include "mcx/core/topology.h"
#include "mcx/distributed/distributed.h"

int main() {
  namespace dist = mcx::distributed;
  try {
    dist::initialize();
    std::optional<mcx::Topology> topo = mcx::distributed_topology();
    if (!topo) throw mcx::Internal("[hello_distributed] initialize() installed no topology");
    const int me = topo->process_index;
    const int n = topo->process_count;
    int local = 0;
    for (const auto& d : topo->devices) local += d.process_index == me;
    std::printf("process %d of %d: %zu global devices, %d local devices\n", me, n, topo->devices.size(), local);
    std::fflush(stdout);

    dist::CoordinationAgent* agent = dist::agent();
    // Each process publishes a value only it can know; its right neighbour checks it.
    auto value_of = [](int p) { return "hello from process " + std::to_string(p) + " (" + std::to_string(p * p + 7) + ")"; };
    mcx::throw_if_error(agent->kv_insert("hello/" + std::to_string(me), value_of(me)));
    const int right = (me + 1) % n;
    std::string got = mcx::value_or_throw(agent->kv_get("hello/" + std::to_string(right), absl::Seconds(30)));
    if (got != value_of(right)) {
      throw mcx::Internal("[hello_distributed] process " + std::to_string(me) + " expected '" + value_of(right) +
                          "' from process " + std::to_string(right) + ", found '" + got + "'");
    }
    std::printf("process %d read from process %d: %s\n", me, right, got.c_str());
    mcx::throw_if_error(agent->barrier("hello_distributed/done", absl::Seconds(30)));
    std::printf("process %d passed the barrier\n", me);
    std::fflush(stdout);
    dist::shutdown();
  } catch (const mcx::Error& e) {
    std::fprintf(stderr, "hello_distributed: %s\n", e.what());
    return 1;
  }
  return 0;
}
