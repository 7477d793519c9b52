#include "examples/train_fashion_mnist/classifier_export.h"

#include <fstream>

#include "examples/train_fashion_mnist/cnn_model.h"
#include "examples/train_fashion_mnist/fashion_data.h"
#include "mcx/core/error.h"
#include "mcx/trace/export.h"
#include "mcx/trace/ops.h"

namespace fashion {

using mcx::Array;
using mcx::Tree;

size_t export_classifier(const Tree& params, const PredictFn& predict, const std::string& path) {
  // Plain host-local constants: the artifact must not refer to the job's devices.
  const Tree local = mcx::tree_map([](const Array& leaf) { return Array(leaf.addressable_shards().front().data.to_host()); },
                                   params);
  auto classify = [local, predict](const Array& images) {
    const mcx::DimExpr batch = images.shape()[0];
    Array x = mcx::reshape(mcx::astype(images, mcx::DType::kFloat32), mcx::Shape{batch, kImageSide * kImageSide});
    x = (x / 255.0f - kPixelMean) / kPixelStd;
    return predict(local, x);
  };
  // Recorded for both platforms (the program is the same IR for each, as JAX's multi-platform export): an artifact
  // exported from a run on the GPU serves on a CPU and the other way round.
  mcx::Exported exported = mcx::export_fn(classify, {.name = "fashion_classify", .platforms = {"cpu", "cuda"}})(
      mcx::AbstractValue{mcx::DType::kUInt8, mcx::symbolic_shape("b, 28, 28")});
  const std::string bytes = exported.serialize();
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw mcx::Unavailable("[train_fashion_mnist] cannot write the artifact to " + path);
  return bytes.size();
}

}  // namespace fashion
