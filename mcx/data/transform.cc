#include "mcx/data/transform.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/data/mix.h"

namespace mcx::data {
namespace {

template <typename T>
void normalize_into(const T* src, float* dst, int64_t n, float scale, float mean, float inv_std) {
  for (int64_t i = 0; i < n; ++i) dst[i] = (static_cast<float>(src[i]) * scale - mean) * inv_std;
}

class Normalize final : public ExampleTransform {
 public:
  Normalize(float mean, float stddev) : mean_(mean), inv_std_(1.0f / stddev) {}
  std::string name() const override { return "normalize"; }
  absl::StatusOr<ExampleSpec> output_spec(const ExampleSpec& in) const override {
    if (in.dtype != DType::kUInt8 && in.dtype != DType::kFloat32 && in.dtype != DType::kInt32) {
      return absl::InvalidArgumentError(
          absl::StrCat("[data] normalize: expected u8, i32 or f32 examples, found ", in.to_string()));
    }
    return ExampleSpec{DType::kFloat32, in.dims};
  }
  void apply(const ExampleSpec& in, std::span<const std::byte> src, std::span<std::byte> dst, uint64_t) const override {
    const int64_t n = in.num_elements();
    auto* out = reinterpret_cast<float*>(dst.data());
    switch (in.dtype) {
      case DType::kUInt8:
        normalize_into(reinterpret_cast<const uint8_t*>(src.data()), out, n, 1.0f / 255.0f, mean_, inv_std_);
        break;
      case DType::kInt32: normalize_into(reinterpret_cast<const int32_t*>(src.data()), out, n, 1.0f, mean_, inv_std_); break;
      default: normalize_into(reinterpret_cast<const float*>(src.data()), out, n, 1.0f, mean_, inv_std_); break;
    }
  }

 private:
  float mean_, inv_std_;
};

class RandomFlip final : public ExampleTransform {
 public:
  explicit RandomFlip(int axis) : axis_(axis) {}
  std::string name() const override { return "random_flip"; }
  absl::StatusOr<ExampleSpec> output_spec(const ExampleSpec& in) const override {
    if (axis_ < 0 || axis_ >= static_cast<int>(in.dims.size())) {
      return absl::InvalidArgumentError(absl::StrCat("[data] random_flip: expected an axis in [0, ", in.dims.size(),
                                                     ") of ", in.to_string(), ", found ", axis_));
    }
    return in;
  }
  void apply(const ExampleSpec& in, std::span<const std::byte> src, std::span<std::byte> dst, uint64_t key) const override {
    if (key_draw(key, 0, 2) == 0) {
      std::memcpy(dst.data(), src.data(), dst.size());
      return;
    }
    // [outer, len, inner] view around the axis; reverse the middle dimension.
    int64_t outer = 1, inner = dtype_size(in.dtype);
    for (int d = 0; d < axis_; ++d) outer *= in.dims[d];
    for (size_t d = axis_ + 1; d < in.dims.size(); ++d) inner *= in.dims[d];
    const int64_t len = in.dims[axis_];
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < len; ++i) {
        std::memcpy(dst.data() + (o * len + i) * inner, src.data() + (o * len + (len - 1 - i)) * inner, inner);
      }
    }
  }

 private:
  int axis_;
};

class RandomCrop final : public ExampleTransform {
 public:
  explicit RandomCrop(int pad) : pad_(pad) {}
  std::string name() const override { return "random_crop"; }
  absl::StatusOr<ExampleSpec> output_spec(const ExampleSpec& in) const override {
    if (in.dims.size() < 2 || pad_ < 0) {
      return absl::InvalidArgumentError(absl::StrCat("[data] random_crop: expected examples of rank >= 2 and pad >= 0, found ",
                                                     in.to_string(), " and pad ", pad_));
    }
    return in;
  }
  void apply(const ExampleSpec& in, std::span<const std::byte> src, std::span<std::byte> dst, uint64_t key) const override {
    const size_t r = in.dims.size();
    const int64_t h = in.dims[r - 2], w = in.dims[r - 1];
    const int64_t e = dtype_size(in.dtype);
    const int64_t planes = in.num_elements() / std::max<int64_t>(h * w, 1);
    // Output (y, x) reads input (y + dy, x + dx), dy, dx in [-pad, pad]; outside the input reads zero.
    const int64_t dy = static_cast<int64_t>(key_draw(key, 0, 2 * pad_ + 1)) - pad_;
    const int64_t dx = static_cast<int64_t>(key_draw(key, 1, 2 * pad_ + 1)) - pad_;
    std::memset(dst.data(), 0, dst.size());
    const int64_t x0 = std::max<int64_t>(0, -dx), x1 = std::min<int64_t>(w, w - dx);
    if (x1 <= x0) return;
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t y = 0; y < h; ++y) {
        const int64_t sy = y + dy;
        if (sy < 0 || sy >= h) continue;
        std::memcpy(dst.data() + ((p * h + y) * w + x0) * e, src.data() + ((p * h + sy) * w + x0 + dx) * e, (x1 - x0) * e);
      }
    }
  }

 private:
  int pad_;
};

class MapExample final : public ExampleTransform {
 public:
  MapExample(std::string name, std::function<absl::StatusOr<ExampleSpec>(const ExampleSpec&)> out_spec, ExampleFn fn)
      : name_(std::move(name)), out_spec_(std::move(out_spec)), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  absl::StatusOr<ExampleSpec> output_spec(const ExampleSpec& in) const override { return out_spec_(in); }
  void apply(const ExampleSpec& in, std::span<const std::byte> src, std::span<std::byte> dst, uint64_t key) const override {
    fn_(in, src, dst, key);
  }

 private:
  std::string name_;
  std::function<absl::StatusOr<ExampleSpec>(const ExampleSpec&)> out_spec_;
  ExampleFn fn_;
};

}  // namespace

ExampleTransform::~ExampleTransform() = default;

TransformPtr normalize(float mean, float stddev) {
  if (!(stddev > 0)) throw InvalidArgument(absl::StrCat("[data] normalize: expected stddev > 0, found ", stddev));
  return std::make_shared<Normalize>(mean, stddev);
}
TransformPtr random_flip(int axis) { return std::make_shared<RandomFlip>(axis); }
TransformPtr random_crop(int pad) { return std::make_shared<RandomCrop>(pad); }
TransformPtr map_example(std::string name, std::function<absl::StatusOr<ExampleSpec>(const ExampleSpec&)> out_spec,
                         ExampleFn fn) {
  return std::make_shared<MapExample>(std::move(name), std::move(out_spec), std::move(fn));
}

uint64_t example_key(uint64_t seed, int64_t epoch, int64_t index, int field, int slot) {
  uint64_t k = mix64(seed ^ 0x243f6a8885a308d3ull);
  k = mix64(k ^ static_cast<uint64_t>(epoch));
  k = mix64(k ^ static_cast<uint64_t>(index));
  return mix64(k ^ (static_cast<uint64_t>(field) << 32 | static_cast<uint32_t>(slot)));
}

uint64_t key_draw(uint64_t key, uint64_t counter, uint64_t bound) {
  return bound <= 1 ? 0 : mix64(key + 0x9e3779b97f4a7c15ull * (counter + 1)) % bound;
}

}  // namespace mcx::data
