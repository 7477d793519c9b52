// Test harness for the partitioner: partitions a global program for a mesh and specs, evaluates the
// per-device program on every partition in lockstep (tests/support/spmd_reference.h) with the global
// arguments cut by index_box, and checks each partition's results against the box of the unpartitioned
// reference result (tests/support/reference_eval.h) that the result's out_spec assigns to it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "mcx/core/error.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/shape_rules.h"
#include "mcx/ir/text.h"
#include "mcx/spmd/partitioner.h"
#include "tests/support/reference_eval.h"
#include "tests/support/spmd_reference.h"
#include "tests/support/test_util.h"

namespace mcx::spmd::testing {

inline MeshAxes mesh_of(std::vector<std::string> names, std::vector<int64_t> sizes) {
  return MeshAxes{std::move(names), std::move(sizes)};
}

// 1, 2, 3, 4 and 8 devices; 1-d and several 2-d / 3-d meshes (one with a size-1 axis).
inline std::vector<MeshAxes> test_meshes() {
  return {mesh_of({"x"}, {1}),           mesh_of({"x"}, {2}),           mesh_of({"x"}, {3}),
          mesh_of({"x"}, {4}),           mesh_of({"x"}, {8}),           mesh_of({"x", "y"}, {2, 2}),
          mesh_of({"x", "y"}, {2, 4}),   mesh_of({"x", "y"}, {4, 2}),   mesh_of({"x", "y", "z"}, {2, 2, 2}),
          mesh_of({"a", "b"}, {3, 1})};
}

inline std::vector<int64_t> dims_of(const AbstractValue& t) { return value_or_throw(to_concrete(t.shape)); }

// The elements of b inside box, as a new Buffer.
inline Buffer slice_box(const Buffer& b, const IndexBox& box) {
  std::vector<int64_t> shape = box.shape();
  Buffer out = Buffer::zeros(b.dtype(), shape);
  const int rank = b.rank();
  const size_t es = static_cast<size_t>(dtype_size(b.dtype()));
  std::vector<int64_t> stride(rank, 1);
  for (int d = rank - 2; d >= 0; --d) stride[d] = stride[d + 1] * b.dims()[d + 1];
  const auto* src = static_cast<const unsigned char*>(b.data());
  auto* dst = static_cast<unsigned char*>(out.mutable_data());
  std::vector<int64_t> idx(rank, 0);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    int64_t off = 0;
    for (int d = 0; d < rank; ++d) off += (box.start[d] + idx[d]) * stride[d];
    std::memcpy(dst + i * es, src + off * es, es);
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// Every valid spec of a value on a mesh: each axis on one dimension or none, in every order.
inline std::vector<PartitionSpec> candidate_specs(const MeshAxes& mesh, const std::vector<int64_t>& dims) {
  const int rank = static_cast<int>(dims.size());
  std::vector<int> order(mesh.rank());
  std::iota(order.begin(), order.end(), 0);
  std::set<std::string> seen;
  std::vector<PartitionSpec> out;
  do {
    int64_t combos = 1;
    for (int i = 0; i < mesh.rank(); ++i) combos *= rank + 1;
    for (int64_t c = 0; c < combos; ++c) {
      std::vector<DimSpec> ds(rank);
      int64_t x = c;
      for (int a : order) {
        int choice = static_cast<int>(x % (rank + 1));
        x /= rank + 1;
        if (choice < rank) ds[choice].axes.push_back(mesh.names[a]);
      }
      PartitionSpec s(ds);
      if (!validate_spec(s, mesh, dims, "test").ok()) continue;
      if (seen.insert(s.to_string()).second) out.push_back(s);
    }
  } while (std::next_permutation(order.begin(), order.end()));
  return out;
}

struct CheckOptions {
  double rtol = 0;  // 0 and 0: bitwise equality
  double atol = 0;
};

// Partitions g and checks every partition's results. Returns the partitioned program (for stats).
inline PartitionedProgram check_partition(const ir::Program& g, const MeshAxes& mesh,
                                          const std::vector<PartitionSpec>& in_specs,
                                          const std::vector<std::optional<PartitionSpec>>& out_specs,
                                          const std::vector<Buffer>& args, CheckOptions opt) {
  std::string ctx = "mesh " + mesh.to_string() + " in_specs";
  for (const auto& s : in_specs) ctx += " " + s.to_string();
  ctx += " out_specs";
  for (const auto& s : out_specs) ctx += " " + (s ? s->to_string() : std::string("nullopt"));
  SCOPED_TRACE(ctx);
  absl::StatusOr<PartitionedProgram> pp = partition(g, mesh, in_specs, out_specs);
  if (!pp.ok()) {
    ADD_FAILURE() << "partition failed: " << pp.status();
    return {};
  }
  absl::Status verified = ir::verify(pp->per_device);
  EXPECT_TRUE(verified.ok()) << verified << "\n" << ir::print_program(pp->per_device);
  EXPECT_EQ(pp->out_specs.size(), g.results.size());
  absl::StatusOr<std::vector<Buffer>> ref = test::reference_evaluate(g, args);
  if (!ref.ok()) {
    ADD_FAILURE() << "reference failed: " << ref.status();
    return *std::move(pp);
  }
  const int64_t n = mesh.num_devices();
  std::vector<std::vector<Buffer>> per(n);
  for (int64_t p = 0; p < n; ++p)
    for (size_t i = 0; i < args.size(); ++i) {
      std::vector<int64_t> dims = args[i].dims();
      per[p].push_back(slice_box(args[i], index_box(in_specs[i], mesh, dims, p)));
    }
  auto got = test::spmd_reference_evaluate(pp->per_device, static_cast<int>(n), per);
  if (!got.ok()) {
    ADD_FAILURE() << "spmd evaluation failed: " << got.status() << "\n" << ir::print_program(pp->per_device);
    return *std::move(pp);
  }
  for (int64_t p = 0; p < n; ++p) {
    for (size_t r = 0; r < g.results.size(); ++r) {
      std::vector<int64_t> dims = (*ref)[r].dims();
      Buffer want = slice_box((*ref)[r], index_box(pp->out_specs[r], mesh, dims, p));
      const Buffer& have = (*got)[p][r];
      if (opt.rtol == 0 && opt.atol == 0) {
        EXPECT_TRUE(have.bitwise_equal(want)) << "partition " << p << " result " << r << " (spec "
                                              << pp->out_specs[r].to_string() << "): got " << have.to_string()
                                              << ", expected " << want.to_string() << "\n"
                                              << ir::print_program(pp->per_device);
      } else {
        EXPECT_TRUE(test::buffers_near(have, want, opt.rtol, opt.atol))
            << "partition " << p << " result " << r << "\n" << ir::print_program(pp->per_device);
      }
    }
  }
  return *std::move(pp);
}

// For each test mesh, `samples` random spec choices (plus the fully replicated and the first candidate
// spec of every parameter), with out_specs empty, nullopt, a random spec, or partly Unconstrained.
inline void sweep(const ir::Program& g, const std::vector<Buffer>& args, int samples, CheckOptions opt,
                  uint32_t seed = 1) {
  std::mt19937 rng(seed);
  for (const MeshAxes& mesh : test_meshes()) {
    std::vector<std::vector<PartitionSpec>> in_cands, out_cands;
    for (const auto& t : g.params) in_cands.push_back(candidate_specs(mesh, dims_of(t)));
    for (const auto& t : g.result_types()) out_cands.push_back(candidate_specs(mesh, dims_of(t)));
    auto pick = [&](const std::vector<PartitionSpec>& c) { return c[rng() % c.size()]; };
    for (int s = 0; s < samples + 2; ++s) {
      std::vector<PartitionSpec> in;
      for (const auto& c : in_cands) in.push_back(s == 0 ? P() : s == 1 ? c.back() : pick(c));
      std::vector<std::optional<PartitionSpec>> out;
      int mode = s < 2 ? 0 : static_cast<int>(rng() % 4);
      if (mode != 0) {
        for (const auto& c : out_cands) {
          if (mode == 1) {
            out.push_back(std::nullopt);
          } else {
            PartitionSpec spec = pick(c);
            if (mode == 3 && !c.empty()) {
              std::vector<DimSpec> dims = spec.dims();
              if (!dims.empty()) dims[rng() % dims.size()] = DimSpec{{}, true};
              spec = PartitionSpec(dims);
            }
            out.push_back(spec);
          }
        }
      }
      check_partition(g, mesh, in, out, args, opt);
      if (::testing::Test::HasFailure()) return;  // one failing configuration is enough to read
    }
  }
}

}  // namespace mcx::spmd::testing
