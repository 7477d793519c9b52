// Helpers for the CPU backend tests: run a program on the backend and on the reference evaluator and
// compare.
#pragma once

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mcx/backend/cpu/executable.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/ir/builder.h"
#include "mcx/core/buffer.h"
#include "mcx/ir/program.h"
#include "tests/support/reference_eval.h"
#include "tests/support/test_util.h"

namespace mcx::cpu::testing {

inline std::vector<Buffer> run_cpu(const ir::Program& p, const std::vector<Buffer>& args) {
  auto exe = CpuExecutable::compile(p);
  EXPECT_TRUE(exe.ok()) << exe.status();
  if (!exe.ok()) return {};
  auto out = (*exe)->execute(args);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {};
  return *std::move(out);
}

// Runs p one instruction at a time, each as its own single-op executable (no fusion across ops).
inline std::vector<Buffer> run_unfused(const ir::Program& p, const std::vector<Buffer>& args) {
  std::vector<Buffer> vals(args.begin(), args.end());
  for (const ir::Instr& in : p.instrs) {
    ir::ProgramBuilder b("one");
    std::vector<ir::ValueId> ops;
    std::vector<Buffer> op_args;
    for (ir::ValueId o : in.operands) {
      ops.push_back(b.add_parameter(p.type(o)));
      op_args.push_back(vals[o]);
    }
    ir::ValueId r = b.emit_or_throw(in.kind, ops, in.attrs);
    std::vector<Buffer> out = run_cpu(std::move(b).build({r}), op_args);
    vals.push_back(out.empty() ? Buffer() : out[0]);
  }
  std::vector<Buffer> res;
  for (ir::ValueId r : p.results) res.push_back(vals[r]);
  return res;
}

// Restores the thread count a test changed.
struct ThreadCountGuard {
  int saved = num_threads();
  ~ThreadCountGuard() { set_num_threads(saved); }
};

// Default tolerances per dtype for one rounding step (the backend computes f32 in float, the reference
// in double rounded per op; 16-bit floats go through float).
inline double default_rtol(DType t) {
  switch (t) {
    case DType::kFloat16: return 2e-3;
    case DType::kBFloat16: return 1.6e-2;
    case DType::kFloat32: return 4e-6;
    case DType::kFloat64: return 1e-13;
    default: return 0;
  }
}

// Runs p on both evaluators and compares every result.
inline void expect_matches_reference(const ir::Program& p, const std::vector<Buffer>& args, double rtol = -1,
                                     double atol = -1) {
  auto ref = test::reference_evaluate(p, args);
  ASSERT_TRUE(ref.ok()) << ref.status();
  std::vector<Buffer> got = run_cpu(p, args);
  ASSERT_EQ(got.size(), ref->size());
  for (size_t i = 0; i < got.size(); ++i) {
    const DType t = (*ref)[i].dtype();
    const double r = rtol >= 0 ? rtol : default_rtol(t);
    const double a = atol >= 0 ? atol : (is_floating(t) ? r : 0.0);
    EXPECT_TRUE(test::buffers_near(got[i], (*ref)[i], r, a)) << "result " << i << " of program " << p.name;
  }
}

inline std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

inline const std::vector<DType>& float_dtypes() {
  static const std::vector<DType> v = {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64};
  return v;
}
inline const std::vector<DType>& int_dtypes() {
  static const std::vector<DType> v = {DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64, DType::kUInt8,
                                       DType::kUInt32};
  return v;
}
inline std::vector<DType> all_dtypes() {
  std::vector<DType> v = {DType::kBool};
  for (DType t : int_dtypes()) v.push_back(t);
  for (DType t : float_dtypes()) v.push_back(t);
  return v;
}

}  // namespace mcx::cpu::testing
