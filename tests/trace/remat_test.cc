// mcx::remat: gradients equal to the plain function's bit for bit, composition with jit, grad of grad, vmap
// and pytrees, and the peak memory of an MLP's gradient dropping as rematerialisation predicts.
#include <cstdio>
#include <vector>

#include "gmock/gmock.h"
#include "mcx/core/host_allocator.h"
#include "mcx/ir/text.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using testing_util::random_array;

// A residual block: its backward pass reads tanh's output, which is not the block's output.
Array block(const Array& h, const Array& w) { return h + tanh(matmul(h, w)); }

// mean(h_L^2) of a residual MLP h_{k+1} = h_k + tanh(h_k @ w_k), each block under remat or not.
Array mlp_loss(const std::vector<Array>& ws, const Array& x, bool use_remat) {
  Array h = x;
  for (const Array& w : ws) h = use_remat ? remat(block)(h, w) : block(h, w);
  return mean(square(h));
}

std::vector<Array> weights(int layers, int64_t width, uint64_t seed) {
  std::vector<Array> ws;
  for (int k = 0; k < layers; ++k) ws.push_back(random_array({width, width}, seed + k) * 0.1);
  return ws;
}

void expect_bitwise(const std::vector<Array>& a, const std::vector<Array>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].to_host().to_doubles(), b[i].to_host().to_doubles()) << "leaf " << i;
  }
}

TEST(RematTest, GradientsEqualThePlainFunctionsBitForBit) {
  std::vector<Array> ws = weights(3, 8, 1);
  Array x = random_array({5, 8}, 9);
  auto loss = [](const std::vector<Array>& w, const Array& xx, bool r) { return mlp_loss(w, xx, r); };
  std::vector<Array> plain = grad(loss)(ws, x, false);
  expect_bitwise(grad(loss)(ws, x, true), plain);
  expect_bitwise(jit(grad(loss))(ws, x, true), jit(grad(loss))(ws, x, false));
  // Outside any trace remat(f) is f.
  EXPECT_EQ(remat(block)(x, ws[0]).to_host().to_doubles(), block(x, ws[0]).to_host().to_doubles());
}

TEST(RematTest, TheGradientProgramRecomputesEachLayer) {
  std::vector<Array> ws = weights(3, 8, 1);
  Array x = random_array({5, 8}, 9);
  auto loss = [](const std::vector<Array>& w, const Array& xx) { return mlp_loss(w, xx, true); };
  auto plain_loss = [](const std::vector<Array>& w, const Array& xx) { return mlp_loss(w, xx, false); };
  auto count = [](const ir::Program& p, ir::OpKind k) {
    int n = 0;
    for (const ir::Instr& in : p.instrs) n += in.kind == k;
    return n;
  };
  // jit's optimisations (CSE included) keep the recomputed layers: three tanh forward, three again.
  ir::Program with = jit(grad(loss)).lower(ws, x);
  ir::Program without = jit(grad(plain_loss)).lower(ws, x);
  EXPECT_EQ(count(without, ir::OpKind::kTanh), 3);
  EXPECT_EQ(count(with, ir::OpKind::kTanh), 6) << ir::print_program(with);
}

TEST(RematTest, ComposesWithGradOfGradVmapAndPytrees) {
  auto f = [](const Array& x) {
    Tree t = Tree::Dict{{"a", x}, {"b", sin(x)}};
    Tree out = remat([](const Tree& in) { return Tree(Tree::Dict{{"p", in.at("a").array() * cos(in.at("b").array())}}); })(t);
    return sum(square(out.at("p").array()));
  };
  auto f_plain = [](const Array& x) { return sum(square(x * cos(sin(x)))); };
  Array x = random_array({6}, 3);
  expect_bitwise({grad(f)(x)}, {grad(f_plain)(x)});
  // Second order: equal to rounding (the recomputed copies' cotangents are summed apart; ir/remat_test.cc).
  testing_util::expect_same_values(grad([&](const Array& y) { return sum(grad(f)(y)); })(x),
                                   grad([&](const Array& y) { return sum(grad(f_plain)(y)); })(x), 1e-6, 1e-7);
  Array xs = random_array({4, 6}, 5);
  expect_bitwise({vmap(grad(f))(xs)}, {vmap(grad(f_plain))(xs)});
  // Forward mode passes through the markers.
  auto [y, ty] = jvp(f, std::tuple{x}, std::tuple{ones_like(x)});
  auto [y0, ty0] = jvp(f_plain, std::tuple{x}, std::tuple{ones_like(x)});
  expect_bitwise({y, ty}, {y0, ty0});
}

// Peak bytes of array storage while one call of the compiled gradient runs (after a warm-up call).
template <typename G>
int64_t peak_bytes_of_call(const G& g, const std::vector<Array>& ws, const Array& x) {
  // The warm-up call (tracing, compiling) must have finished, intermediates included: still running, its
  // buffers would count. Its results being ready is not enough (the device frees the intermediates after
  // publishing them); an op queued behind it on the same device stream runs once it is wholly done.
  for (Array& a : g(ws, x)) a.block_until_ready();
  (x * 1.0f).block_until_ready();
  const int64_t before = host_memory_stats().live_bytes;
  reset_host_memory_peak();
  std::vector<Array> grads = g(ws, x);
  for (Array& a : grads) a.block_until_ready();
  return host_memory_stats().peak_live_bytes - before;
}

TEST(RematTest, PeakMemoryOfTheMlpGradientDrops) {
  // L residual blocks of batch x width activations A = 256 x 256 f32 = 256 KiB. Without remat the backward
  // pass reads, per block, its input (for the matmul's weight gradient) and its tanh output (for tanh's
  // derivative), both kept from the forward pass: ~2L activations live when the backward pass starts. With
  // each block under remat only the block inputs are kept (L), and one block's tanh output is recomputed at
  // a time, so the peak drops by about L activations, less the few the recomputation holds at once.
  constexpr int kLayers = 12;
  constexpr int64_t kWidth = 256, kBatch = 256;
  const int64_t activation = kBatch * kWidth * 4;
  std::vector<Array> ws = weights(kLayers, kWidth, 11);
  Array x = random_array({kBatch, kWidth}, 7);
  auto g_plain = jit(grad([](const std::vector<Array>& w, const Array& xx) { return mlp_loss(w, xx, false); }));
  auto g_remat = jit(grad([](const std::vector<Array>& w, const Array& xx) { return mlp_loss(w, xx, true); }));
  const int64_t plain = peak_bytes_of_call(g_plain, ws, x);
  const int64_t with_remat = peak_bytes_of_call(g_remat, ws, x);
  std::printf("peak bytes of one gradient call: %lld without remat, %lld with (%.1f and %.1f activations)\n",
              static_cast<long long>(plain), static_cast<long long>(with_remat),
              static_cast<double>(plain) / activation, static_cast<double>(with_remat) / activation);
  // Measured: 24-26 activations without, 13-15 with (L = 12; the exact count moves by a couple of
  // activations with the order in which the device's threads finish). The bound leaves that much room.
  EXPECT_LE(with_remat, plain - (kLayers - 6) * activation);
  expect_bitwise(g_remat(ws, x), g_plain(ws, x));
}

}  // namespace
}  // namespace mcx
