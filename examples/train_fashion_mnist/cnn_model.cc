#include "examples/train_fashion_mnist/cnn_model.h"

#include <cmath>
#include <vector>

#include "mcx/trace/ops.h"
#include "mcx/trace/random.h"

namespace fashion {

using mcx::Array;
using mcx::Tree;

namespace {

Array he_normal(const Array& key, const std::vector<int64_t>& shape, int64_t fan_in) {
  return mcx::random::normal(key, shape) * std::sqrt(2.0 / static_cast<double>(fan_in));
}

Array zeros(int64_t n) { return mcx::zeros(mcx::concrete_shape({n})); }

constexpr int64_t kC1 = 32, kC2 = 64, kDense = 128;
constexpr int64_t kFlat = (kImageSide / 4) * (kImageSide / 4) * kC2;  // two 2x2 pools of SAME convolutions

}  // namespace

Tree cnn_init_params(const Array& key) {
  const std::vector<Array> k = mcx::random::split_keys(key, 4);
  Tree p;
  p["c1_w"] = he_normal(k[0], {3, 3, 1, kC1}, 3 * 3 * 1);
  p["c1_b"] = zeros(kC1);
  p["c2_w"] = he_normal(k[1], {3, 3, kC1, kC2}, 3 * 3 * kC1);
  p["c2_b"] = zeros(kC2);
  p["d1_w"] = he_normal(k[2], {kFlat, kDense}, kFlat);
  p["d1_b"] = zeros(kDense);
  p["d2_w"] = he_normal(k[3], {kDense, kNumClasses}, kDense);
  p["d2_b"] = zeros(kNumClasses);
  return p;
}

Array cnn_logits(const Tree& p, const Array& x) {
  const mcx::DimExpr batch = x.shape()[0];
  Array h = mcx::reshape(x, mcx::Shape{batch, kImageSide, kImageSide, 1});
  h = mcx::max_pool(mcx::relu(mcx::conv(h, p.at("c1_w")) + p.at("c1_b")), {2, 2}, {2, 2});
  h = mcx::max_pool(mcx::relu(mcx::conv(h, p.at("c2_w")) + p.at("c2_b")), {2, 2}, {2, 2});
  h = mcx::reshape(h, mcx::Shape{batch, kFlat});
  h = mcx::relu(mcx::matmul(h, p.at("d1_w")) + p.at("d1_b"));
  return mcx::matmul(h, p.at("d2_w")) + p.at("d2_b");
}

Array cnn_loss(const Tree& params, const Array& x, const Array& y) {
  return -mcx::mean(mcx::sum(mcx::log_softmax(cnn_logits(params, x)) * mcx::one_hot(y, kNumClasses), -1));
}

Array cnn_predict(const Tree& params, const Array& x) { return mcx::argmax(cnn_logits(params, x), 1); }

std::string cnn_description() { return "conv32 3x3-relu-maxpool-conv64 3x3-relu-maxpool-dense128-relu-dense10"; }

}  // namespace fashion
