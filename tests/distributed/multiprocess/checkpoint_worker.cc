// checkpoint_worker: one process of an N-process job (mcx-run -n N --cpu-devices 2 -- checkpoint_worker MODE
// ROOT) saving and restoring a checkpoint of a state whose values follow from the element index alone, so any
// process count can check any other's checkpoint bit for bit (checkpoint_mp_test.cc, and
// tests/checkpoint/numpy_readback.py reads the same values with numpy alone).
// Prints "CHECK <name> OK|FAIL <details>" lines, then "DONE <failures> failed".
// Modes:
//   save ROOT      saves step 1 (save) and step 2 (save_async + wait), then restores both on three layouts
//   restore ROOT   restores steps 1 and 2 on three layouts of this job's devices
//   crash ROOT     saves step 1; then the last process is killed (SIGKILL) while the others save step 2
//   resume ROOT    after "crash": step 1 is the latest and intact, the partial step 2 is ignored; saves step 2
//                  again (which removes the partial directory) and restores it
//   prepfail ROOT  the last process passes invalid metadata to save(1) and process 0 to save_async(2): every
//                  process fails each save within 5 s (not the 20 s timeout), naming the process that failed;
//                  then save(3) commits on all and restores
//   survive ROOT   (3 processes, mcx-run --recoverable) the last process dies before anything; the survivors
//                  agree on the live set and save (sync and async) without calling set_processes, each commit
//                  within 5 s (not the 20 s timeout); then process 0, the saves' leader, dies while process 1
//                  waits for its directory: that save fails within 8 s naming it, and after the next agreement
//                  process 1 saves alone (now the leader) and restores
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/checkpoint/checkpoint_manager.h"
#include "mcx/distributed/distributed.h"
#include "mcx/mcx.h"
#include "mcx/multihost/live_devices.h"
#include "mcx/multihost/multihost.h"
#include "mcx/runtime/box_copy.h"
#include "tests/distributed/multiprocess/worker_output.h"

namespace {

namespace ckpt = mcx::checkpoint;
using mcx::Buffer;
using mcx::DType;
using mcx::None;
using mcx::P;
using mcx::mptest::print_line;

mcx::mptest::Checks g_checks;

// element i of a leaf: w = i/4 - 7 (f32), b = 1.5 i (f32), p = 7 i - 100 (i32), e = i/3 (f64), step = 42 (i64).
Buffer expected(const std::string& name) {
  auto fill = [](DType dt, std::vector<int64_t> dims, const std::function<double(int64_t)>& f) {
    Buffer b = Buffer::uninitialized(dt, dims);
    for (int64_t i = 0; i < b.num_elements(); ++i) {
      const double v = f(i);
      switch (dt) {
        case DType::kFloat32: b.mutable_data<float>()[i] = static_cast<float>(v); break;
        case DType::kFloat64: b.mutable_data<double>()[i] = v; break;
        case DType::kInt32: b.mutable_data<int32_t>()[i] = static_cast<int32_t>(v); break;
        case DType::kInt64: b.mutable_data<int64_t>()[i] = static_cast<int64_t>(v); break;
        default: break;
      }
    }
    return b;
  };
  if (name == "w") return fill(DType::kFloat32, {48, 24}, [](int64_t i) { return static_cast<double>(i) / 4 - 7; });
  if (name == "b") return fill(DType::kFloat32, {24}, [](int64_t i) { return 1.5 * static_cast<double>(i); });
  if (name == "p") return fill(DType::kInt32, {24, 24}, [](int64_t i) { return 7.0 * static_cast<double>(i) - 100; });
  if (name == "e") return fill(DType::kFloat64, {24, 12}, [](int64_t i) { return static_cast<double>(i) / 3; });
  return fill(DType::kInt64, {}, [](int64_t) { return 42; });
}

// Layouts over this job's D = 2N devices: 0 is the one saved (w split on rows over {D}, b and step
// replicated, p split on x and replicated on y of {D/2, 2} (partially replicated), e split on y);
// 1 transposes the splits; 2 uses a {2, D/2} mesh.
mcx::Tree state(int layout) {
  const int64_t d = mcx::device_count();
  const mcx::Mesh line = mcx::make_mesh({d}, {"x"});
  const mcx::Mesh grid = layout == 2 ? mcx::make_mesh({2, d / 2}, {"x", "y"}) : mcx::make_mesh({d / 2, 2}, {"x", "y"});
  auto put = [](const std::string& name, const mcx::Mesh& m, mcx::PartitionSpec spec) {
    return mcx::make_array_from_callback(expected(name).dims(), expected(name).dtype(), mcx::NamedSharding(m, spec),
                                         [&](const mcx::IndexBox& box) {
                                           const Buffer full = expected(name);
                                           return mcx::extract_box(full, mcx::full_box(full.dims()), box);
                                         });
  };
  switch (layout) {
    case 0:
      return mcx::Tree{{"params", mcx::Tree{{"w", put("w", line, P("x", None))}, {"b", put("b", line, P())}}},
                       {"opt", mcx::Tree{mcx::Tree::List{put("p", grid, P("x", None)), put("e", grid, P(None, "y"))}}},
                       {"step", put("step", line, P())}};
    case 1:
      return mcx::Tree{{"params", mcx::Tree{{"w", put("w", line, P(None, "x"))}, {"b", put("b", line, P("x"))}}},
                       {"opt", mcx::Tree{mcx::Tree::List{put("p", grid, P("y", "x")), put("e", grid, P("x", None))}}},
                       {"step", put("step", grid, P())}};
    default:
      return mcx::Tree{{"params", mcx::Tree{{"w", put("w", grid, P("x", "y"))}, {"b", put("b", grid, P("y"))}}},
                       {"opt", mcx::Tree{mcx::Tree::List{put("p", grid, P("y", "x")), put("e", grid, P("x", "y"))}}},
                       {"step", put("step", grid, P())}};
  }
}

// The layout-0 leaves w (split on rows) and b (replicated) over a line mesh of `devices` (the live ones).
mcx::Tree live_state(const std::vector<mcx::Device>& devices) {
  const mcx::Mesh line = mcx::make_mesh({static_cast<int64_t>(devices.size())}, {"x"}, devices);
  auto put = [&](const std::string& name, mcx::PartitionSpec spec) {
    const Buffer full = expected(name);
    return mcx::make_array_from_callback(full.dims(), full.dtype(), mcx::NamedSharding(line, spec),
                                         [&](const mcx::IndexBox& box) {
                                           return mcx::extract_box(full, mcx::full_box(full.dims()), box);
                                         });
  };
  return mcx::Tree{{"w", put("w", P("x", None))}, {"b", put("b", P())}};
}

// "" when the addressable shards of `t` (w and b only, or the whole state) equal the expected values.
std::string compare_leaves(const std::vector<std::pair<std::string, mcx::Array>>& leaves) {
  for (const auto& [name, a] : leaves) {
    const Buffer full = expected(name);
    for (const mcx::ArrayShard& s : a.addressable_shards()) {
      const Buffer want = mcx::extract_box(full, mcx::full_box(full.dims()), s.index);
      if (!s.data.to_host().bitwise_equal(want)) {
        return absl::StrCat("leaf ", name, " box ", s.index.to_string(), " on ", s.device.to_string(), " differs");
      }
    }
  }
  return "";
}

// Runs body and returns "" when it took at most `limit_s` seconds, else says how long.
std::string within(double limit_s, const std::function<void()>& body) {
  const auto t0 = std::chrono::steady_clock::now();
  body();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s <= limit_s ? "" : absl::StrCat("took ", s, " s (expected at most ", limit_s, " s)");
}

// "" when every addressable shard of every leaf equals the expected values bit for bit.
std::string compare(const mcx::Tree& t) {
  const std::vector<std::pair<std::string, mcx::Array>> leaves = {
      {"w", t.at("params").at("w")}, {"b", t.at("params").at("b")}, {"p", t.at("opt").at(0)},
      {"e", t.at("opt").at(1)}, {"step", t.at("step")}};
  return compare_leaves(leaves);
}

void check(const std::string& name, const std::function<std::string()>& body) { g_checks.run(name, body); }

void restore_all(ckpt::CheckpointManager& m, const std::vector<int64_t>& steps) {
  for (int64_t step : steps) {
    for (int layout = 0; layout < 3; ++layout) {
      check(absl::StrCat("restore_step", step, "_layout", layout),
            [&] { return compare(m.restore(step, state(layout))); });
    }
    check(absl::StrCat("metadata_step", step), [&]() -> std::string {
      const std::string md = m.info(step).metadata_json;
      const std::string want = absl::StrCat("\"step\":", step);
      return md.find(want) == std::string::npos ? "metadata " + md + " lacks " + want : "";
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: checkpoint_worker save|restore|crash|resume ROOT\n");
    return 2;
  }
  const std::string mode = argv[1], root = argv[2];
  try {
    mcx::distributed::initialize();
  } catch (const std::exception& e) {
    print_line(absl::StrCat("CHECK initialize FAIL ", mcx::mptest::one_line(e.what())));
    return 1;
  }
  const int pid = mcx::process_index(), n = mcx::process_count();
  ckpt::CheckpointManager m(root, {.max_to_keep = 3, .timeout = absl::Seconds(20)});
  if (mode == "save") {
    check("save_step1", [&] {
      m.save(1, state(0), R"({"step":1,"iterator":{"position":1024}})");
      return std::string();
    });
    check("save_async_step2", [&] {
      m.save_async(2, state(0), R"({"step":2})");
      m.wait();
      return std::string();
    });
    check("steps", [&] { return m.all_steps() == std::vector<int64_t>{1, 2} ? "" : std::string("wrong steps"); });
    restore_all(m, {1, 2});
  } else if (mode == "restore") {
    restore_all(m, {1, 2});
  } else if (mode == "crash") {
    check("save_step1", [&] {
      m.save(1, state(0), R"({"step":1})");
      return std::string();
    });
    mcx::multihost::sync_global_devices("before_crash", absl::Seconds(20));
    if (pid == n - 1) {  // the others write their shards meanwhile and wait for this process to finish
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      print_line("KILLING myself during the save of step 2");
      ::raise(SIGKILL);
    }
    // The survivors write their shards into the temporary directory and wait for the victim, until the job
    // fails (the default failure handler exits) or the wait times out.
    check("save_step2_fails", [&]() -> std::string {
      try {
        m.save(2, state(0), R"({"step":2})");
      } catch (const mcx::Error& e) {
        print_line(absl::StrCat("NOTE save of step 2 failed: ", mcx::mptest::one_line(e.what())));
        return "";
      }
      return "save of step 2 succeeded without the killed process";
    });
    std::fflush(stdout);
    std::_Exit(1);
  } else if (mode == "prepfail") {
    // Fails on every process, quickly; the error names `culprit`. `async`: save_async then wait().
    auto fails_fast = [&](int64_t step, int culprit, bool async) -> std::string {
      const std::string md = pid == culprit ? "[1]" : absl::StrCat(R"({"step":)", step, "}");
      const auto t0 = std::chrono::steady_clock::now();
      std::string what;
      try {
        if (async) {
          m.save_async(step, state(0), md);
          m.wait();
        } else {
          m.save(step, state(0), md);
        }
        return "the save succeeded";
      } catch (const mcx::InvalidArgument& e) {
        what = e.what();
      } catch (const mcx::Error& e) {
        return absl::StrCat("expected InvalidArgument, got ", mcx::mptest::one_line(e.what()));
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s > 5) return absl::StrCat("failed only after ", s, " s");
      if (what.find("metadata must be a JSON object") == std::string::npos) return "other error: " + what;
      if (pid != culprit && what.find(absl::StrCat("(on process ", culprit, ")")) == std::string::npos) {
        return "the error does not name process " + std::to_string(culprit) + ": " + what;
      }
      return "";
    };
    check("save_fails_everywhere", [&] { return fails_fast(1, n - 1, false); });
    check("save_async_fails_everywhere", [&] { return fails_fast(2, 0, true); });
    check("save_after_failures", [&] {
      m.save(3, state(0), R"({"step":3})");
      return m.all_steps() == std::vector<int64_t>{3} ? "" : std::string("wrong steps");
    });
    check("restore_step3", [&] { return compare(m.restore(3, state(1))); });
  } else if (mode == "survive") {
    if (pid == n - 1) {
      print_line("KILLING myself before the first save");
      std::fflush(stdout);
      ::raise(SIGKILL);
    }
    mcx::LiveDevices live = mcx::live_devices(mcx::devices(), absl::Seconds(20));
    check("live_set_lacks_the_dead", [&]() -> std::string {
      return live.processes == std::vector<int>{0, 1} ? "" : "live processes " + absl::StrJoin(live.processes, ",");
    });
    check("save_step1_on_survivors", [&] { return within(5, [&] { m.save(1, live_state(live.devices), R"({"step":1})"); }); });
    check("save_async_step2_on_survivors", [&] {
      return within(5, [&] {
        m.save_async(2, live_state(live.devices), R"({"step":2})");
        m.wait();
      });
    });
    check("restore_step2", [&] {
      const mcx::Tree t = m.restore(2, live_state(live.devices));
      return compare_leaves({{"w", t.at("w")}, {"b", t.at("b")}});
    });
    live = mcx::live_devices(mcx::devices(), absl::Seconds(20));  // both survivors are here
    if (pid == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      print_line("KILLING myself while process 1 waits for my directory of step 3");
      std::fflush(stdout);
      ::raise(SIGKILL);
    }
    check("save_step3_fails_at_once", [&]() -> std::string {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        m.save(3, live_state(live.devices), R"({"step":3})");
        return "the save succeeded without process 0";
      } catch (const mcx::Error& e) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const std::string what = e.what();
        if (what.find("process 0, the save's leader, failed") == std::string::npos) {
          return "the error does not name process 0 as the dead leader: " + what;
        }
        return s <= 8 ? "" : absl::StrCat("failed only after ", s, " s: ", what);
      }
    });
    live = mcx::live_devices(mcx::devices(), absl::Seconds(20));
    check("save_step4_alone", [&] {
      return within(5, [&] { m.save(4, live_state(live.devices), R"({"step":4})"); });
    });
    check("steps", [&] {
      return m.all_steps() == std::vector<int64_t>{1, 2, 4} ? "" : "steps " + absl::StrJoin(m.all_steps(), ",");
    });
    check("restore_step4", [&] {
      const mcx::Tree t = m.restore(4, live_state(live.devices));
      return compare_leaves({{"w", t.at("w")}, {"b", t.at("b")}});
    });
  } else if (mode == "resume") {
    check("latest_is_step1", [&]() -> std::string {
      const auto latest = m.latest_step();
      return latest == 1 ? "" : absl::StrCat("latest step ", latest ? *latest : -1);
    });
    check("partial_step2_present", [&]() -> std::string {
      for (const auto& e : std::filesystem::directory_iterator(root)) {
        if (e.path().filename().string().rfind("2.tmp-", 0) == 0) return "";
      }
      return "no partial directory of step 2";
    });
    mcx::multihost::sync_global_devices("looked", absl::Seconds(20));
    check("restore_step1", [&] { return compare(m.restore(1, state(1))); });
    check("save_step2_again", [&] {
      m.save(2, state(0), R"({"step":2})");
      return std::string();
    });
    check("partial_cleaned", [&]() -> std::string {
      for (const auto& e : std::filesystem::directory_iterator(root)) {
        if (e.path().filename().string().find(".tmp-") != std::string::npos) return "left " + e.path().string();
      }
      return "";
    });
    check("restore_step2", [&] { return compare(m.restore(2, state(2))); });
  }
  print_line(absl::StrCat("DONE ", g_checks.failures(), " failed (process ", pid, " of ", n, ")"));
  mcx::distributed::shutdown();
  return g_checks.failures() == 0 ? 0 : 1;
}
