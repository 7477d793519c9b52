// Fashion-MNIST through the mcx/data loader, as train_fashion_mnist reads it: the gzipped IDX files of
// scripts/fetch-fashion-mnist.sh, images normalised in the loader's workers to f32[784] rows, labels as i32,
// placed as global arrays split over a mesh's "data" axis.
#pragma once

#include <string>
#include <vector>

#include "mcx/data/loader.h"
#include "mcx/runtime/mesh.h"

namespace fashion {

// Mean and standard deviation of the training pixels scaled to [0, 1].
constexpr float kPixelMean = 0.2860f, kPixelStd = 0.3530f;

// "<dir>/<prefix>-images-idx3-ubyte.gz" and the labels; prefix "train" or "t10k".
std::string images_file(const std::string& dir, const std::string& prefix);
std::string labels_file(const std::string& dir, const std::string& prefix);

// One split's two sources, opened (decompressed) once and shared by every loader built on them.
struct FashionSplit {
  mcx::data::SourcePtr images, labels;
};
// prefix "train" or "t10k". Throws mcx::Error naming the file when one is missing or malformed.
FashionSplit open_split(const std::string& dir, const std::string& prefix);

// The loader fields over `mesh`: "image" f32[784] normalised ((p / 255 - mean) / std), split as
// P("data", None), and "label" i32[] split as P("data").
std::vector<mcx::data::Field> fashion_fields(const FashionSplit& split, const mcx::Mesh& mesh);

}  // namespace fashion
