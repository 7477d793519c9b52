#include "examples/train_digits/digits_parallel.h"

#include "examples/train_digits/digits_model.h"
#include "mcx/mcx.h"

namespace digits {

StepFn jit_data_parallel_step(const mcx::Mesh& mesh, double lr, bool donate, const std::string& name, LossFn loss_fn) {
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
      [lr, loss_fn](const Tree& p, const Tree& m, const Tree& v, const Array& t, const Array& x, const Array& y) {
        auto [l, g] = mcx::value_and_grad(loss_fn)(p, x, y);
        auto [p1, m1, v1] = adam_update(p, g, m, v, t, lr);
        return StepResult{p1, m1, v1, l};
      },
      options);
  return [step](const Tree& p, const Tree& m, const Tree& v, const Array& t, const Array& x, const Array& y) {
    return step(p, m, v, t, x, y);
  };
}

}  // namespace digits
