// serve_model: classifies images with an exported mcx artifact alone. It links only what loading and running
// an artifact needs (the trace and export layers, no model code, no distributed runtime): the program, the
// weights and the pixel normalisation all come from the artifact that train_fashion_mnist --export wrote.
//
//   serve_model --artifact model.mcx --images data/fashion-mnist/t10k-images-idx3-ubyte.gz
//               --labels data/fashion-mnist/t10k-labels-idx1-ubyte.gz [--batch 500]     (one command line)
//
// The images are read from an IDX file (gzipped or raw, u8[n, 28, 28]) and fed in batches of --batch (the last one
// smaller: the artifact's batch dimension is symbolic). Prints the artifact's signature, then "accuracy A on N
// images" when --labels is given, and the throughput. Exit codes: 0 served, 2 on errors (a bad artifact, a
// file that is not IDX, an artifact whose signature does not take u8[b, 28, 28]).
#include <zlib.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "mcx/core/buffer.h"
#include "mcx/core/error.h"
#include "mcx/trace/export.h"

namespace {

constexpr const char* kTool = "serve_model";

// An IDX file's dimensions and its u8 payload (the header's type code must be 0x08).
struct IdxU8 {
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;
};

// Reads a whole file through zlib (which reads raw files as they are).
std::vector<uint8_t> read_all(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw mcx::NotFound("[serve_model] cannot open " + path);
  std::vector<uint8_t> out;
  uint8_t chunk[1 << 16];
  int n = 0;
  while ((n = gzread(f, chunk, sizeof(chunk))) > 0) out.insert(out.end(), chunk, chunk + n);
  const bool failed = n < 0;
  gzclose(f);
  if (failed) throw mcx::DataLoss("[serve_model] " + path + ": the gzip stream is corrupt");
  return out;
}

IdxU8 read_idx_u8(const std::string& path) {
  std::vector<uint8_t> raw = read_all(path);
  if (raw.size() < 4 || raw[0] != 0 || raw[1] != 0 || raw[2] != 0x08 || raw[3] == 0) {
    throw mcx::InvalidArgument("[serve_model] " + path + ": expected an IDX file of u8 (magic 00 00 08 <ndims>)");
  }
  const size_t ndims = raw[3];
  IdxU8 idx;
  size_t expected = 1;
  if (raw.size() < 4 + 4 * ndims) throw mcx::DataLoss("[serve_model] " + path + ": truncated header");
  for (size_t d = 0; d < ndims; ++d) {
    const uint8_t* p = raw.data() + 4 + 4 * d;
    const int64_t size = (int64_t{p[0]} << 24) | (int64_t{p[1]} << 16) | (int64_t{p[2]} << 8) | int64_t{p[3]};
    idx.dims.push_back(size);
    expected *= static_cast<size_t>(size);
  }
  const size_t header = 4 + 4 * ndims;
  if (raw.size() - header != expected) {
    throw mcx::DataLoss("[serve_model] " + path + ": expected " + std::to_string(expected) + " data bytes, found " +
                        std::to_string(raw.size() - header));
  }
  idx.bytes.assign(raw.begin() + static_cast<std::ptrdiff_t>(header), raw.end());
  return idx;
}

int serve(const std::string& artifact, const std::string& images_path, const std::string& labels_path, int64_t batch) {
  std::ifstream in(artifact, std::ios::binary);
  if (!in) throw mcx::NotFound("[serve_model] cannot open " + artifact);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const mcx::Exported model = mcx::Exported::deserialize(bytes);
  if (model.in_avals().size() != 1 || model.in_avals()[0].dtype != mcx::DType::kUInt8 ||
      model.in_avals()[0].shape.size() != 3) {
    throw mcx::InvalidArgument("[serve_model] " + artifact + ": expected an artifact taking u8[b, 28, 28], found " +
                               std::to_string(model.in_avals().size()) + " inputs, the first " +
                               model.in_avals().front().to_string());
  }
  std::printf("%s: %s (%zu bytes): '%s' %s -> %s\n", kTool, artifact.c_str(), bytes.size(), model.fun_name().c_str(),
              model.in_avals()[0].to_string().c_str(), model.out_avals()[0].to_string().c_str());
  const IdxU8 images = read_idx_u8(images_path);
  if (images.dims.size() != 3) {
    throw mcx::InvalidArgument("[serve_model] " + images_path + ": expected images u8[n, rows, cols], found " +
                               std::to_string(images.dims.size()) + " dimensions");
  }
  const int64_t n = images.dims[0], pixels = images.dims[1] * images.dims[2];
  std::vector<int32_t> predicted;
  predicted.reserve(static_cast<size_t>(n));
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t start = 0; start < n; start += batch) {
    const int64_t rows = std::min(batch, n - start);
    std::vector<uint8_t> chunk(images.bytes.begin() + start * pixels, images.bytes.begin() + (start + rows) * pixels);
    const mcx::Array x(mcx::Buffer::from_vector<uint8_t>(chunk, {rows, images.dims[1], images.dims[2]}));
    const std::vector<int32_t> out = model.call(x).at(0).to_vector<int32_t>();
    predicted.insert(predicted.end(), out.begin(), out.end());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: classified %lld images in batches of %lld in %.2f s (%.0f images/s)\n", kTool,
              static_cast<long long>(n), static_cast<long long>(batch), secs, static_cast<double>(n) / secs);
  if (!labels_path.empty()) {
    const IdxU8 labels = read_idx_u8(labels_path);
    if (labels.dims.size() != 1 || labels.dims[0] != n) {
      throw mcx::InvalidArgument("[serve_model] " + labels_path + ": expected " + std::to_string(n) + " labels, found " +
                                 std::to_string(labels.dims.empty() ? 0 : labels.dims[0]));
    }
    int64_t right = 0;
    for (int64_t i = 0; i < n; ++i) right += predicted[i] == labels.bytes[i];
    std::printf("%s: accuracy %.4f on %lld images\n", kTool, static_cast<double>(right) / static_cast<double>(n),
                static_cast<long long>(n));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string artifact, images, labels;
  int64_t batch = 500;
  CLI::App app{"Classifies images with an exported mcx artifact (train_fashion_mnist --export)."};
  app.add_option("--artifact", artifact, "the .mcx artifact")->required();
  app.add_option("--images", images, "IDX file of u8 images [n, 28, 28] (gzipped or raw)")->required();
  app.add_option("--labels", labels, "IDX file of u8 labels [n]: print the accuracy");
  app.add_option("--batch", batch, "images per call")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    return serve(artifact, images, labels, batch);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", kTool, e.what());
    return 2;
  }
}
