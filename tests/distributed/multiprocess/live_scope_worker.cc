// live_scope_worker: mcx::with_live_devices across failures (live_scope_test.cc). One process per device, a
// recoverable job; every scope sums each live device's id + 1 over a mesh of the live devices.
//
//   live_scope_worker die-after-body V   process V finishes the body of scope 2 (its sum included) and then
//                                        dies before the exit agreement: every survivor's body succeeded, yet
//                                        every survivor must raise ProcessFailure naming V; the retry runs on
//                                        the survivors.
//   live_scope_worker raise-in-body E    process E throws before the sum in scope 2: the others, waiting for it
//                                        in the sum, must fail promptly (not at the collective's deadline), and
//                                        every process raises the same error; scope 3 then succeeds on all.
//   live_scope_worker rejoin V           process V dies in scope 2's body; the survivors retry and keep running
//                                        scopes until a restarted V (started by the test) joins; everyone
//                                        then runs one scope on the full set.
// Prints "SCOPE <k> ok generation=<g> processes=<p,...> sum=<s>", "SCOPE <k> raised <kind> process=<p>
// after=<seconds> what=<message>", then "DONE".
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
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

float live_sum(const mcx::LiveDevices& live) {
  const mcx::Mesh mesh = mcx::make_mesh({static_cast<int64_t>(live.devices.size())}, {"i"}, live.devices);
  const mcx::Sharding rows = mcx::NamedSharding(mesh, mcx::P("i"));
  mcx::Array x = mcx::make_array_from_callback(
      {static_cast<int64_t>(live.devices.size())}, mcx::DType::kFloat32, rows, [&](const mcx::IndexBox& box) {
        std::vector<float> v;
        for (int64_t r = box.start[0]; r < box.limit[0]; ++r) {
          v.push_back(static_cast<float>(live.devices[r].global_id + 1));
        }
        return mcx::Buffer::from_vector<float>(v, box.shape());
      });
  auto total = mcx::shard_map([](const mcx::Array& v) { return mcx::psum(v, "i"); }, mesh, {mcx::P("i")},
                              {mcx::P()}, "live_sum");
  return total(x).addressable_shards().front().data.to_vector<float>().front();
}

struct Result {
  float sum;
  mcx::LiveDevices live;
};

// Runs scope k; returns whether it completed.
bool scope(int k, const std::function<void(const mcx::LiveDevices&)>& before_sum = nullptr,
           const std::function<void()>& after_sum = nullptr, Result* out = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  auto after = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  try {
    Result r = mcx::with_live_devices(
        mcx::devices(),
        [&](const mcx::LiveDevices& live) {
          if (before_sum) before_sum(live);
          Result res{live_sum(live), live};
          if (after_sum) after_sum();
          return res;
        },
        absl::Seconds(20));
    print_line(absl::StrCat("SCOPE ", k, " ok generation=", r.live.generation,
                            " processes=", absl::StrJoin(r.live.processes, ","), " sum=", r.sum));
    if (out) *out = r;
    return true;
  } catch (const mcx::ProcessFailure& e) {
    print_line(absl::StrCat("SCOPE ", k, " raised ProcessFailure process=", e.process(), " after=", after(),
                            " what=", one_line(e.what())));
  } catch (const mcx::Error& e) {
    print_line(absl::StrCat("SCOPE ", k, " raised Error code=", static_cast<int>(e.code()), " after=", after(),
                            " what=", one_line(e.what())));
  } catch (const std::exception& e) {
    print_line(absl::StrCat("SCOPE ", k, " raised std::exception after=", after(), " what=", one_line(e.what())));
  }
  return false;
}

void die() {
  print_line("DYING");
  std::raise(SIGKILL);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    print_line("usage: live_scope_worker die-after-body|raise-in-body|rejoin PROCESS");
    return 2;
  }
  const std::string mode = argv[1];
  const int who = std::atoi(argv[2]);
  try {
    mcx::distributed::InitializeOptions options;
    options.on_failure = [](const mcx::distributed::TaskFailure&) {};  // recoverable: the scopes report it
    mcx::distributed::initialize(options);
    const int me = mcx::process_index();
    const bool restarted = std::getenv("LIVE_SCOPE_RESTARTED") != nullptr;
    if (mode == "die-after-body") {
      scope(1);
      scope(2, nullptr, [&] {
        if (me == who) die();
      });
      scope(3);
    } else if (mode == "raise-in-body") {
      scope(1);
      scope(2, [&](const mcx::LiveDevices&) {
        if (me == who) throw std::runtime_error("a bad batch on purpose");
      });
      scope(3);
    } else if (mode == "rejoin") {
      if (!restarted) {
        scope(1);
        scope(2, [&](const mcx::LiveDevices&) {
          if (me == who) die();
        });
      }
      // Run scopes until the live set is the whole job again (the restarted process's first scope is the
      // others' exit agreement), then one more on the full set (the same one on every process).
      Result r;
      for (int k = 3; k < 2000; ++k) {
        if (scope(k, nullptr, nullptr, &r) && static_cast<int>(r.live.processes.size()) == mcx::process_count()) {
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      print_line(absl::StrCat("FULL generation=", r.live.generation, " processes=",
                              absl::StrJoin(r.live.processes, ","), " sum=", r.sum));
    } else {
      print_line("unknown mode " + mode);
      return 2;
    }
    print_line("DONE");
    std::_Exit(0);  // a member died: leave without the shutdown of a full job
  } catch (const std::exception& e) {
    print_line(absl::StrCat("ERROR ", one_line(e.what())));
    std::_Exit(1);
  }
}
