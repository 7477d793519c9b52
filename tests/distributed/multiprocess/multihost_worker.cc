// multihost_worker: one process of an N-process job (mcx-run -n N --cpu-devices 2 -- multihost_worker [mode])
// that checks every mcx::multihost utility against values computed here from the job layout; multihost_test.cc
// runs it. Prints "CHECK <name> OK|FAIL <details>", "NOTE ..." with observed error messages, "DONE <n> failed".
// Modes: all (default); timeout (the last process skips a sync_global_devices, the others must time out
// naming it); names (process 0 syncs under another name: every process must fail naming both).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/backend/cpu/codegen/kernel_sharing.h"
#include "mcx/backend/cpu/codegen/kernel_key.h"
#include "mcx/core/job_key_value.h"
#include "mcx/distributed/distributed.h"
#include "mcx/mcx.h"
#include "tests/distributed/multiprocess/worker_output.h"
#include "mcx/multihost/multihost.h"

namespace {

namespace mh = mcx::multihost;
using mcx::mptest::one_line;
using mcx::mptest::print_line;



mcx::mptest::Checks g_checks;

void check(const std::string& name, const std::function<std::string()>& body) { g_checks.run(name, body); }

// Expects fn to throw an mcx::Error of `code` whose message contains every needle.
std::string expect_error(const std::string& what, absl::StatusCode code, const std::vector<std::string>& needles,
                         const std::function<void()>& fn) {
  try {
    fn();
  } catch (const mcx::Error& e) {
    const std::string msg = e.what();
    print_line("NOTE " + what + ": " + one_line(msg));
    if (e.code() != code) return absl::StrCat(what, " threw ", absl::StatusCodeToString(e.code()), ": ", msg);
    const size_t close = msg.find(']');
    if (msg.rfind('[', 0) == 0 && close != std::string::npos && msg.size() >= 2 * (close + 1) + 1 &&
        msg.compare(close + 2, close + 1, msg, 0, close + 1) == 0) {
      return absl::StrCat(what, "'s message repeats its prefix: ", msg);
    }
    for (const std::string& n : needles) {
      if (msg.find(n) == std::string::npos) return absl::StrCat(what, "'s message lacks '", n, "': ", msg);
    }
    return "";
  }
  return what + " did not throw";
}

std::string values(const mcx::Array& a) { return a.to_host().to_string(); }

void run_all(int pid, int n) {
  check("sync_global_devices", [&]() -> std::string {
    mh::sync_global_devices("start", absl::Seconds(20));
    return std::string();
  });
  check("broadcast_one_to_all", [&]() -> std::string {
    mcx::Tree mine{{"step", mcx::array(std::vector<int32_t>{pid * 10 + 7}, {1})},
                   {"w", mcx::array(std::vector<float>{1.5f + pid, -2.0f * pid}, {2})}};
    mcx::Tree got = mh::broadcast_one_to_all(mine);
    const std::string step = values(got.at("step")), w = values(got.at("w"));
    if (step != "i32[1]{7}" || w != "f32[2]{1.5, -0}") return absl::StrCat("got step ", step, ", w ", w);
    return std::string();
  });
  check("broadcast_needs_one_source", [&]() -> std::string {
    if (n == 1) return std::string();  // one process is exactly one source
    return expect_error("broadcast with every process a source", absl::StatusCode::kInvalidArgument,
                        {"exactly one source"},
                        [&] { mh::broadcast_one_to_all(mcx::array(std::vector<float>{1}, {1}), true); });
  });
  check("process_allgather", [&]() -> std::string {
    mcx::Array mine = mcx::array(std::vector<float>{static_cast<float>(pid), 10.0f * pid}, {2});
    mcx::Array stacked = mh::process_allgather(mine);
    mcx::Array tiled = mh::process_allgather(mine, /*tiled=*/true);
    std::vector<int64_t> want_dims = {n, 2};
    if (stacked.dims() != want_dims) return "stacked dims wrong: " + values(stacked);
    mcx::Buffer s = stacked.to_host(), t = tiled.to_host();
    for (int p = 0; p < n; ++p) {
      if (s.element_as_double(2 * p) != p || s.element_as_double(2 * p + 1) != 10.0 * p ||
          t.element_as_double(2 * p) != p) {
        return absl::StrCat("stacked ", values(stacked), ", tiled ", values(tiled));
      }
    }
    return std::string();
  });
  check("process_allgather_of_a_global_array", [&]() -> std::string {
    const mcx::Mesh mesh = mcx::make_mesh({mcx::device_count()}, {"i"});
    const int64_t rows = mcx::device_count();
    mcx::Array g = mcx::make_array_from_callback({rows, 2}, mcx::DType::kFloat32, mcx::NamedSharding(mesh, mcx::P("i")),
                                                 [](const mcx::IndexBox& box) {
                                                   std::vector<float> v;
                                                   for (int64_t r = box.start[0]; r < box.limit[0]; ++r) {
                                                     v.push_back(static_cast<float>(r));
                                                     v.push_back(static_cast<float>(-r));
                                                   }
                                                   return mcx::Buffer::from_vector<float>(v, box.shape());
                                                 });
    mcx::Buffer whole = mh::process_allgather(g).to_host();
    if (whole.dims() != std::vector<int64_t>{rows, 2}) return "dims of the gathered global array are wrong";
    for (int64_t r = 0; r < rows; ++r) {
      if (whole.element_as_double(2 * r) != r || whole.element_as_double(2 * r + 1) != -r) {
        return "gathered global array differs: " + whole.to_string();
      }
    }
    return std::string();
  });
  check("assert_equal_passes", [&]() -> std::string {
    mh::assert_equal(mcx::Tree{{"a", mcx::array(std::vector<float>{1, 2}, {2})}}, "same everywhere");
    return std::string();
  });
  check("assert_equal_names_leaf_and_processes", [&]() -> std::string {
    mcx::Tree t{{"a", mcx::array(std::vector<float>{1, 2}, {2})},
                {"b", mcx::array(std::vector<float>{pid >= 1 ? 5.0f : 4.0f}, {1})}};
    if (n == 1) {
      mh::assert_equal(t);
      return std::string();
    }
    std::vector<std::string> needles = {"params drifted", "['b']", "process"};
    for (int p = 1; p < n; ++p) needles.push_back(std::to_string(p));
    return expect_error("assert_equal of differing leaves", absl::StatusCode::kInvalidArgument, needles,
                        [&] { mh::assert_equal(t, "params drifted"); });
  });
  check("host_local_global_round_trip", [&]() -> std::string {
    const mcx::Mesh mesh = mcx::make_mesh({mcx::device_count()}, {"i"});
    const int64_t local_rows = mcx::local_device_count();
    std::vector<float> v;
    for (int64_t r = 0; r < local_rows; ++r) v.push_back(static_cast<float>(pid * 100 + r));
    mcx::Array local = mcx::array(v, {local_rows});
    mcx::Array global = mh::host_local_array_to_global_array(local, mesh, mcx::P("i"));
    if (global.dims() != std::vector<int64_t>{local_rows * n}) return "global dims wrong";
    mcx::Array back = mh::global_array_to_host_local_array(global, mesh, mcx::P("i"));
    if (values(back) != values(local)) return absl::StrCat("round trip gave ", values(back), ", expected ", values(local));
    // Over a pytree: a spec per leaf (tree_flatten order: "batch", "bias"); "bias" is replicated, so its global
    // value is this process's local one.
    mcx::Tree tree{{"batch", local}, {"bias", mcx::array(std::vector<float>{1.5f, 2.5f}, {2})}};
    mcx::Tree global_tree = mh::host_local_array_to_global_array(tree, mesh, {mcx::P("i"), mcx::P()});
    if (global_tree.at("batch").array().dims() != std::vector<int64_t>{local_rows * n}) return "the tree's batch dims are wrong";
    if (global_tree.at("bias").array().dims() != std::vector<int64_t>{2}) return "the tree's bias dims are wrong";
    mcx::Tree back_tree = mh::global_array_to_host_local_array(global_tree, mesh, {mcx::P("i"), mcx::P()});
    if (values(back_tree.at("batch").array()) != values(local) || values(back_tree.at("bias").array()) != values(tree.at("bias").array())) {
      return absl::StrCat("the tree's round trip gave ", values(back_tree.at("batch").array()), " and ",
                          values(back_tree.at("bias").array()));
    }
    return expect_error("three specs for two leaves", absl::StatusCode::kInvalidArgument, {"one per leaf (2)", "found 3"},
                        [&] { (void)mh::host_local_array_to_global_array(tree, mesh, {mcx::P("i"), mcx::P(), mcx::P()}); });
  });
  check("host_local_global_inside_jit", [&]() -> std::string {
    // Inside jit a value is global: a replicated spec pins the layout (the same value on every process); a spec
    // splitting a dimension across processes is refused, naming the dimension, when there are several.
    const mcx::Mesh mesh = mcx::make_mesh({mcx::device_count()}, {"i"});
    auto pinned = mcx::jit([&](const mcx::Array& x) { return mh::host_local_array_to_global_array(x, mesh, mcx::P()) * 2.0f; });
    const mcx::Array x = mcx::device_put(mcx::arange(3, mcx::DType::kFloat32), mcx::NamedSharding(mesh, mcx::P()));
    const mcx::Array y = pinned(x);
    if (values(y) != values(mcx::array(std::vector<float>{0, 2, 4}, {3}))) {
      return absl::StrCat("jit of a replicated conversion gave ", values(y));
    }
    auto split = mcx::jit([&](const mcx::Array& v) { return mh::host_local_array_to_global_array(v, mesh, mcx::P("i")); });
    const mcx::Array rows = mcx::device_put(mcx::arange(mcx::device_count(), mcx::DType::kFloat32),
                                            mcx::NamedSharding(mesh, mcx::P("i")));
    if (n == 1) {
      if (split(rows).dims() != std::vector<int64_t>{mcx::device_count()}) return "jit of a split conversion";
      return std::string();
    }
    return expect_error("a split across processes inside jit", absl::StatusCode::kInvalidArgument,
                        {"inside jit, vmap or grad a value is already a global array", "dimension 0",
                         "split across processes"},
                        [&] { (void)split(rows); });
  });
  check("sync_global_devices_end", [&]() -> std::string {
    mh::sync_global_devices("end", absl::Seconds(20));
    return std::string();
  });
}

// Three generated kernels (different signatures), each compiled through compile_fused and run; the values are
// compared with the interpreter's bit for bit. Prints "NOTE kernels compiled=<c> from_peers=<p>".
// silent_claimant: the last process claims every kernel and never publishes it (as a claimant that hangs):
// the others must give up after MCX_SHARE_COMPILED_TIMEOUT_S and compile themselves.
void share_kernels(int pid, int n, bool silent_claimant) {
  namespace cg = mcx::cpu::codegen;
  using mcx::ir::OpKind;
  std::vector<mcx::cpu::FusedGroup> groups(3);
  groups[0].leaf_dtypes = {mcx::DType::kFloat32, mcx::DType::kFloat32};
  groups[0].nodes = {{OpKind::kExp, mcx::DType::kFloat32, mcx::DType::kFloat32, {0}},
                     {OpKind::kMul, mcx::DType::kFloat32, mcx::DType::kFloat32, {2, 1}},
                     {OpKind::kTanh, mcx::DType::kFloat32, mcx::DType::kFloat32, {3}}};
  groups[0].outputs = {2};
  groups[1].leaf_dtypes = {mcx::DType::kInt32, mcx::DType::kInt32};
  groups[1].nodes = {{OpKind::kDiv, mcx::DType::kInt32, mcx::DType::kInt32, {0, 1}},
                     {OpKind::kRem, mcx::DType::kInt32, mcx::DType::kInt32, {2, 1}}};
  groups[1].outputs = {0, 1};
  groups[2].leaf_dtypes = {mcx::DType::kFloat64, mcx::DType::kFloat64};
  groups[2].nodes = {{OpKind::kLog1p, mcx::DType::kFloat64, mcx::DType::kFloat64, {0}},
                     {OpKind::kLt, mcx::DType::kBool, mcx::DType::kFloat64, {2, 1}}};
  groups[2].outputs = {0, 1};
  if (silent_claimant && pid == n - 1) {
    check("claim_every_kernel", [&]() -> std::string {
      for (const auto& g : groups) {
        const cg::KernelKey key{cg::signature(g), cg::target_description()};
        auto claimed = mcx::job_key_value()->insert(cg::shared_kernel_owner_key(key), std::to_string(pid),
                                                    /*allow_overwrite=*/false);
        if (!claimed.ok() || !*claimed) return "could not claim a kernel";
      }
      return std::string();
    });
  }
  mh::sync_global_devices("share_kernels_start", absl::Seconds(30));
  if (!(silent_claimant && pid == n - 1)) {
    check("shared_kernels_compute_the_interpreters_values", [&]() -> std::string {
      for (auto g : groups) {
        const int64_t len = 3000;
        g.dims = {len};
        auto kernel = cg::compile_fused(g);
        if (!kernel.ok()) return std::string(kernel.status().message());
        std::vector<mcx::Buffer> leaves;
        std::vector<mcx::cpu::View> views;
        for (size_t i = 0; i < g.leaf_dtypes.size(); ++i) {
          mcx::Buffer b = mcx::Buffer::uninitialized(g.leaf_dtypes[i], {len});
          for (int64_t e = 0; e < len; ++e) {
            const double v = std::sin(0.37 * e + i) * 9.0 + (i == 1 ? 0.0 : 1.5);
            if (g.leaf_dtypes[i] == mcx::DType::kInt32) b.mutable_data<int32_t>()[e] = static_cast<int32_t>(v);
            else if (g.leaf_dtypes[i] == mcx::DType::kFloat32) b.mutable_data<float>()[e] = static_cast<float>(v);
            else b.mutable_data<double>()[e] = v;
          }
          views.push_back(mcx::cpu::view_of(b));
          leaves.push_back(std::move(b));
        }
        std::vector<mcx::Buffer> outs[2];
        for (int pass = 0; pass < 2; ++pass) {
          mcx::cpu::FusedGroup run = g;
          run.kernel = pass == 0 ? *kernel : nullptr;
          std::vector<std::byte*> ptrs;
          for (int o : g.outputs) {
            outs[pass].push_back(mcx::Buffer::zeros(g.nodes[o].dtype, {len}));
            ptrs.push_back(static_cast<std::byte*>(outs[pass].back().mutable_data()));
          }
          mcx::cpu::run_fused(run, views, ptrs);
        }
        for (size_t j = 0; j < outs[0].size(); ++j) {
          if (!outs[0][j].bitwise_equal(outs[1][j])) return absl::StrCat("output ", j, " differs from the interpreter");
        }
      }
      return std::string();
    });
  }
  const cg::CodegenStats st = cg::stats();
  print_line(absl::StrCat("NOTE kernels compiled=", st.kernels_compiled, " from_peers=", st.kernels_from_peers));
  mh::sync_global_devices("share_kernels_end", absl::Seconds(60));
}

}  // namespace

// Mode subset_mesh (3 processes x 2 CPU devices): a mesh over the devices of processes 0 and 1 only. Process 2
// holds each array's metadata (shape, dtype, sharding, no shards), skips the computation and takes part in no
// collective (JAX's arrays over a subset of processes); processes 0 and 1 compute and reduce between them.
void subset_mesh(int pid, int n) {
  constexpr int64_t kRows = 8, kCols = 3;
  auto value = [](int64_t r, int64_t c) { return static_cast<float>(10 * r + c); };
  const std::vector<mcx::Device> all = mcx::devices();
  const bool member = pid < 2;
  std::optional<mcx::Mesh> mesh;
  std::optional<mcx::Sharding> rows;
  mcx::Array x;
  check("subset_make_array", [&]() -> std::string {
    if (n != 3 || all.size() != 6) return absl::StrCat("expected 3 processes x 2 devices, found ", all.size(), " devices");
    mesh.emplace(std::vector<mcx::Device>(all.begin(), all.begin() + 4), std::vector<int64_t>{4},
                 std::vector<std::string>{"data"});
    rows = mcx::NamedSharding(*mesh, mcx::P("data", mcx::None));
    std::vector<mcx::Array> shards;
    const std::vector<int64_t> dims = {kRows, kCols};
    for (const auto& [device, box] : rows->addressable_devices_indices_map(dims)) {
      std::vector<float> data;
      for (int64_t r = box.start[0]; r < box.limit[0]; ++r) {
        for (int64_t c = 0; c < kCols; ++c) data.push_back(value(r, c));
      }
      shards.push_back(mcx::device_put(mcx::Buffer::from_vector<float>(data, std::vector<int64_t>{box.limit[0] - box.start[0], kCols}), device));
    }
    if (shards.size() != (member ? 2u : 0u)) return absl::StrCat("process ", pid, " has ", shards.size(), " boxes");
    x = mcx::make_array_from_single_device_arrays({kRows, kCols}, *rows, shards, mcx::DType::kFloat32);
    if (x.shape() != mcx::concrete_shape({kRows, kCols}) || x.dtype() != mcx::DType::kFloat32) {
      return "the array's metadata is " + x.aval().to_string();
    }
    if (x.addressable_shards().size() != shards.size()) return "addressable shards differ from those given";
    if (x.is_fully_addressable()) return "an array over processes 0 and 1 says it is fully addressable";
    // Without the dtype an empty list cannot say what the array holds.
    if (!member) {
      try {
        (void)mcx::make_array_from_single_device_arrays({kRows, kCols}, *rows, {});
        return "an empty list without a dtype was accepted";
      } catch (const mcx::InvalidArgument& e) {
        print_line(std::string("NOTE empty list without dtype: ") + one_line(e.what()));
      }
    }
    return "";
  });
  check("subset_jit", [&]() -> std::string {
    if (!rows) return "no sharding (an earlier check failed)";
    auto f = mcx::jit([](const mcx::Array& a) { return mcx::sum(a * 2.0f, 0); }, {.name = "subset_sum"});
    const mcx::Array y = f(x);  // a reduction across processes 0 and 1 only
    if (y.shape() != mcx::concrete_shape({kCols})) return "the result's metadata is " + y.aval().to_string();
    if (!member) {
      if (!y.addressable_shards().empty()) return "process 2 holds a shard of the result";
      return expect_error("device_get of a result held by processes 0 and 1", absl::StatusCode::kFailedPrecondition,
                          {"held by cpu:0, process 0"}, [&] { (void)mcx::device_get(y); });
    }
    const mcx::Buffer got = mcx::device_get(y);
    for (int64_t c = 0; c < kCols; ++c) {
      double want = 0;
      for (int64_t r = 0; r < kRows; ++r) want += 2.0 * value(r, c);
      if (got.element_as_double(c) != want) return absl::StrCat("column ", c, " sums to ", got.element_as_double(c), ", expected ", want);
    }
    return "";
  });
  check("subset_everyone_in_step_after", [&]() -> std::string {
    mh::sync_global_devices("after_subset_mesh", absl::Seconds(20));
    return "";
  });
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "all";
  try {
    mcx::distributed::initialize();
  } catch (const std::exception& e) {
    print_line(absl::StrCat("CHECK initialize FAIL ", one_line(e.what())));
    return 1;
  }
  const int pid = mcx::process_index(), n = mcx::process_count();
  if (mode == "all") {
    run_all(pid, n);
  } else if (mode == "timeout") {
    check("sync_timeout_names_missing", [&]() -> std::string {
      if (pid == n - 1) {  // this process never arrives (it stays up, so the job is not ended meanwhile)
        std::this_thread::sleep_for(std::chrono::seconds(3));
        return std::string();
      }
      return expect_error("sync_global_devices without process " + std::to_string(n - 1),
                          absl::StatusCode::kDeadlineExceeded, {"missing", std::to_string(n - 1)},
                          [&] { mh::sync_global_devices("never", absl::Seconds(1)); });
    });
    std::fflush(stdout);
    std::_Exit(g_checks.failures() == 0 ? 0 : 1);  // the job is out of step: no shutdown barrier
  } else if (mode == "share_kernels" || mode == "share_kernels_silent_claimant") {
    share_kernels(pid, n, mode == "share_kernels_silent_claimant");
  } else if (mode == "subset_mesh") {
    subset_mesh(pid, n);
  } else if (mode == "names") {
    check("sync_names_differ", [&]() -> std::string {
      return expect_error("sync_global_devices under different names", absl::StatusCode::kFailedPrecondition,
                          {"sync_global_devices('left')", "sync_global_devices('right')"},
                          [&] { mh::sync_global_devices(pid == 0 ? "left" : "right", absl::Seconds(10)); });
    });
    // Only the data plane failed: shut down through the control plane as usual, so neither process is seen
    // to die while the other is still reporting (an early exit made fate-sharing end the other one).
  }
  mcx::distributed::shutdown();
  print_line(absl::StrCat("DONE ", g_checks.failures(), " failed"));
  return g_checks.failures() == 0 ? 0 : 1;
}
