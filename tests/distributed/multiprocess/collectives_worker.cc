// collectives_worker: one process of an N-process job with D CPU devices each (mcx-run -n N --cpu-devices D --
// collectives_worker [mode]); collectives_test.cc runs it for N in {1,2,3,4} and D in {1,2}.
//
// Every collective of opset 2 and the partitioner's communication run over a mesh of all N*D devices
// ("i"), and each process checks the shards it holds against a reference computed here in double precision
// from the formula that fills the inputs (small integers, so sums are exact in f32 in any order). Output:
// "CHECK <name> OK|FAIL <details>" lines, "HASH <name> <hex>" lines (the bits of a float all-reduce whose
// rounding depends on the reduction order, compared across processes and runs by the test), "DONE <n> failed".
//
// Modes (argv[1]):
//   all          (default) every check above
//   mismatch     after one matching launch, process 0 launches a different computation than the others: every
//                process must fail at once with an error naming both programs, and the devices stay usable
//   kill         every process runs all-reduces in a loop; the test kills one with SIGKILL, and the survivors
//                must fail within a second with an error naming a process ("SURVIVOR_ERROR <ms> <message>")
//   selfkill     as kill, but the last process kills itself (SIGKILL) after 50 all-reduces, so no harness needs
//                its pid (scripts/device-check.sh runs it on the GPU)
// With COLLECTIVES_WORKER_PROCESSES_PER_HOST=k the processes are grouped k per simulated host (MCX_HOST_ID), so
// collectives across processes take their hierarchical path (peer_collectives.h).
//   psum_mib M   one psum of M MiB of float32 per device, checked (M = 0: a tiny one, the baseline of a byte count)
//   bandwidth    a 64 MiB float32 psum over one device per process, timed, against copying the same 64 MiB to the
//                host and back on the device ("BANDWIDTH allreduce_ms <ms> roundtrip_ms <ms> ratio <roundtrip /
//                allreduce>"): what a collective through host staging costs next to the copies it is made of
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/hash.h"
#include "mcx/distributed/cluster.h"
#include "mcx/distributed/distributed.h"
#include "mcx/mcx.h"
#include "tests/distributed/multiprocess/worker_output.h"

namespace {

using Clock = std::chrono::steady_clock;

using mcx::mptest::one_line;
using mcx::mptest::print_line;



mcx::mptest::Checks g_checks;

void check(const std::string& name, const std::function<std::string()>& body) { g_checks.run(name, body); }

// Input value of global element (row, col): small integers, exact in f32 whatever the summation order.
double xval(int64_t row, int64_t col) { return static_cast<double>((row * 7 + col * 3) % 11) - 5.0; }

mcx::Array make_input(const std::vector<int64_t>& dims, const mcx::Sharding& sharding,
                      const std::function<double(int64_t, int64_t)>& value) {
  return mcx::make_array_from_callback(dims, mcx::DType::kFloat32, sharding, [&](const mcx::IndexBox& box) {
    std::vector<float> v;
    for (int64_t r = box.start[0]; r < box.limit[0]; ++r) {
      for (int64_t c = box.start[1]; c < box.limit[1]; ++c) v.push_back(static_cast<float>(value(r, c)));
    }
    return mcx::Buffer::from_vector<float>(v, box.shape());
  });
}

// Compares every addressable shard of a (a 1-d or 2-d array) with want(global row, global col).
std::string compare(const mcx::Array& a, const std::vector<int64_t>& dims,
                    const std::function<double(int64_t, int64_t)>& want, double tol = 0) {
  if (a.dims() != dims) {
    return absl::StrCat("global dims [", absl::StrJoin(a.dims(), ","), "], expected [", absl::StrJoin(dims, ","), "]");
  }
  std::vector<std::string> bad;
  for (const mcx::ArrayShard& s : a.addressable_shards()) {
    mcx::Buffer b = s.data.to_host();
    const std::vector<int64_t> shape = s.index.shape();
    const int64_t cols = shape.size() > 1 ? shape[1] : 1;
    for (int64_t i = 0; i < b.num_elements(); ++i) {
      const int64_t r = s.index.start.empty() ? 0 : s.index.start[0] + i / cols;
      const int64_t c = shape.size() > 1 ? s.index.start[1] + i % cols : 0;
      const double got = b.element_as_double(i), exp = want(r, c);
      if (std::abs(got - exp) > tol * std::max(1.0, std::abs(exp)) && bad.size() < 4) {
        bad.push_back(absl::StrCat("on ", s.device.to_string(), " element (", r, ",", c, ") is ", got, ", expected ",
                                   exp));
      }
    }
  }
  return absl::StrJoin(bad, "; ");
}

std::string bits_hex(const mcx::Array& a) {
  mcx::Buffer b = a.addressable_shards().front().data.to_host();
  const uint64_t h = mcx::fnv1a64(std::string_view(static_cast<const char*>(b.data()), b.nbytes()));
  return absl::StrCat(absl::Hex(h, absl::kZeroPad16));
}

void run_all(int n, int g) {  // n processes, g devices in all
  const mcx::Mesh mesh = mcx::make_mesh({g}, {"i"});
  const mcx::Sharding rows = mcx::NamedSharding(mesh, mcx::P("i"));
  const int64_t R = 2, C = 3;  // rows per device, columns
  const std::vector<int64_t> xdims = {g * R, C};
  const mcx::Array x = make_input(xdims, rows, xval);
  auto sum_over_devices = [&](int64_t r, int64_t c, auto reduce, double init) {
    double acc = init;
    for (int d = 0; d < g; ++d) acc = reduce(acc, xval(d * R + r, c));
    return acc;
  };

  check("psum", [&] {
    auto f = mcx::shard_map([](const mcx::Array& v) { return mcx::psum(v, "i"); }, mesh, {mcx::P("i")}, {mcx::P()},
                            "psum_rows");
    return compare(f(x), {R, C}, [&](int64_t r, int64_t c) {
      return sum_over_devices(r, c, [](double a, double b) { return a + b; }, 0.0);
    });
  });
  check("pmax", [&] {
    auto f = mcx::shard_map([](const mcx::Array& v) { return mcx::pmax(v, "i"); }, mesh, {mcx::P("i")}, {mcx::P()},
                            "pmax_rows");
    return compare(f(x), {R, C}, [&](int64_t r, int64_t c) {
      return sum_over_devices(r, c, [](double a, double b) { return std::max(a, b); }, -1e30);
    });
  });
  check("pmin", [&] {
    auto f = mcx::shard_map([](const mcx::Array& v) { return mcx::pmin(v, "i"); }, mesh, {mcx::P("i")}, {mcx::P()},
                            "pmin_rows");
    return compare(f(x), {R, C}, [&](int64_t r, int64_t c) {
      return sum_over_devices(r, c, [](double a, double b) { return std::min(a, b); }, 1e30);
    });
  });
  check("pmean", [&] {
    auto f = mcx::shard_map([](const mcx::Array& v) { return mcx::pmean(v, "i"); }, mesh, {mcx::P("i")}, {mcx::P()},
                            "pmean_rows");
    return compare(
        f(x), {R, C},
        [&](int64_t r, int64_t c) { return sum_over_devices(r, c, [](double a, double b) { return a + b; }, 0.0) / g; },
        1e-6);
  });
  check("all_gather", [&] {
    auto f = mcx::shard_map([](const mcx::Array& v) { return mcx::all_gather(v, "i", 0, /*tiled=*/true); }, mesh,
                            {mcx::P("i")}, {mcx::P()}, "all_gather_rows");
    return compare(f(x), xdims, xval);
  });
  // y: G rows per device, so that psum_scatter and all_to_all split them over the G devices.
  const std::vector<int64_t> ydims = {static_cast<int64_t>(g) * g, C};
  const mcx::Array y = make_input(ydims, rows, xval);
  check("psum_scatter", [&] {
    auto f = mcx::shard_map([](const mcx::Array& v) { return mcx::psum_scatter(v, "i", 0, /*tiled=*/true); }, mesh,
                            {mcx::P("i")}, {mcx::P("i")}, "psum_scatter_rows");
    return compare(f(y), {g, C}, [&](int64_t j, int64_t c) {
      double acc = 0;
      for (int d = 0; d < g; ++d) acc += xval(static_cast<int64_t>(d) * g + j, c);
      return acc;
    });
  });
  check("all_to_all", [&] {
    auto f = mcx::shard_map([](const mcx::Array& v) { return mcx::all_to_all(v, "i", 0, 0); }, mesh, {mcx::P("i")},
                            {mcx::P("i")}, "all_to_all_rows");
    // Device d receives block d of every device s, in order of s: global row d*G + s is y[s*G + d].
    return compare(f(y), ydims, [&](int64_t row, int64_t c) { return xval((row % g) * g + row / g, c); });
  });
  check("ppermute", [&] {
    std::vector<std::pair<int, int>> perm;
    for (int d = 0; d < g; ++d) perm.push_back({d, (d + 1) % g});
    auto f = mcx::shard_map([perm](const mcx::Array& v) { return mcx::ppermute(v, "i", perm); }, mesh, {mcx::P("i")},
                            {mcx::P("i")}, "ppermute_shift");
    return compare(f(x), xdims, [&](int64_t row, int64_t c) {
      const int64_t d = row / R, src = (d + g - 1) % g;
      return xval(src * R + row % R, c);
    });
  });
  check("axis_index", [&] {
    auto f = mcx::shard_map(
        [](const mcx::Array& v) { return mcx::reshape(mcx::astype(mcx::axis_index("i"), mcx::DType::kFloat32), {1}) + 0 * mcx::sum(v); },
        mesh, {mcx::P("i")}, {mcx::P("i")}, "axis_index");
    return compare(f(x), {g}, [](int64_t row, int64_t) { return static_cast<double>(row); });
  });
  check("jit_sum", [&] {
    auto f = mcx::jit([](const mcx::Array& v) { return mcx::sum(v); }, {.name = "total", .in_shardings = {rows}});
    double total = 0;
    for (int64_t r = 0; r < g * R; ++r)
      for (int64_t c = 0; c < C; ++c) total += xval(r, c);
    mcx::Array out = f(x);
    double got = out.addressable_shards().front().data.to_host().element_as_double(0);
    return got == total ? std::string() : absl::StrCat("sum is ", got, ", expected ", total);
  });
  check("jit_matmul_contracting_sharded", [&] {
    // a [4, 2G] sharded over columns, b [2G, 3] over rows: the partial products are all-reduced.
    const mcx::Sharding cols = mcx::NamedSharding(mesh, mcx::P(mcx::None, "i"));
    const mcx::Array a = make_input({4, 2 * g}, cols, [](int64_t r, int64_t c) { return xval(r + 3, c); });
    const mcx::Array b = make_input({2 * g, 3}, rows, [](int64_t r, int64_t c) { return xval(c + 1, r); });
    auto f = mcx::jit([](const mcx::Array& u, const mcx::Array& v) { return mcx::matmul(u, v); },
                      {.name = "matmul", .in_shardings = {cols, rows},
                       .out_shardings = {mcx::NamedSharding(mesh, mcx::P())}});
    return compare(f(a, b), {4, 3}, [&](int64_t r, int64_t c) {
      double acc = 0;
      for (int64_t k = 0; k < 2 * g; ++k) acc += xval(r + 3, k) * xval(c + 1, k);
      return acc;
    });
  });
  check("reshard_to_replicated", [&] {
    auto f = mcx::jit([](const mcx::Array& v) { return v + 1; },
                      {.name = "gather_rows", .in_shardings = {rows},
                       .out_shardings = {mcx::NamedSharding(mesh, mcx::P())}});
    return compare(f(x), xdims, [](int64_t r, int64_t c) { return xval(r, c) + 1; });
  });
  if (n >= 2) {
    // device_put between the devices of process 0 and those of process n-1 (called on every process).
    std::vector<mcx::Device> first, last;
    for (const mcx::Device& d : mcx::devices()) {
      if (d.process_index == 0) first.push_back(d);
      if (d.process_index == n - 1) last.push_back(d);
    }
    const int64_t k = static_cast<int64_t>(first.size());
    const mcx::Sharding src = mcx::NamedSharding(mcx::Mesh(first, {k}, {"s"}), mcx::P("s"));
    const mcx::Sharding dst = mcx::NamedSharding(mcx::Mesh(last, {k}, {"s"}), mcx::P("s"));
    const mcx::Array a = make_input({k * R, C}, src, xval);
    check("device_put_across_processes", [&] {
      mcx::Array moved = mcx::device_put(a, dst);
      if (mcx::process_index() != n - 1) return moved.addressable_shards().empty() ? std::string() : "unexpected shards";
      return compare(moved, {k * R, C}, xval);
    });
    check("device_put_to_another_device_count", [&] {  // k devices of process 0 -> all g devices, replicated
      return compare(mcx::device_put(a, mcx::NamedSharding(mesh, mcx::P())), {k * R, C}, xval);
    });
    check("device_put_gather_onto_one_process", [&] {  // rows over all g devices -> process n-1's devices
      const mcx::Array moved = mcx::device_put(x, dst);
      if (mcx::process_index() != n - 1) return moved.addressable_shards().empty() ? std::string() : "unexpected shards";
      return compare(moved, xdims, xval);
    });
    check("device_put_reshard_is_guarded", [&]() -> std::string {  // a device-to-device transfer for the guard
      try {
        mcx::TransferGuard guard(mcx::TransferDirection::kDeviceToDevice, mcx::TransferGuardLevel::kDisallowExplicit);
        mcx::device_put(x, mcx::NamedSharding(mesh, mcx::P()));
      } catch (const mcx::TransferGuardError& e) {
        const std::string msg = e.what();
        return msg.find("device-to-device") != std::string::npos ? "" : "unexpected message: " + msg;
      }
      return "the guard did not see the transfer";
    });
  }
  // device_put between shardings of a mesh that spans the processes (JAX reshards; each against the closed form).
  check("device_put_rows_to_replicated", [&] {  // all-gather
    return compare(mcx::device_put(x, mcx::NamedSharding(mesh, mcx::P())), xdims, xval);
  });
  check("device_put_replicated_to_rows", [&] {  // slice
    const mcx::Array full = mcx::device_put(x, mcx::NamedSharding(mesh, mcx::P()));
    return compare(mcx::device_put(full, rows), xdims, xval);
  });
  check("device_put_rows_to_columns", [&] {  // all-to-all
    const std::vector<int64_t> sq = {static_cast<int64_t>(g) * R, static_cast<int64_t>(g) * 2};
    const mcx::Array v = make_input(sq, rows, xval);
    return compare(mcx::device_put(v, mcx::NamedSharding(mesh, mcx::P(mcx::None, "i"))), sq, xval);
  });
  check("device_put_onto_a_reversed_mesh", [&] {  // the same spec over the devices in reverse order
    std::vector<mcx::Device> reversed(mcx::devices().rbegin(), mcx::devices().rend());
    const mcx::Mesh back(reversed, {g}, {"i"});
    return compare(mcx::device_put(x, mcx::NamedSharding(back, mcx::P("i"))), xdims, xval);
  });
  if (g % 2 == 0) {
    check("device_put_onto_a_2d_mesh", [&] {  // rows over g -> row blocks over g/2, each on 2 devices of a 2-d mesh
      const mcx::Mesh grid = mcx::make_mesh({g / 2, 2}, {"a", "b"});
      const mcx::Array moved = mcx::device_put(x, mcx::NamedSharding(grid, mcx::P("a")));
      return compare(moved, xdims, xval);
    });
  }
  check("local_devices_of_each_process", [&] {  // jax.local_devices(process_index=p) for every process
    int total = 0;
    for (int p = 0; p < mcx::process_count(); ++p) {
      const std::vector<mcx::Device> of_p = mcx::local_devices(p);
      for (size_t i = 0; i < of_p.size(); ++i) {
        if (of_p[i].process_index != p || of_p[i].local_id != static_cast<int>(i)) {
          return absl::StrCat("process ", p, "'s device ", i, " is ", of_p[i].to_string(), " of process ",
                              of_p[i].process_index, " with local id ", of_p[i].local_id);
        }
      }
      total += static_cast<int>(of_p.size());
    }
    if (mcx::local_devices(mcx::process_index()) != mcx::local_devices()) return std::string("own devices differ");
    return total == mcx::device_count() ? std::string() : absl::StrCat(total, " devices in all, expected ", mcx::device_count());
  });
  check("after_all", [&] {  // the devices are still usable locally
    mcx::Array v = mcx::array(std::vector<float>{1, 2, 3}, {3});
    std::string s = (v * 2).to_host().to_string();
    return s == "f32[3]{2, 4, 6}" ? std::string() : "local computation gave " + s;
  });
  // Bits of a float all-reduce whose rounding depends on the order (compared by the test).
  const mcx::Array z = make_input({g * R, C}, rows, [](int64_t r, int64_t c) { return std::sin(1.0 + r * 0.37 + c) / 3; });
  auto zsum = mcx::shard_map([](const mcx::Array& v) { return mcx::psum(v, "i"); }, mesh, {mcx::P("i")}, {mcx::P()},
                             "psum_float");
  print_line("HASH psum_float " + bits_hex(zsum(z)));
}

// Process 0 launches a different computation than the others over the same mesh.
void run_mismatch(int pid, int g) {
  const mcx::Mesh mesh = mcx::make_mesh({g}, {"i"});
  const mcx::Sharding rows = mcx::NamedSharding(mesh, mcx::P("i"));
  const mcx::Array x = make_input({2 * g, 3}, rows, xval);
  auto sum_f = mcx::shard_map([](const mcx::Array& v) { return mcx::psum(v, "i"); }, mesh, {mcx::P("i")},
                              {mcx::P()}, "sum_step");
  auto max_f = mcx::shard_map([](const mcx::Array& v) { return mcx::pmax(v * 2, "i"); }, mesh, {mcx::P("i")},
                              {mcx::P()}, "max_step");
  // One matching launch first: the mismatch is then a later launch over groups already built (for GPUs over
  // NCCL, whose collectives carry no launch tag: the launch check runs before them).
  sum_f(x).block_until_ready();
  check("mismatch_detected", [&] {
    const Clock::time_point t0 = Clock::now();
    try {
      mcx::Array out = pid == 0 ? max_f(x) : sum_f(x);
      out.block_until_ready();
      return std::string("the mismatched launch completed without error");
    } catch (const mcx::Error& e) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
      print_line(absl::StrCat("NOTE mismatch error after ", ms, " ms: ", one_line(e.what())));
      if (ms > 5000) return absl::StrCat("took ", ms, " ms to fail");
      return std::string();
    }
  });
  check("after_mismatch", [&] {
    mcx::Array v = mcx::array(std::vector<float>{1, 2, 3}, {3});
    std::string s = (v * 2).to_host().to_string();
    return s == "f32[3]{2, 4, 6}" ? std::string() : "local computation gave " + s;
  });
}

// All-reduces in a loop until one fails (the test kills a peer meanwhile, or, with self_kill, the last process
// kills itself after 50 of them).
void run_kill(int g, bool self_kill) {
  const mcx::Mesh mesh = mcx::make_mesh({g}, {"i"});
  const mcx::Sharding rows = mcx::NamedSharding(mesh, mcx::P("i"));
  const mcx::Array x = make_input({static_cast<int64_t>(g) * 1024, 64}, rows, xval);
  auto f = mcx::shard_map([](const mcx::Array& v) { return mcx::psum(v, "i"); }, mesh, {mcx::P("i")}, {mcx::P()},
                          "psum_loop");
  f(x).block_until_ready();
  print_line("LOOPING");
  Clock::time_point last_ok = Clock::now();
  for (int i = 0; i < 1000000; ++i) {
    if (self_kill && i == 50 && mcx::process_index() == mcx::process_count() - 1) {
      print_line("KILLING SELF");
      std::fflush(stdout);
      std::raise(SIGKILL);
    }
    try {
      f(x).block_until_ready();
      last_ok = Clock::now();
    } catch (const mcx::Error& e) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_ok).count();
      auto* pf = dynamic_cast<const mcx::ProcessFailure*>(&e);
      print_line(absl::StrCat("SURVIVOR_ERROR ", ms, " ",
                              pf ? absl::StrCat("ProcessFailure(process=", pf->process(), " failed_devices={",
                                                absl::StrJoin(pf->failed_device_ids(), ","), "})")
                                 : "OtherError",
                              " ", one_line(e.what())));
      mcx::Array v = mcx::array(std::vector<float>{1, 2, 3}, {3});
      print_line("AFTER " + (v * 2).to_host().to_string());
      std::fflush(stdout);
      std::_Exit(0);  // the job is broken: leave without the shutdown barrier
    }
  }
}

// Median milliseconds of `reps` runs of body (after one warm-up run).
double median_ms(int reps, const std::function<void()>& body) {
  body();
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    body();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// A 64 MiB psum over the job's devices against a 64 MiB round trip to the host on this process's first device.
void run_bandwidth(int g) {
  constexpr int64_t kElements = int64_t{16} << 20;  // 64 MiB of float32 per device
  const mcx::Mesh mesh = mcx::make_mesh({g}, {"i"});
  const mcx::Array x = make_input({static_cast<int64_t>(g) * 1024, kElements / 1024}, mcx::NamedSharding(mesh, mcx::P("i")),
                                  [](int64_t r, int64_t c) { return static_cast<double>((r + c) % 7); });
  auto f = mcx::shard_map([](const mcx::Array& v) { return mcx::psum(v, "i"); }, mesh, {mcx::P("i")}, {mcx::P("i")},
                          "psum_64mib");
  const double allreduce = median_ms(5, [&] { f(x).block_until_ready(); });
  const mcx::Device& device = mcx::local_devices().front();
  const mcx::Buffer host = x.addressable_shards().front().data.to_host();
  const double roundtrip = median_ms(5, [&] {
    mcx::Array on_device = mcx::device_put(mcx::Array(host), device);
    on_device.block_until_ready();
    (void)on_device.addressable_shards().front().data.to_host();
  });
  print_line(absl::StrCat("BANDWIDTH allreduce_ms ", allreduce, " roundtrip_ms ", roundtrip, " ratio ",
                          roundtrip / allreduce));
}

// One psum of `mib` MiB of float32 per device (0: a 4-element one, the baseline for counting bytes on the wire),
// checked against its exact sum: what three_hosts_test.sh counts on the links between hosts.
void run_psum_mib(int g, int64_t mib) {
  const int64_t cols = std::max<int64_t>(4, mib * (int64_t{1} << 20) / 4);
  const mcx::Mesh mesh = mcx::make_mesh({g}, {"i"});
  const mcx::Array x = make_input({g, cols}, mcx::NamedSharding(mesh, mcx::P("i")),
                                  [](int64_t r, int64_t c) { return static_cast<double>((r + c) % 7); });
  auto f = mcx::shard_map([](const mcx::Array& v) { return mcx::psum(v, "i"); }, mesh, {mcx::P("i")}, {mcx::P("i")},
                          "psum_mib");
  const mcx::Array y = f(x);
  check(absl::StrCat("psum_", mib, "_mib"), [&] {
    return compare(y, {g, cols}, [g](int64_t, int64_t c) {
      double sum = 0;
      for (int64_t r = 0; r < g; ++r) sum += static_cast<double>((r + c) % 7);
      return sum;
    });
  });
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "all";
  // Part of a job when a launcher (mcx-run, mpirun) says so; a plain run is a single process.
  absl::StatusOr<std::optional<mcx::distributed::ClusterInfo>> cluster =
      mcx::distributed::detect_cluster(mcx::distributed::process_env());
  const bool in_job = cluster.ok() && cluster->has_value();
  try {
    mcx::distributed::InitializeOptions options;
    if (mode == "kill" || mode == "selfkill") {
      // The control plane reports the killed peer too; keep running so the data plane's error is observed.
      options.on_failure = [](const mcx::distributed::TaskFailure& f) {
        print_line(absl::StrCat("NOTE control plane: task ", f.task, " failed"));
      };
    }
    // Simulated hosts on one machine: COLLECTIVES_WORKER_PROCESSES_PER_HOST=k puts processes 0..k-1 on one "host",
    // k..2k-1 on the next, ... (MCX_HOST_ID), so the collectives across processes run hierarchically.
    if (const char* per_host = std::getenv("COLLECTIVES_WORKER_PROCESSES_PER_HOST")) {
      const char* id = std::getenv("MCX_PROCESS_ID");
      const int host = (id ? std::atoi(id) : 0) / std::max(1, std::atoi(per_host));
      setenv("MCX_HOST_ID", absl::StrCat("simulated host ", host).c_str(), 1);
    }
    if (in_job) mcx::distributed::initialize(options);
  } catch (const std::exception& e) {
    print_line(absl::StrCat("CHECK initialize FAIL ", one_line(e.what())));
    return 1;
  }
  const int n = mcx::process_count();
  const int g = mcx::device_count();
  print_line(absl::StrCat("LAYOUT ", n, " processes x ", mcx::local_device_count(), " devices = ", g));
  if (mode == "all") {
    run_all(n, g);
  } else if (mode == "mismatch") {
    run_mismatch(mcx::process_index(), g);
  } else if (mode == "kill" || mode == "selfkill") {
    run_kill(g, mode == "selfkill");
  } else if (mode == "bandwidth") {
    run_bandwidth(g);
  } else if (mode == "psum_mib") {
    run_psum_mib(g, argc > 2 ? std::atoll(argv[2]) : 16);
  } else {
    print_line("CHECK mode FAIL unknown mode " + mode);
    return 2;
  }
  if (in_job) mcx::distributed::shutdown();
  print_line(absl::StrCat("DONE ", g_checks.failures(), " failed"));
  return g_checks.failures() == 0 ? 0 : 1;
}
