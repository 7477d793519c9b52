// The MLP the training benchmarks time (bench_core's mlp_step, bench_spmd, bench_gpu): a ReLU MLP of parameters
// {"w0", "b0", "w1", "b1", "w2", "b2"}, its mean softmax cross-entropy against integer labels, and the SGD
// update (learning rate 0.01) the steps apply. Header-only; the functions trace into jit, grad and shard_map.
#pragma once

#include <string>

#include <utility>

#include "mcx/trace/grad.h"
#include "mcx/trace/jit.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/pytree.h"

namespace mcx::bench {

// Mean softmax cross-entropy of the 3-layer ReLU MLP p on x: f32[batch, 784] against labels y: i32[batch] in
// [0, 10).
inline Array mlp_loss(const Tree& p, const Array& x, const Array& y) {
  Array h = x;
  for (int i = 0; i < 3; ++i) {
    const std::string s = std::to_string(i);
    h = matmul(h, p.at("w" + s)) + p.at("b" + s);
    if (i < 2) h = relu(h);
  }
  return -mean(sum(log_softmax(h) * one_hot(y, 10), -1));
}

// p - 0.01 * g, leaf by leaf.
inline Tree sgd_update(const Tree& p, const Tree& g) {
  return tree_map([](const Array& w, const Array& gw) { return w - 0.01f * gw; }, p, g);
}

// The jitted training step: (params, x, y) -> (params after one SGD step on mlp_loss's gradient, the loss).
inline auto mlp_sgd_step() {
  return jit(
      [](const Tree& p, const Array& x, const Array& y) {
        auto [l, g] = value_and_grad(mlp_loss)(p, x, y);
        return std::make_pair(sgd_update(p, g), l);
      },
      {.name = "mlp_step"});
}

}  // namespace mcx::bench
