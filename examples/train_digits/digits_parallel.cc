#include "examples/train_digits/digits_parallel.h"

#include "examples/train_digits/digits_model.h"
#include "mcx/mcx.h"

namespace digits {

StepFn jit_data_parallel_step(const mcx::Mesh& mesh, double lr, bool donate, const std::string& name, LossFn loss_fn,
                              int64_t decay_steps) {
  if (!loss_fn) loss_fn = loss;
  using mcx::Array;
  using mcx::Tree;
  const mcx::Sharding replicated = mcx::NamedSharding(mesh, mcx::P());
  mcx::JitOptions options;
  options.name = name;
  options.in_shardings = {replicated, replicated, replicated, replicated,
                          mcx::NamedSharding(mesh, mcx::P("data", mcx::None)), mcx::NamedSharding(mesh, mcx::P("data"))};
  options.out_shardings = {replicated};
  if (donate) options.donate_argnums = {0, 1, 2};
  auto step = mcx::jit(
      [lr, loss_fn, decay_steps](const Tree& p, const Tree& m, const Tree& v, const Array& t, const Array& x, const Array& y) {
        auto [l, g] = mcx::value_and_grad(loss_fn)(p, x, y);
        auto [p1, m1, v1] = adam_update(p, g, m, v, t, lr);
        if (decay_steps > 0) {  // the update p1 - p is proportional to the learning rate: scale it
          const double pi = 3.14159265358979323846;
          const Array progress = mcx::minimum((t - 1.0f) / static_cast<double>(decay_steps), mcx::full_like(t, 1.0));
          const Array scale = 0.5f * (1.0f + mcx::cos(progress * pi));
          p1 = mcx::tree_map([&](const Array& before, const Array& after) { return before + (after - before) * scale; },
                             p, p1);
        }
        return StepResult{p1, m1, v1, l};
      },
      options);
  return [step](const Tree& p, const Tree& m, const Tree& v, const Array& t, const Array& x, const Array& y) {
    return step(p, m, v, t, x, y);
  };
}

}  // namespace digits
