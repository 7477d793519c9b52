// The artifact train_fashion_mnist --export writes: the trained classifier as an mcx::Exported taking raw images
// u8[b, 28, 28] (b symbolic: any batch size) to class indices i32[b]. The pixel normalisation is part of the
// program, so a server feeds the IDX bytes as they are (examples/serve_model, `mcx-export run`).
#pragma once

#include <functional>
#include <string>

#include "mcx/trace/array.h"
#include "mcx/trace/pytree.h"

namespace fashion {

using PredictFn = std::function<mcx::Array(const mcx::Tree&, const mcx::Array&)>;

// Exports `predict` (f32[b, 784] normalised rows -> i32[b]) with this process's copy of `params` baked in as
// constants and writes it to `path`; returns the artifact's size in bytes. Throws mcx::Error (Unavailable
// naming the file when it cannot be written).
size_t export_classifier(const mcx::Tree& params, const PredictFn& predict, const std::string& path);

}  // namespace fashion
