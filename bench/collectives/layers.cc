// bench_collective_layers: where a small collective's time goes, layer by layer. One process of an N-process
// job (mcx-run -n N --cpu-devices 1 -- bench_collective_layers [--bytes 4096,65536] [--calls 20000]). For each
// size it times, call by call, on the same data plane the communicator uses:
//   exchange         one PeerGroup::exchange with the partner rank ^ 1 (the transport alone: a send and a
//                    receive of `bytes`; N must be even)
//   peer_all_reduce  the process-level all-reduce algorithm on that group (peer_collectives.h: the exchanges and
//                    the reductions)
//   all_reduce       the device-level communicator's all-reduce, as computations call it (the spanning group
//                    over a group of its own: the member meeting, the call checks, then the same algorithm)
// Process 0 prints one JSON line per layer and size: {"name":"layer","layer":..,"bytes":..,"processes":..,
// "p10_us":..,"p50_us":..,"p90_us":..,"mean_us":..}. Per-call times, so a VM's pauses show in p90 and the mean and
// leave p50 alone. The difference between adjacent layers is what that layer adds. Run it with mcx-run --cpu-bind
// cores, or mind the first case: the job's first ~100 ms, two processes often share a core (see main.cc).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "mcx/collectives/peer_collectives.h"
#include "mcx/collectives/peer_group.h"
#include "mcx/distributed/distributed.h"
#include "mcx/mcx.h"
#include "mcx/runtime/communicator_cache.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Percentiles {
  double p10, p50, p90, mean;
};

// Times `calls` calls of op one by one after a warm-up of calls / 10.
Percentiles time_calls(const std::function<void()>& op, int calls) {
  for (int i = 0; i < std::max(1, calls / 10); ++i) op();
  std::vector<double> us(static_cast<size_t>(calls));
  for (double& t : us) {
    const auto s = Clock::now();
    op();
    t = std::chrono::duration<double, std::micro>(Clock::now() - s).count();
  }
  double sum = 0;
  for (double t : us) sum += t;
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<size_t>(q * (us.size() - 1))]; };
  return {at(0.1), at(0.5), at(0.9), sum / static_cast<double>(us.size())};
}

void emit(const char* layer, int64_t bytes, int n, const Percentiles& p) {
  std::printf("{\"name\":\"layer\",\"layer\":\"%s\",\"bytes\":%lld,\"processes\":%d,\"transport\":\"%s\","
              "\"p10_us\":%.2f,\"p50_us\":%.2f,\"p90_us\":%.2f,\"mean_us\":%.2f}\n",
              layer, static_cast<long long>(bytes), n, mcx::peer_group_backend().c_str(), p.p10, p.p50, p.p90, p.mean);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"a small collective's time, layer by layer: transport, algorithm, communicator"};
  std::vector<int64_t> sizes = {4 << 10};
  int calls = 20000;
  app.add_option("--bytes", sizes, "message sizes in bytes (per process), comma-separated")->delimiter(',');
  app.add_option("--calls", calls, "timed calls per layer and size")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    mcx::distributed::initialize();
    const int n = mcx::process_count(), me = mcx::process_index();
    const std::vector<mcx::Device> group = mcx::devices();
    if (static_cast<int>(group.size()) != n || n % 2 != 0) {
      std::fprintf(stderr, "bench_collective_layers: run an even number of processes with one device each "
                           "(--cpu-devices 1)\n");
      return 2;
    }
    const absl::Time far = absl::Now() + absl::Hours(1);
    std::vector<int> processes(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) processes[static_cast<size_t>(i)] = i;
    std::unique_ptr<mcx::PeerGroup> peers =
        mcx::value_or_throw(mcx::make_peer_group(mcx::PeerGroupRequest{processes, "bench layers", 0, far}));
    const std::shared_ptr<mcx::Communicator> comm =
        mcx::value_or_throw(mcx::group_communicator(group, mcx::local_devices()[0], far));
    const int partner = peers->rank() ^ 1;
    for (int64_t bytes : sizes) {
      const int64_t count = bytes / 4;
      std::vector<float> in(static_cast<size_t>(count), 1.0f + static_cast<float>(me)), out(in.size());
      uint64_t tag = 0;
      const Percentiles exchange = time_calls([&] {
        const mcx::PeerGroup::Send send{partner, tag, in.data(), bytes};
        const mcx::PeerGroup::Recv recv{partner, tag, out.data(), bytes};
        ++tag;
        mcx::throw_if_error(peers->exchange({&send, 1}, {&recv, 1}, far));
      }, calls);
      const Percentiles algorithm = time_calls([&] {
        mcx::throw_if_error(mcx::peer_all_reduce(*peers, out.data(), count, mcx::DType::kFloat32, mcx::ReduceOp::kSum,
                                                 tag, far));
        tag += mcx::kPeerTagSpan;
      }, calls);
      const Percentiles communicator = time_calls([&] {
        mcx::throw_if_error(
            comm->all_reduce(in.data(), out.data(), count, mcx::DType::kFloat32, mcx::ReduceOp::kSum, far));
      }, calls);
      if (me == 0) {
        emit("exchange", bytes, n, exchange);
        emit("peer_all_reduce", bytes, n, algorithm);
        emit("all_reduce", bytes, n, communicator);
      }
    }
    peers.reset();
    mcx::distributed::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_collective_layers: %s\n", e.what());
    return 1;
  }
}
