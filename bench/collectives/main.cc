// bench_collectives: one process of an N-process job (mcx-run -n N --cpu-devices 1 -- bench_collectives).
// For each message size, times all-reduce (f32 sum) and all-gather through mcx's communicator for a group of
// every process's device (the spanning group over the data plane MCX_COLLECTIVES selects, as computations use
// it) and through Gloo called directly with the same algorithm (AllreduceRingChunked / AllgatherRing on a context
// of its own, rendezvous through the same coordination service). Process 0 prints one JSON line per case:
//   {"name":"all_reduce","bytes":1048576,"processes":2,"transport":"tcp","mcx_ms":..,"peer":"gloo_direct",
//    "peer_ms":..,"ratio":..}
// ratio = peer_ms / mcx_ms (above 1: mcx is faster). Times are medians of 7 batches of calls. --mcx-only skips
// Gloo and the launch check (peer_ms 0): run.sh times the other transports that way. "transport" ends in
// "_no_shm" with MCX_DATA_PLANE_SHARED_MEMORY=0 (the processes of this host on loopback TCP).
#include <gloo/allgather_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <functional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "mcx/collectives/peer_group.h"
#include "mcx/core/config.h"
#include "mcx/distributed/distributed.h"
#include "mcx/distributed/data_plane/gloo/gloo_kv_store.h"
#include "mcx/mcx.h"
#include "mcx/runtime/communicator_cache.h"

namespace {

using Clock = std::chrono::steady_clock;

// Median over 7 batches of the time per call, after a warm-up batch (the first calls of a process run cold:
// measured, the first size timed in a 4-process job took 3x longer without it). Every process makes the same
// calls (they are collectives), so the batch size depends only on the message size.
double time_ms(const std::function<void()>& op, int calls_per_batch) {
  for (int i = 0; i < calls_per_batch; ++i) op();
  std::vector<double> per_call;
  for (int b = 0; b < 7; ++b) {
    auto s = Clock::now();
    for (int i = 0; i < calls_per_batch; ++i) op();
    per_call.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s).count() / calls_per_batch);
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[3];
}

// The data plane: its backend ("tcp", "tls", "gloo"), "_no_shm" when processes of one host were told to keep off
// shared memory (MCX_DATA_PLANE_SHARED_MEMORY=0).
std::string transport() {
  std::string t = mcx::peer_group_backend();
  if (!mcx::value_or_throw(mcx::kDataPlaneSharedMemoryFlag.get()) && t != "gloo") t += "_no_shm";
  return t;
}

void emit(const char* name, int64_t bytes, int n, double mcx_ms, double peer_ms) {
  std::printf("{\"name\":\"%s\",\"bytes\":%lld,\"processes\":%d,\"transport\":\"%s\",\"mcx_ms\":%.4f,"
              "\"peer\":\"gloo_direct\",\"peer_ms\":%.4f,\"ratio\":%.3f}\n",
              name, static_cast<long long>(bytes), n, transport().c_str(), mcx_ms, peer_ms, peer_ms / mcx_ms);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cross-process all-reduce and all-gather: mcx against Gloo called directly"};
  std::vector<int64_t> sizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
  app.add_option("--bytes", sizes, "message sizes in bytes (per process), comma-separated")->delimiter(',');
  bool mcx_only = false;
  app.add_flag("--mcx-only", mcx_only, "time mcx's collectives only (no Gloo, no launch check)");
  CLI11_PARSE(app, argc, argv);
  try {
    mcx::distributed::initialize();
    const int n = mcx::process_count(), me = mcx::process_index();
    const std::vector<mcx::Device> group = mcx::devices();
    if (static_cast<int>(group.size()) != n) {
      std::fprintf(stderr, "bench_collectives: run with one device per process (--cpu-devices 1)\n");
      return 2;
    }
    const absl::Time far = absl::Now() + absl::Hours(1);
    const std::shared_ptr<mcx::Communicator> comm =
        mcx::value_or_throw(mcx::group_communicator(group, mcx::local_devices()[0], far));
    // Gloo directly: its own device and context, rendezvous through the same coordination service.
    std::shared_ptr<gloo::rendezvous::Context> context;
    if (!mcx_only) {
      gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      auto device = gloo::transport::tcp::CreateDevice(attr);
      context = std::make_shared<gloo::rendezvous::Context>(me, n);
      mcx::distributed::GlooKvStore store(*mcx::job_key_value(), "bench/gloo_direct/", far);
      context->connectFullMesh(store, device);
    }

    // The job's first ~100 ms: the kernel starts the processes where it likes, often two on one core until its
    // load balancer moves one (measured, unbound: a 4 KiB exchange took 5.5 us then, 1.1 us after), which the
    // first case timed would show instead of the collective. So every process first makes the same 50,000 small
    // all-reduces (mcx-run --cpu-bind cores avoids the cause).
    {
      std::vector<float> warm(1024, 1.0f), sum(1024);
      for (int i = 0; i < 50000; ++i) {
        mcx::throw_if_error(comm->all_reduce(warm.data(), sum.data(), 1024, mcx::DType::kFloat32, mcx::ReduceOp::kSum, far));
      }
    }
    for (int64_t bytes : sizes) {
      const int64_t count = bytes / 4;
      std::vector<float> in(count, 1.0f + me), out(count), gathered(count * n);
      // More calls per batch for small messages (every process computes the same count).
      const int calls = static_cast<int>(std::clamp(64e6 / static_cast<double>(bytes), 2.0, 200.0));
      const double mcx_ar = time_ms([&] {
        mcx::throw_if_error(comm->all_reduce(in.data(), out.data(), count, mcx::DType::kFloat32, mcx::ReduceOp::kSum, far));
      }, calls);
      // The launch check on every call (as when each all-reduce is its own launch of a computation): the
      // piggybacked tag's cost, reported against the unchecked all-reduce.
      const double mcx_ag = time_ms([&] {
        mcx::throw_if_error(comm->all_gather(in.data(), gathered.data(), bytes, far));
      }, calls);
      if (mcx_only) {
        if (me == 0) {
          emit("all_reduce", bytes, n, mcx_ar, 0.0);
          emit("all_gather", bytes, n, mcx_ag, 0.0);
        }
        continue;
      }
      uint64_t seq = 0;
      const double mcx_checked = time_ms([&] {
        comm->set_launch(mcx::LaunchTag{"bench_step", 0x1234, seq++});
        mcx::throw_if_error(comm->all_reduce(in.data(), out.data(), count, mcx::DType::kFloat32, mcx::ReduceOp::kSum, far));
      }, calls);
      std::vector<float> buf = in;
      gloo::AllreduceRingChunked<float> ring(context, {buf.data()}, static_cast<int>(count));
      const double gloo_ar = time_ms([&] { ring.run(); }, calls);
      gloo::AllgatherRing<float> gather(context, {in.data()}, gathered.data(), static_cast<int>(count));
      const double gloo_ag = time_ms([&] { gather.run(); }, calls);
      if (me == 0) {
        emit("all_reduce", bytes, n, mcx_ar, gloo_ar);
        std::printf("{\"name\":\"launch_check_overhead\",\"bytes\":%lld,\"processes\":%d,\"mcx_ms\":%.4f,"
                    "\"checked_ms\":%.4f,\"overhead\":%.3f}\n",
                    static_cast<long long>(bytes), n, mcx_ar, mcx_checked, mcx_checked / mcx_ar - 1.0);
        emit("all_gather", bytes, n, mcx_ag, gloo_ag);
      }
    }
    mcx::distributed::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_collectives: %s\n", e.what());
    return 1;
  }
}
