// Shared by the export tests: artifacts for MLPs with a symbolic batch dimension.
#pragma once

#include <string>

#include "mcx/core/error.h"
#include "mcx/export/artifact.h"
#include "mcx/ir/builder.h"

namespace mcx::exporting::testutil {

// x: f32[b,784] -> `layers` dense layers (width 32, relu between) -> f32[b,10]; weights are parameters
// args[1..] (w_i: f32[in,out], bias_i: f32[out]). Scope: b >= 1 (implicit).
inline ir::Program mlp_program(int layers, int width = 32) {
  ir::ProgramBuilder b("mlp");
  ir::ValueId x = b.add_parameter({DType::kFloat32, symbolic_shape("b, 784")});
  std::vector<std::pair<ir::ValueId, ir::ValueId>> weights;
  for (int l = 0, in = 784; l < layers; ++l) {
    int64_t out = l + 1 == layers ? 10 : width;
    weights.emplace_back(b.add_parameter({DType::kFloat32, concrete_shape({in, out})}),
                         b.add_parameter({DType::kFloat32, concrete_shape({out})}));
    in = static_cast<int>(out);
  }
  for (int l = 0; l < layers; ++l) {
    auto [w, bias] = weights[l];
    ir::ValueId y = b.emit_or_throw(ir::OpKind::kDotGeneral, {x, w},
                                    {{"lhs_batch", std::vector<int64_t>{}}, {"rhs_batch", std::vector<int64_t>{}},
                                     {"lhs_contracting", std::vector<int64_t>{1}},
                                     {"rhs_contracting", std::vector<int64_t>{0}}});
    Shape ys = b.type(y).shape;
    y = b.binary(ir::OpKind::kAdd, y, b.broadcast_in_dim(bias, ys, {1}));
    if (l + 1 < layers) y = b.binary(ir::OpKind::kMax, y, b.full_like(y, 0.0));
    x = y;
  }
  return std::move(b).build({x});
}

inline Artifact mlp_artifact(int layers) { return make_artifact(mlp_program(layers), "mlp", 0); }

}  // namespace mcx::exporting::testutil
