// The Fashion-MNIST CNN of train_fashion_mnist --model cnn: conv 32 3x3, relu, max pool 2x2, conv 64 3x3, relu,
// max pool 2x2, dense 128, relu, dense 10 (channels last, SAME convolutions). Its parameters are a flat Tree of
// named leaves, so the digits examples' Adam update and data-parallel step apply to it unchanged.
#pragma once

#include <string>

#include "mcx/trace/array.h"
#include "mcx/trace/pytree.h"

namespace fashion {

constexpr int64_t kImageSide = 28;
constexpr int64_t kNumClasses = 10;

// He-normal weights (fan-in scaled) and zero biases from `key`: c1_w f32[3,3,1,32], c1_b, c2_w f32[3,3,32,64],
// c2_b, d1_w f32[3136,128], d1_b, d2_w f32[128,10], d2_b.
mcx::Tree cnn_init_params(const mcx::Array& key);

// x f32[batch, 784] (row-major 28x28 images, as the loader produces them) -> logits f32[batch, 10].
mcx::Array cnn_logits(const mcx::Tree& params, const mcx::Array& x);

// Mean softmax cross-entropy of the logits against labels y i32[batch].
mcx::Array cnn_loss(const mcx::Tree& params, const mcx::Array& x, const mcx::Array& y);

// argmax of the logits: i32[batch].
mcx::Array cnn_predict(const mcx::Tree& params, const mcx::Array& x);

// "conv32-pool-conv64-pool-128-10", for the banner.
std::string cnn_description();

}  // namespace fashion
