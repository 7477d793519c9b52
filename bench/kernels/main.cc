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

#include "bench/kernels/timing.h"
#include "mcx/backend/cpu/executable.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/core/error.h"
#include "mcx/ir/builder.h"

namespace {

using mcx::Buffer;
using mcx::DType;
using mcx::ir::OpKind;

using mcx::bench::Timing;
using mcx::bench::time_ms;

// --mcx-only: skip the peers (for instruction counts under callgrind, where only mcx matters).
bool g_mcx_only = false;

Timing time_peer_ms(int reps, const std::function<void()>& fn) {
  if (g_mcx_only) return {NAN, NAN};
  return time_ms(reps, fn);
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
  Timing peer_ms = time_peer_ms(reps, [&] {
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
    tp.push_back(time_peer_ms(1, [&] {
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
  Timing peer_ms = time_peer_ms(reps, [&] {
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
    Timing peer_ms = time_peer_ms(reps, [&] {
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
    Timing peer_ms = time_peer_ms(reps, [&] {
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


// One SGD step of a 784-512-512-10 MLP (relu, softmax cross-entropy), batch 256, written as the trace
// library would emit it (dot_general with transposed operands for the weight gradients, bias gradients as
// reductions over axis 0). Peer: the same step by hand with cblas_sgemm (transpose flags, no copies) and
// plain loops.
void bench_mlp_step(int reps) {
  const int64_t B = 256, D0 = 784, D1 = 512, D2 = 512, D3 = 10;
  const float lr = 0.01f;
  using mcx::concrete_shape;
  mcx::ir::ProgramBuilder b("mlp_step");
  auto f32 = [](std::vector<int64_t> d) { return mcx::AbstractValue{DType::kFloat32, concrete_shape(d)}; };
  auto x = b.add_parameter(f32({B, D0}));
  auto onehot = b.add_parameter(f32({B, D3}));
  std::vector<int64_t> dims[4] = {{D0}, {D1}, {D2}, {D3}};
  std::vector<mcx::ir::ValueId> W, bias;
  for (int l = 0; l < 3; ++l) {
    W.push_back(b.add_parameter(f32({dims[l][0], dims[l + 1][0]})));
    bias.push_back(b.add_parameter(f32({dims[l + 1][0]})));
  }
  auto dot = [&](mcx::ir::ValueId l, mcx::ir::ValueId r, int64_t lc, int64_t rc) {
    return b.emit_or_throw(OpKind::kDotGeneral, {l, r},
                           {{"lhs_batch", std::vector<int64_t>{}}, {"rhs_batch", std::vector<int64_t>{}},
                            {"lhs_contracting", std::vector<int64_t>{lc}}, {"rhs_contracting", std::vector<int64_t>{rc}}});
  };
  auto full = [&](double v, std::vector<int64_t> d) {
    return b.broadcast_in_dim(b.scalar_constant(DType::kFloat32, v), concrete_shape(d), {});
  };
  std::vector<mcx::ir::ValueId> h = {x};
  for (int l = 0; l < 3; ++l) {
    const int64_t n = dims[l + 1][0];
    auto z = b.binary(OpKind::kAdd, dot(h.back(), W[l], 1, 0), b.broadcast_in_dim(bias[l], concrete_shape({B, n}), {1}));
    h.push_back(l < 2 ? b.binary(OpKind::kMax, z, full(0, {B, n})) : z);
  }
  auto mx = b.emit_or_throw(OpKind::kReduceMax, {h[3]}, {{"dimensions", std::vector<int64_t>{1}}});
  auto e = b.unary(OpKind::kExp, b.binary(OpKind::kSub, h[3], b.broadcast_in_dim(mx, concrete_shape({B, D3}), {0})));
  auto p = b.binary(OpKind::kDiv, e, b.broadcast_in_dim(b.reduce_sum(e, {1}), concrete_shape({B, D3}), {0}));
  auto loss = b.binary(OpKind::kMul, b.reduce_sum(b.binary(OpKind::kMul, onehot, b.unary(OpKind::kLog, p)), {0, 1}),
                       b.scalar_constant(DType::kFloat32, -1.0 / B));
  auto g = b.binary(OpKind::kMul, b.binary(OpKind::kSub, p, onehot), full(1.0 / B, {B, D3}));
  std::vector<mcx::ir::ValueId> results = {loss};
  for (int l = 2; l >= 0; --l) {
    const int64_t n_in = dims[l][0], n_out = dims[l + 1][0];
    auto dW = dot(h[l], g, 0, 0);
    auto db = b.reduce_sum(g, {0});
    results.push_back(b.binary(OpKind::kSub, W[l], b.binary(OpKind::kMul, dW, full(lr, {n_in, n_out}))));
    results.push_back(b.binary(OpKind::kSub, bias[l], b.binary(OpKind::kMul, db, full(lr, {n_out}))));
    if (l > 0) {
      auto dh = dot(g, W[l], 1, 1);
      auto active = b.emit_or_throw(OpKind::kGt, {h[l], full(0, {B, n_in})});
      g = b.select(active, dh, full(0, {B, n_in}));
    }
  }
  auto exe = compile(std::move(b).build(results));
  std::vector<Buffer> args = {random_f32({B, D0}, 20), Buffer::zeros(DType::kFloat32, {B, D3})};
  for (int64_t r = 0; r < B; ++r) args[1].mutable_data<float>()[r * D3 + r % D3] = 1.f;
  for (int l = 0; l < 3; ++l) {
    args.push_back(random_f32({dims[l][0], dims[l + 1][0]}, 21 + l));
    args.push_back(random_f32({dims[l + 1][0]}, 31 + l));
  }
  Timing mcx_ms = time_ms(reps, [&] { mcx::value_or_throw(exe->execute(args)); });

  // Peer: the same step with cblas and loops, buffers allocated once.
  std::vector<std::vector<float>> act(4), grad(4), newW(3), newb(3);
  for (int l = 0; l < 4; ++l) act[l].resize(B * dims[l][0]), grad[l].resize(B * dims[l][0]);
  for (int l = 0; l < 3; ++l) newW[l].resize(dims[l][0] * dims[l + 1][0]), newb[l].resize(dims[l + 1][0]);
  Timing peer_ms = time_peer_ms(reps, [&] {
    std::memcpy(act[0].data(), args[0].data<float>(), B * D0 * sizeof(float));
    for (int l = 0; l < 3; ++l) {
      const int64_t k = dims[l][0], n = dims[l + 1][0];
      const float* bl = args[3 + 2 * l].data<float>();
      float* z = act[l + 1].data();
      for (int64_t i = 0; i < B; ++i) std::memcpy(z + i * n, bl, n * sizeof(float));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, n, k, 1.f, act[l].data(), k,
                  args[2 + 2 * l].data<float>(), n, 1.f, z, n);
      if (l < 2) for (int64_t i = 0; i < B * n; ++i) z[i] = std::max(z[i], 0.f);
    }
    float* gz = grad[3].data();
    for (int64_t i = 0; i < B; ++i) {
      const float* z = act[3].data() + i * D3;
      float m = z[0], s = 0;
      for (int64_t j = 1; j < D3; ++j) m = std::max(m, z[j]);
      for (int64_t j = 0; j < D3; ++j) s += (gz[i * D3 + j] = std::exp(z[j] - m));
      for (int64_t j = 0; j < D3; ++j) gz[i * D3 + j] = (gz[i * D3 + j] / s - args[1].data<float>()[i * D3 + j]) / B;
    }
    for (int l = 2; l >= 0; --l) {
      const int64_t k = dims[l][0], n = dims[l + 1][0];
      const float* Wl = args[2 + 2 * l].data<float>();
      std::memcpy(newW[l].data(), Wl, k * n * sizeof(float));
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, n, B, -lr, act[l].data(), k, grad[l + 1].data(), n, 1.f,
                  newW[l].data(), n);
      const float* bl = args[3 + 2 * l].data<float>();
      for (int64_t j = 0; j < n; ++j) newb[l][j] = bl[j];
      for (int64_t i = 0; i < B; ++i) for (int64_t j = 0; j < n; ++j) newb[l][j] -= lr * grad[l + 1][i * n + j];
      if (l > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, k, n, 1.f, grad[l + 1].data(), n, Wl, n, 0.f,
                    grad[l].data(), k);
        for (int64_t i = 0; i < B * k; ++i) if (!(act[l][i] > 0)) grad[l][i] = 0;
      }
    }
  });
  report("mlp_step_784_512_512_10_b256_f32", mcx_ms, "cblas_and_loops", peer_ms);
}
}  // namespace

int main(int argc, char** argv) {
  int reps = 30;
  std::string only;  // --only <substring of a case function>: run matching cases only
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--only") == 0) only = argv[i + 1];
  }
  for (int i = 1; i < argc; ++i) g_mcx_only |= std::strcmp(argv[i], "--mcx-only") == 0;
  // --only NAME runs the cases whose key contains NAME; --exact makes it match whole keys only.
  bool exact = false;
  for (int i = 1; i < argc; ++i) exact |= std::strcmp(argv[i], "--exact") == 0;
  auto want = [&](const char* name) {
    return only.empty() || (exact ? only == name : std::string(name).find(only) != std::string::npos);
  };
  std::fprintf(stderr, "[bench_kernels] threads=%d reps=%d\n", mcx::cpu::num_threads(), reps);
  try {
    if (want("exp_mul_add")) bench_exp_mul_add(reps);
    if (want("gemm")) bench_gemm(reps);
    if (want("softmax")) bench_softmax(reps);
    if (want("reduce_rows")) bench_row_reductions(reps);
    if (want("softmax_groups")) bench_softmax_groups(reps);
    if (want("mlp_step")) bench_mlp_step(reps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[bench_kernels] %s\n", e.what());
    return 1;
  }
  return 0;
}
