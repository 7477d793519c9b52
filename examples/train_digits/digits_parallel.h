// The data-parallel training step shared by the multi-device programs (data_parallel_digits,
// fault_tolerant_training, train_fashion_mnist, bench_mlp_step): a model's loss and gradients on a batch split
// over a mesh's "data" axis, then Adam on the replicated parameters; jit derives the per-device program and its
// all-reduces from the shardings.
#pragma once

#include <functional>
#include <tuple>

#include "mcx/runtime/mesh.h"
#include "mcx/trace/array.h"
#include "mcx/trace/pytree.h"

namespace digits {

// (params, m, v, loss) after one step.
using StepResult = std::tuple<mcx::Tree, mcx::Tree, mcx::Tree, mcx::Array>;
// step(params, m, v, t, x, y): t the 1-based step count (f32 scalar), x f32[batch, features], y i32[batch].
using StepFn = std::function<StepResult(const mcx::Tree&, const mcx::Tree&, const mcx::Tree&, const mcx::Array&,
                                        const mcx::Array&, const mcx::Array&)>;

// loss(params, x, y): the scalar the step differentiates (the digits MLP's by default).
using LossFn = std::function<mcx::Array(const mcx::Tree&, const mcx::Array&, const mcx::Array&)>;

// The jitted step on `mesh` (a 1-d mesh with axis "data"): parameters, moments and t replicated, x and y split
// by rows. donate: the old parameters and moments are dead after the step (a program that may retry a step
// after a failure keeps them: donate = false). decay_steps > 0: the learning rate follows a cosine from lr at
// step 1 down to 0 after step decay_steps (lr * (1 + cos(pi * min((t - 1) / decay_steps, 1))) / 2); 0: constant.
StepFn jit_data_parallel_step(const mcx::Mesh& mesh, double lr, bool donate, const std::string& name = "dp_step",
                              LossFn loss_fn = nullptr, int64_t decay_steps = 0);

}  // namespace digits
