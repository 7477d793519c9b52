#include "examples/train_fashion_mnist/fashion_data.h"

#include <cstring>

#include "mcx/data/idx_source.h"
#include "mcx/data/transform.h"
#include "mcx/runtime/sharding.h"

namespace fashion {

namespace data = mcx::data;

std::string images_file(const std::string& dir, const std::string& prefix) {
  return dir + "/" + prefix + "-images-idx3-ubyte.gz";
}
std::string labels_file(const std::string& dir, const std::string& prefix) {
  return dir + "/" + prefix + "-labels-idx1-ubyte.gz";
}

FashionSplit open_split(const std::string& dir, const std::string& prefix) {
  return {data::open_idx(images_file(dir, prefix)), data::open_idx(labels_file(dir, prefix))};
}

std::vector<data::Field> fashion_fields(const FashionSplit& split, const mcx::Mesh& mesh) {
  auto u8_to_i32 = data::map_example(
      "u8_to_i32",
      [](const data::ExampleSpec& s) -> absl::StatusOr<data::ExampleSpec> {
        return data::ExampleSpec{mcx::DType::kInt32, s.dims};
      },
      [](const data::ExampleSpec&, std::span<const std::byte> in, std::span<std::byte> out, uint64_t) {
        reinterpret_cast<int32_t*>(out.data())[0] = static_cast<int32_t>(in[0]);
      });
  auto flatten = data::map_example(
      "flatten",
      [](const data::ExampleSpec& s) -> absl::StatusOr<data::ExampleSpec> {
        return data::ExampleSpec{s.dtype, {s.num_elements()}};
      },
      [](const data::ExampleSpec&, std::span<const std::byte> in, std::span<std::byte> out, uint64_t) {
        std::memcpy(out.data(), in.data(), out.size());
      });
  return {{"image", split.images, mcx::NamedSharding(mesh, mcx::P("data", mcx::None)),
           {data::normalize(kPixelMean, kPixelStd), flatten}},
          {"label", split.labels, mcx::NamedSharding(mesh, mcx::P("data")), {u8_to_i32}}};
}

}  // namespace fashion
