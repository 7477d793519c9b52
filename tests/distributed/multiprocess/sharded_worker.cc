// sharded_worker: one process of a 2-process job (mcx-run -n 2 --cpu-devices 2 -- sharded_worker) that
// checks process-spanning devices, meshes, shardings and global arrays (sharded_arrays_test.cc runs it).
//
// It prints one line per check, "CHECK <name> OK" or "CHECK <name> FAIL <details>" (details on one
// line), "NOTE ..." lines with the error messages it observed, then "DONE <n> failed", and exits 0 when
// every check passed, 1 otherwise. The checks are independent references, not calls back into the code
// under test: the expected device list, index boxes and values are computed here from the job layout
// (2 processes x 2 CPU devices; global ids ordered by (process, local id)) and from the formula that
// fills the data. Collectives across processes run over the data plane (f_*).
//
// Every check runs under a watchdog deadline: a check that hangs (e.g. a collective across processes
// waiting for a peer that never comes) prints "CHECK <name> FAIL did not finish within ..." and ends the
// process at once with exit code 1, so the job can never hang.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/distributed/distributed.h"
#include "mcx/mcx.h"
#include "tests/distributed/multiprocess/worker_output.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kProcesses = 2;
constexpr int kLocalDevices = 2;
constexpr int kDevices = kProcesses * kLocalDevices;
constexpr int64_t kRows = 8;  // global dims {kRows, kCols}, rows split over the 4 devices
constexpr int64_t kCols = 3;
constexpr int64_t kRowsPerDevice = kRows / kDevices;
constexpr int64_t kRowsPerProcess = kRows / kProcesses;

// The value of global element (row, col) of the input: distinct for every element and exact in f32.
double input_value(int64_t row, int64_t col) { return 100.0 * static_cast<double>(row) + static_cast<double>(col); }
double affine_value(int64_t row, int64_t col) { return 2.0 * input_value(row, col) + 1.0; }


using mcx::mptest::one_line;
using mcx::mptest::print_line;

// Ends the process (exit 1) when the armed deadline passes. Joined by its destructor.
class Watchdog {
 public:
  Watchdog() : thread_([this] { run(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void arm(const std::string& what, std::chrono::milliseconds limit) {
    std::lock_guard<std::mutex> lock(mu_);
    what_ = what;
    limit_ = limit;
    deadline_ = Clock::now() + limit;
    armed_ = true;
    cv_.notify_all();
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (armed_ && Clock::now() >= deadline_) {
        print_line(absl::StrCat("CHECK ", what_, " FAIL did not finish within ", limit_.count(),
                                " ms (hang?); ending the process"));
        std::_Exit(1);  // the stuck work cannot be joined; leave without running destructors
      }
      cv_.wait_for(lock, std::chrono::milliseconds(50));
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool armed_ = false;
  std::string what_;
  std::chrono::milliseconds limit_{0};
  Clock::time_point deadline_;
  std::thread thread_;  // last: started after the state above is initialised
};

class Checker {
 public:
  explicit Checker(Watchdog& watchdog) : watchdog_(watchdog) {}

  // Runs body under a deadline; body returns "" for success or what went wrong. Exceptions are failures.
  bool run(const std::string& name, std::chrono::milliseconds limit, const std::function<std::string()>& body) {
    watchdog_.arm(name, limit);
    std::string problem;
    try {
      problem = body();
    } catch (const mcx::Error& e) {
      problem = absl::StrCat("unexpected mcx::Error (", absl::StatusCodeToString(e.code()), "): ", e.what());
    } catch (const std::exception& e) {
      problem = absl::StrCat("unexpected exception: ", e.what());
    }
    watchdog_.disarm();
    if (problem.empty()) {
      print_line("CHECK " + name + " OK");
      return true;
    }
    print_line("CHECK " + name + " FAIL " + one_line(problem));
    ++failures_;
    return false;
  }
  // A check that cannot run because an earlier one failed.
  void skip(const std::string& name, const std::string& why) {
    print_line("CHECK " + name + " FAIL not run: " + why);
    ++failures_;
  }
  int failures() const { return failures_; }

 private:
  Watchdog& watchdog_;
  int failures_ = 0;
};

// Collects mismatches: expect(cond, what) appends `what` when cond is false.
class Problems {
 public:
  void expect(bool cond, const std::string& what) {
    if (!cond) list_.push_back(what);
  }
  std::string str() const { return absl::StrJoin(list_, "; "); }

 private:
  std::vector<std::string> list_;
};

std::string dims_str(const std::vector<int64_t>& d) { return absl::StrCat("[", absl::StrJoin(d, ","), "]"); }

// The box of global indices device `global_id` holds under P("data") on the 4-device mesh.
mcx::IndexBox device_box(int global_id) {
  return mcx::IndexBox{{global_id * kRowsPerDevice, 0}, {(global_id + 1) * kRowsPerDevice, kCols}};
}

// Checks that a's addressable shards are this process's two devices, with the P("data") boxes, and hold
// value(row, col) of the global array.
std::string check_shards(const mcx::Array& a, int pid, const std::function<double(int64_t, int64_t)>& value) {
  Problems p;
  std::vector<mcx::ArrayShard> shards = a.addressable_shards();
  if (shards.size() != static_cast<size_t>(kLocalDevices)) {
    return absl::StrCat("addressable_shards() has ", shards.size(), " shards, expected ", kLocalDevices);
  }
  for (int k = 0; k < kLocalDevices; ++k) {
    const mcx::ArrayShard& s = shards[k];
    int gid = pid * kLocalDevices + k;
    mcx::IndexBox want = device_box(gid);
    p.expect(s.device.global_id == gid && s.device.process_index == pid,
             absl::StrCat("shard ", k, " is on ", s.device.to_string(), " of process ", s.device.process_index,
                          ", expected global id ", gid, " of process ", pid));
    p.expect(s.index == want,
             absl::StrCat("shard ", k, " index ", s.index.to_string(), ", expected ", want.to_string()));
    mcx::Buffer b = s.data.to_host();
    if (b.dims() != std::vector<int64_t>{kRowsPerDevice, kCols}) {
      p.expect(false, absl::StrCat("shard ", k, " data dims ", dims_str(b.dims()), ", expected [", kRowsPerDevice, ",",
                                   kCols, "]"));
      continue;
    }
    for (int64_t r = 0; r < kRowsPerDevice; ++r) {
      for (int64_t c = 0; c < kCols; ++c) {
        int64_t row = want.start[0] + r;
        double got = b.element_as_double(r * kCols + c);
        double exp = value(row, c);
        p.expect(got == exp, absl::StrCat("shard ", k, " element (", r, ",", c, ") = global (", row, ",", c, ") is ",
                                          got, ", expected ", exp));
      }
    }
  }
  return p.str();
}

// Checks that fn throws FailedPrecondition naming every index box held by the other process.
std::string expect_missing_boxes(const std::string& what, int pid, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const mcx::Error& e) {
    Problems p;
    std::string msg = e.what();
    print_line("NOTE " + what + ": " + one_line(msg));
    p.expect(e.code() == absl::StatusCode::kFailedPrecondition,
             absl::StrCat(what, " threw ", absl::StatusCodeToString(e.code()), ", expected FAILED_PRECONDITION"));
    for (int g = 0; g < kDevices; ++g) {
      if (g / kLocalDevices == pid) continue;
      std::string box = device_box(g).to_string();
      p.expect(msg.find(absl::StrCat(box, " (held by cpu:", g, ", process ", g / kLocalDevices, ")")) != std::string::npos,
               absl::StrCat(what, "'s message does not name the missing box ", box, " with cpu device ", g,
                            " and its process"));
    }
    p.expect(msg.rfind("[", 0) == 0, what + "'s message does not start with \"[api] \"");
    if (!p.str().empty()) return p.str() + " -- message: " + msg;
    return "";
  }
  return what + " returned without error, but this process lacks half of the array";
}

// The scalar a computation reduced over the whole input, as every process must see it (a collective across
// processes, through the data plane).
std::string expect_total(const std::string& what, const mcx::Array& out) {
  double want = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) want += input_value(r, c);
  }
  std::vector<mcx::ArrayShard> shards = out.addressable_shards();
  if (shards.size() != static_cast<size_t>(kLocalDevices)) {
    return absl::StrCat(what, " has ", shards.size(), " addressable shards, expected ", kLocalDevices);
  }
  for (const mcx::ArrayShard& s : shards) {
    double got = s.data.to_host().element_as_double(0);
    if (got != want) return absl::StrCat(what, " on ", s.device.to_string(), " is ", got, ", expected ", want);
  }
  return "";
}

int run_checks(Checker& check, int pid) {
  using std::chrono::milliseconds;
  const milliseconds kQuick(10000);

  // (a) Devices of the job and of this process.
  check.run("a_devices", kQuick, [&] {
    Problems p;
    const std::vector<mcx::Device>& all = mcx::devices();
    std::vector<std::string> names;
    for (const auto& d : all) names.push_back(absl::StrCat(d.to_string(), "@p", d.process_index));
    if (all.size() != static_cast<size_t>(kDevices)) {
      return absl::StrCat("devices() has ", all.size(), " devices (", absl::StrJoin(names, " "), "), expected ",
                          kDevices);
    }
    p.expect(mcx::device_count() == kDevices, absl::StrCat("device_count() is ", mcx::device_count()));
    p.expect(mcx::local_device_count() == kLocalDevices,
             absl::StrCat("local_device_count() is ", mcx::local_device_count()));
    p.expect(mcx::process_count() == kProcesses, absl::StrCat("process_count() is ", mcx::process_count()));
    p.expect(mcx::process_index() == pid,
             absl::StrCat("process_index() is ", mcx::process_index(), ", expected ", pid));
    for (int i = 0; i < kDevices; ++i) {
      const mcx::Device& d = all[i];
      p.expect(d.global_id == i, absl::StrCat("devices()[", i, "].global_id is ", d.global_id));
      p.expect(d.process_index == i / kLocalDevices,
               absl::StrCat("devices()[", i, "].process_index is ", d.process_index, ", expected ", i / kLocalDevices));
      p.expect(d.local_id == i % kLocalDevices,
               absl::StrCat("devices()[", i, "].local_id is ", d.local_id, ", expected ", i % kLocalDevices));
      p.expect(d.is_addressable() == (i / kLocalDevices == pid),
               absl::StrCat("devices()[", i, "].is_addressable() is ", d.is_addressable()));
    }
    const std::vector<mcx::Device>& local = mcx::local_devices();
    if (local.size() != static_cast<size_t>(kLocalDevices)) {
      p.expect(false, absl::StrCat("local_devices() has ", local.size(), " devices"));
    } else {
      for (int k = 0; k < kLocalDevices; ++k) {
        p.expect(local[k] == all[pid * kLocalDevices + k] && local[k].local_id == k,
                 absl::StrCat("local_devices()[", k, "] is ", local[k].to_string(), " (global ", local[k].global_id,
                              "), expected global ", pid * kLocalDevices + k));
      }
    }
    p.expect(mcx::default_device() == all[pid * kLocalDevices],
             "default_device() is " + mcx::default_device().to_string());
    return p.str();
  });

  // (b) A mesh over both processes and the index maths of a sharding over it.
  std::optional<mcx::Mesh> mesh;
  std::optional<mcx::Sharding> rows;
  const std::vector<int64_t> dims = {kRows, kCols};
  check.run("b_mesh_and_sharding", kQuick, [&] {
    Problems p;
    mesh = mcx::make_mesh({kDevices}, {"data"});
    rows = mcx::NamedSharding(*mesh, mcx::P("data"));
    p.expect(mesh->devices() == mcx::devices(), "mesh devices are " + mesh->to_string());
    p.expect(!mesh->is_fully_addressable(), "mesh.is_fully_addressable() is true for a mesh over 2 processes");
    p.expect(!rows->is_fully_addressable(), "sharding.is_fully_addressable() is true");
    p.expect(!rows->is_fully_replicated(), "sharding.is_fully_replicated() is true");
    p.expect(rows->shard_shape(dims) == std::vector<int64_t>{kRowsPerDevice, kCols},
             "shard_shape is " + dims_str(rows->shard_shape(dims)));
    auto all_map = rows->devices_indices_map(dims);
    p.expect(all_map.size() == static_cast<size_t>(kDevices),
             absl::StrCat("devices_indices_map has ", all_map.size(), " boxes, expected ", kDevices));
    for (size_t i = 0; i < all_map.size() && i < static_cast<size_t>(kDevices); ++i) {
      const auto& [dev, box] = all_map[i];
      p.expect(dev.global_id == static_cast<int>(i) && box == device_box(static_cast<int>(i)),
               absl::StrCat("devices_indices_map[", i, "] is ", dev.to_string(), " -> ", box.to_string(),
                            ", expected global ", i, " -> ", device_box(static_cast<int>(i)).to_string()));
    }
    auto mine = rows->addressable_devices_indices_map(dims);
    p.expect(mine.size() == static_cast<size_t>(kLocalDevices),
             absl::StrCat("addressable_devices_indices_map has ", mine.size(), " boxes, expected ", kLocalDevices));
    int64_t covered_lo = kRows, covered_hi = 0;
    for (size_t k = 0; k < mine.size() && k < static_cast<size_t>(kLocalDevices); ++k) {
      const auto& [dev, box] = mine[k];
      int gid = pid * kLocalDevices + static_cast<int>(k);
      p.expect(dev.global_id == gid && dev.process_index == pid && box == device_box(gid),
               absl::StrCat("addressable_devices_indices_map[", k, "] is ", dev.to_string(), " of process ",
                            dev.process_index, " -> ", box.to_string(), ", expected global ", gid, " -> ",
                            device_box(gid).to_string()));
      covered_lo = std::min(covered_lo, box.start[0]);
      covered_hi = std::max(covered_hi, box.limit[0]);
    }
    p.expect(covered_lo == pid * kRowsPerProcess && covered_hi == (pid + 1) * kRowsPerProcess,
             absl::StrCat("this process's boxes cover rows ", covered_lo, ":", covered_hi, ", expected ",
                          pid * kRowsPerProcess, ":", (pid + 1) * kRowsPerProcess));
    return p.str();
  });
  if (!rows) {
    for (const char* n :
         {"c_process_local_data", "d_jit_elementwise", "e_device_get_partial", "g_thread_guard",
          "f_jit_sum_across_processes", "f_shard_map_psum_across_processes", "f_jit_grad_of_shard_map_across_processes",
          "f_exported_call_across_processes",
          "h_after_collectives"}) {
      check.skip(n, "no sharding from b_mesh_and_sharding");
    }
    return check.failures();
  }

  // (c) A global array from this process's rows.
  std::optional<mcx::Array> x;
  check.run("c_process_local_data", kQuick, [&] {
    Problems p;
    std::vector<float> local;
    for (int64_t r = 0; r < kRowsPerProcess; ++r) {
      for (int64_t c = 0; c < kCols; ++c)
        local.push_back(static_cast<float>(input_value(pid * kRowsPerProcess + r, c)));
    }
    mcx::Buffer local_buf = mcx::Buffer::from_vector<float>(local, {kRowsPerProcess, kCols});
    mcx::Array a = mcx::make_array_from_process_local_data(*rows, local_buf, dims);
    p.expect(a.dims() == dims, "global dims are " + dims_str(a.dims()));
    p.expect(a.dtype() == mcx::DType::kFloat32, "dtype is not f32");
    p.expect(a.sharding() == *rows, "sharding is " + a.sharding().to_string());
    p.expect(!a.is_fully_addressable(), "is_fully_addressable() is true");
    std::string shards = check_shards(a, pid, input_value);
    p.expect(shards.empty(), shards);
    // Global dims inferred from the local data (rows are split across the 2 processes).
    mcx::Array inferred = mcx::make_array_from_process_local_data(*rows, local_buf);
    p.expect(inferred.dims() == dims, "inferred global dims are " + dims_str(inferred.dims()));
    std::string inferred_shards = check_shards(inferred, pid, input_value);
    p.expect(inferred_shards.empty(), "inferred: " + inferred_shards);
    if (a.dims() == dims) x = a;  // later checks can still run when only values are wrong
    return p.str();
  });

  // (d) jit of an elementwise function over the spanning sharding: no communication needed.
  auto affine = mcx::jit([](const mcx::Array& v) { return v * 2 + 1; }, {.name = "affine", .in_shardings = {*rows}});
  std::optional<mcx::Array> y;
  if (x) {
    check.run("d_jit_elementwise", kQuick, [&] {
      Problems p;
      mcx::Array out = affine(*x);
      out.block_until_ready();
      p.expect(out.dims() == dims, "result dims are " + dims_str(out.dims()));
      p.expect(out.sharding().equivalent(*rows, dims), "result sharding is " + out.sharding().to_string());
      std::string shards = check_shards(out, pid, affine_value);
      p.expect(shards.empty(), shards);
      if (p.str().empty()) y = out;
      return p.str();
    });
  } else {
    check.skip("d_jit_elementwise", "no array from c_process_local_data");
  }

  // (e) Reading the whole value of a partial array names what is missing.
  if (y) {
    check.run("e_device_get_partial", kQuick, [&] {
      Problems p;
      std::string a = expect_missing_boxes("device_get", pid, [&] { mcx::device_get(*y); });
      std::string b = expect_missing_boxes("to_host", pid, [&] { y->to_host(); });
      std::string c = expect_missing_boxes("device_get of the input", pid, [&] { mcx::device_get(*x); });
      p.expect(a.empty(), a);
      p.expect(b.empty(), b);
      p.expect(c.empty(), c);
      return p.str();
    });
  } else {
    check.skip("e_device_get_partial", "no array from d_jit_elementwise");
  }

  // (g) Thread guard: only the guarded thread may issue process-spanning computations.
  if (x) {
    check.run("g_thread_guard", kQuick, [&] {
      Problems p;
      mcx::Array local_value = mcx::array(std::vector<float>{1, 2, 3}, {3});  // runs on one local device
      {
        mcx::ThreadGuard guard;
        const std::string main_desc = mcx::current_thread_description();
        std::string other_desc, caught, local_result;
        bool threw_guard_error = false;
        std::thread other([&] {
          other_desc = mcx::current_thread_description();
          try {
            mcx::Array r = affine(*x);
            r.block_until_ready();
            caught = "no error";
          } catch (const mcx::ThreadGuardError& e) {
            threw_guard_error = true;
            caught = e.what();
          } catch (const std::exception& e) {
            caught = absl::StrCat("a different exception: ", e.what());
          }
          // A computation that does not span processes is never checked.
          try {
            local_result =
                mcx::jit([](const mcx::Array& v) { return v * 2 + 1; }, {.name = "local_affine"})(local_value)
                    .to_host()
                    .to_string();
          } catch (const std::exception& e) {
            local_result = absl::StrCat("threw: ", e.what());
          }
        });
        other.join();
        p.expect(threw_guard_error, "the spanning jit from another thread did not throw ThreadGuardError: " + caught);
        if (threw_guard_error) {
          print_line("NOTE thread guard: " + one_line(caught));
          p.expect(caught.find(main_desc) != std::string::npos,
                   "the error does not name the guarded thread (" + main_desc + "): " + caught);
          p.expect(caught.find(other_desc) != std::string::npos,
                   "the error does not name the calling thread (" + other_desc + "): " + caught);
        }
        p.expect(local_result == "f32[3]{3, 5, 7}",
                 "a single-process jit from another thread under the guard gave " + local_result);
        // From the guarded thread the same computation runs.
        mcx::Array in_main = affine(*x);
        in_main.block_until_ready();
        std::string shards = check_shards(in_main, pid, affine_value);
        p.expect(shards.empty(), "from the guarded thread: " + shards);
      }
      // Once the guard is released, any thread may issue it again.
      std::string after;
      std::thread later([&] {
        try {
          mcx::Array r = affine(*x);
          r.block_until_ready();
          after = check_shards(r, pid, affine_value);
        } catch (const std::exception& e) {
          after = absl::StrCat("threw: ", e.what());
        }
      });
      later.join();
      p.expect(after.empty(), "from another thread after the guard was released: " + after);
      return p.str();
    });
  } else {
    check.skip("g_thread_guard", "no array from c_process_local_data");
  }

  // (f) Computations needing a collective across processes run over the data plane (collectives_test.cc
  // covers every collective; these two are the paths a user takes first).
  if (x) {
    check.run("f_jit_sum_across_processes", kQuick, [&] {
      auto total =
          mcx::jit([](const mcx::Array& v) { return mcx::sum(v); }, {.name = "total", .in_shardings = {*rows}});
      return expect_total("jit of sum over the sharded rows", total(*x));
    });
    check.run("f_shard_map_psum_across_processes", kQuick, [&] {
      auto total = mcx::shard_map([](const mcx::Array& v) { return mcx::psum(mcx::sum(v), "data"); }, *mesh,
                                  {mcx::P("data")}, {mcx::P()}, "psum_total");
      return expect_total("shard_map with psum over 'data'", total(*x));
    });
    // A shard_map inside jit(grad): the gradient of psum(sum(v * v)) / 2 over the rows is x itself; its total
    // (another computation across the processes) is x's.
    check.run("f_jit_grad_of_shard_map_across_processes", kQuick, [&] {
      auto half_square = mcx::shard_map(
          [](const mcx::Array& v) { return mcx::psum(mcx::sum(v * v), "data") * 0.5f; }, *mesh, {mcx::P("data")},
          {mcx::P()}, "half_square");
      mcx::Array g = mcx::jit(mcx::grad([&](const mcx::Array& v) { return half_square(v); }))(*x);
      auto total = mcx::jit([](const mcx::Array& v) { return mcx::sum(v); }, {.name = "total", .in_shardings = {*rows}});
      return expect_total("the total of jit(grad) of a shard_map (x itself)", total(g));
    });
    // An artifact exported for 4 devices (rows over "data"), after a serialized round trip, runs on the job's
    // mesh spanning both processes (its sum needs the data plane).
    check.run("f_exported_call_across_processes", kQuick, [&] {
      const mcx::exporting::ShardingSpec by_rows{false, {"data"}, {kDevices}, {{"data"}}};
      mcx::ExportOptions options{.name = "total", .in_shardings = {by_rows}, .nr_devices = kDevices};
      const mcx::Exported exported = mcx::Exported::deserialize(
          mcx::export_fn([](const mcx::Array& v) { return mcx::sum(v); }, options)(
              mcx::AbstractValue{mcx::DType::kFloat32, mcx::concrete_shape({kRows, kCols})})
              .serialize());
      return expect_total("the exported sum over the sharded rows", exported.call(*x).at(0));
    });
    // Local work after the collectives.
    check.run("h_after_collectives", kQuick, [&] {
      mcx::Array r = affine(*x);
      r.block_until_ready();
      return check_shards(r, pid, affine_value);
    });
  } else {
    for (const char* n :
         {"f_jit_sum_across_processes", "f_shard_map_psum_across_processes", "f_jit_grad_of_shard_map_across_processes",
          "f_exported_call_across_processes",
          "h_after_collectives"}) {
      check.skip(n, "no array from c_process_local_data");
    }
  }
  return check.failures();
}

}  // namespace

int main() {
  Watchdog watchdog;
  Checker check(watchdog);
  const char* id = std::getenv("MCX_PROCESS_ID");
  const int pid = id == nullptr ? -1 : std::atoi(id);
  bool initialized = check.run("initialize", std::chrono::milliseconds(30000), [&] {
    if (pid < 0 || pid >= kProcesses) {
      return absl::StrCat("MCX_PROCESS_ID is ", id == nullptr ? "unset" : id,
                          ", expected 0 or 1 (run under mcx-run -n 2)");
    }
    mcx::distributed::initialize();
    return std::string();
  });
  if (initialized) {
    run_checks(check, pid);
    check.run("shutdown", std::chrono::milliseconds(30000), [] {
      mcx::distributed::shutdown();
      return std::string();
    });
  }
  print_line(absl::StrCat("DONE ", check.failures(), " failed"));
  return check.failures() == 0 ? 0 : 1;
}
