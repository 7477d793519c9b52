// Micro-benchmarks of the CPU backend. Each case runs mcx (a Program compiled by CpuExecutable) and a
// peer on the same work in the same process and prints one JSON line:
//   {"name": ..., "mcx_ms": median, "peer": ..., "peer_ms": median, "ratio": peer_ms / mcx_ms}
// Peers: cblas_sgemm called directly (GEMM); a plain C++ loop with scalar std::exp, single thread, -O2,
// no fast-math (elementwise and softmax) -- the code one would write without a vectorised exp.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "mcx/backend/cpu/executable.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/core/error.h"
#include "mcx/ir/builder.h"

namespace {

using mcx::Buffer;
using mcx::DType;
using mcx::ir::OpKind;

// Median and minimum of reps timed runs after one warm-up. On a shared, loaded machine the minimum is
// the better estimate of what the code costs; the median is what a user sees under that load.
struct Timing {
  double median, min;
};

Timing time_ms(int reps, const std::function<void()>& fn) {
  fn();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t[0]};
}

void report(const char* name, Timing mcx, const char* peer, Timing p) {
  std::printf("{\"name\": \"%s\", \"mcx_ms\": %.4f, \"peer\": \"%s\", \"peer_ms\": %.4f, \"ratio\": %.3f, "
              "\"mcx_min_ms\": %.4f, \"peer_min_ms\": %.4f, \"ratio_min\": %.3f}\n",
              name, mcx.median, peer, p.median, p.median / mcx.median, mcx.min, p.min, p.min / mcx.min);
  std::fflush(stdout);
}

Buffer random_f32(std::vector<int64_t> dims, uint32_t seed) {
  Buffer b = Buffer::uninitialized(DType::kFloat32, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  float* p = b.mutable_data<float>();
  for (int64_t i = 0; i < b.num_elements(); ++i) p[i] = u(rng);
  return b;
}

std::shared_ptr<const mcx::cpu::CpuExecutable> compile(const mcx::ir::Program& p) {
  return mcx::value_or_throw(mcx::cpu::CpuExecutable::compile(p));
}

void bench_exp_mul_add(int reps) {
  const int64_t n = 1 << 20;
  mcx::ir::ProgramBuilder b("exp_mul_add");
  auto a = b.add_parameter({DType::kFloat32, mcx::concrete_shape({n})});
  auto c = b.add_parameter({DType::kFloat32, mcx::concrete_shape({n})});
  auto one = b.broadcast_in_dim(b.scalar_constant(DType::kFloat32, 1.0), mcx::concrete_shape({n}), {});
  auto y = b.binary(OpKind::kAdd, b.binary(OpKind::kMul, b.unary(OpKind::kExp, a), c), one);
  auto exe = compile(std::move(b).build({y}));
  std::vector<Buffer> args = {random_f32({n}, 1), random_f32({n}, 2)};
  Timing mcx_ms = time_ms(reps, [&] { mcx::value_or_throw(exe->execute(args)); });
  std::vector<float> out(n);
  const float* pa = args[0].data<float>();
  const float* pc = args[1].data<float>();
  Timing peer_ms = time_ms(reps, [&] {
    for (int64_t i = 0; i < n; ++i) out[i] = std::exp(pa[i]) * pc[i] + 1.0f;
  });
  report("exp_mul_add_1M_f32", mcx_ms, "cxx_scalar_loop_1thread", peer_ms);
}

void bench_gemm(int reps) {
  const int64_t m = 1024;
  mcx::ir::ProgramBuilder b("gemm");
  auto x = b.add_parameter({DType::kFloat32, mcx::concrete_shape({m, m})});
  auto w = b.add_parameter({DType::kFloat32, mcx::concrete_shape({m, m})});
  auto d = b.emit_or_throw(OpKind::kDotGeneral, {x, w},
                           {{"lhs_batch", std::vector<int64_t>{}}, {"rhs_batch", std::vector<int64_t>{}},
                            {"lhs_contracting", std::vector<int64_t>{1}}, {"rhs_contracting", std::vector<int64_t>{0}}});
  auto exe = compile(std::move(b).build({d}));
  std::vector<Buffer> args = {random_f32({m, m}, 3), random_f32({m, m}, 4)};
  std::vector<float> out(m * m);
  // Interleave so both see the same machine load.
  std::vector<double> tm, tp;
  for (int r = 0; r < std::max(3, reps / 2); ++r) {
    tm.push_back(time_ms(1, [&] { mcx::value_or_throw(exe->execute(args)); }).min);
    tp.push_back(time_ms(1, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, 1.f, args[0].data<float>(), m,
                  args[1].data<float>(), m, 0.f, out.data(), m);
    }).min);
  }
  std::sort(tm.begin(), tm.end());
  std::sort(tp.begin(), tp.end());
  report("gemm_1024_f32", {tm[tm.size() / 2], tm[0]}, "cblas_sgemm", {tp[tp.size() / 2], tp[0]});
}

void bench_softmax(int reps) {
  const int64_t rows = 4096, cols = 1024;
  mcx::ir::ProgramBuilder b("softmax");
  auto x = b.add_parameter({DType::kFloat32, mcx::concrete_shape({rows, cols})});
  auto mx = b.emit_or_throw(OpKind::kReduceMax, {x}, {{"dimensions", std::vector<int64_t>{1}}});
  auto e = b.unary(OpKind::kExp,
                   b.binary(OpKind::kSub, x, b.broadcast_in_dim(mx, mcx::concrete_shape({rows, cols}), {0})));
  auto s = b.reduce_sum(e, {1});
  auto y = b.binary(OpKind::kDiv, e, b.broadcast_in_dim(s, mcx::concrete_shape({rows, cols}), {0}));
  auto exe = compile(std::move(b).build({y}));
  std::vector<Buffer> args = {random_f32({rows, cols}, 5)};
  Timing mcx_ms = time_ms(reps, [&] { mcx::value_or_throw(exe->execute(args)); });
  std::vector<float> out(rows * cols);
  const float* px = args[0].data<float>();
  Timing peer_ms = time_ms(reps, [&] {
    for (int64_t r = 0; r < rows; ++r) {
      const float* in = px + r * cols;
      float* o = out.data() + r * cols;
      float m = in[0];
      for (int64_t j = 1; j < cols; ++j) m = std::max(m, in[j]);
      float sum = 0;
      for (int64_t j = 0; j < cols; ++j) sum += (o[j] = std::exp(in[j] - m));
      for (int64_t j = 0; j < cols; ++j) o[j] /= sum;
    }
  });
  report("softmax_4096x1024_f32", mcx_ms, "cxx_scalar_loop_1thread", peer_ms);
}

// Pieces of softmax, to see where its time goes.
void bench_row_reductions(int reps) {
  const int64_t rows = 4096, cols = 1024;
  std::vector<Buffer> args = {random_f32({rows, cols}, 6)};
  const float* px = args[0].data<float>();
  std::vector<float> out(rows);
  for (OpKind k : {OpKind::kReduceMax, OpKind::kReduceSum}) {
    mcx::ir::ProgramBuilder b("rows");
    auto x = b.add_parameter({DType::kFloat32, mcx::concrete_shape({rows, cols})});
    auto r = b.emit_or_throw(k, {x}, {{"dimensions", std::vector<int64_t>{1}}});
    auto exe = compile(std::move(b).build({r}));
    Timing mcx_ms = time_ms(reps, [&] { mcx::value_or_throw(exe->execute(args)); });
    const bool is_max = k == OpKind::kReduceMax;
    Timing peer_ms = time_ms(reps, [&] {
      for (int64_t i = 0; i < rows; ++i) {
        float acc = is_max ? -INFINITY : 0.f;
        for (int64_t j = 0; j < cols; ++j) acc = is_max ? std::max(acc, px[i * cols + j]) : acc + px[i * cols + j];
        out[i] = acc;
      }
    });
    report(is_max ? "reduce_max_rows_4096x1024_f32" : "reduce_sum_rows_4096x1024_f32", mcx_ms,
           "cxx_scalar_loop_1thread", peer_ms);
  }
}

// The two element-wise groups of softmax on their own.
void bench_softmax_groups(int reps) {
  const int64_t rows = 4096, cols = 1024;
  const auto shape = mcx::concrete_shape({rows, cols});
  std::vector<Buffer> args = {random_f32({rows, cols}, 7), random_f32({rows}, 8)};
  for (OpKind k : {OpKind::kSub, OpKind::kDiv}) {
    mcx::ir::ProgramBuilder b("group");
    auto x = b.add_parameter({DType::kFloat32, shape});
    auto r = b.add_parameter({DType::kFloat32, mcx::concrete_shape({rows})});
    auto y = b.binary(k, x, b.broadcast_in_dim(r, shape, {0}));
    if (k == OpKind::kSub) y = b.unary(OpKind::kExp, y);
    auto exe = compile(std::move(b).build({y}));
    Timing mcx_ms = time_ms(reps, [&] { mcx::value_or_throw(exe->execute(args)); });
    std::vector<float> out(rows * cols);
    const float* px = args[0].data<float>();
    const float* pr = args[1].data<float>();
    Timing peer_ms = time_ms(reps, [&] {
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          out[i * cols + j] = k == OpKind::kSub ? std::exp(px[i * cols + j] - pr[i]) : px[i * cols + j] / pr[i];
        }
      }
    });
    report(k == OpKind::kSub ? "softmax_group_exp_sub_4096x1024_f32" : "softmax_group_div_4096x1024_f32", mcx_ms,
           "cxx_scalar_loop_1thread", peer_ms);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 30;
  std::string only;  // --only <substring of a case function>: run matching cases only
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--only") == 0) only = argv[i + 1];
  }
  auto want = [&](const char* name) { return only.empty() || std::string(name).find(only) != std::string::npos; };
  std::fprintf(stderr, "[bench_kernels] threads=%d reps=%d\n", mcx::cpu::num_threads(), reps);
  try {
    if (want("exp_mul_add")) bench_exp_mul_add(reps);
    if (want("gemm")) bench_gemm(reps);
    if (want("softmax")) bench_softmax(reps);
    if (want("reduce_rows")) bench_row_reductions(reps);
    if (want("softmax_groups")) bench_softmax_groups(reps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[bench_kernels] %s\n", e.what());
    return 1;
  }
  return 0;
}
