#include "tests/gpu/gpu_test_support.h"

#include "mcx/core/error.h"
#include "tests/support/cuda/registered_platforms.h"

namespace mcx::test {

Platform& platform(std::string_view name) { return registered_platform(name); }

double value_at(const Buffer& b, int64_t i) {
  double v = 0;
  dispatch_dtype(b.dtype(), [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
      v = static_cast<double>(static_cast<float>(b.data<T>()[i]));
    } else if constexpr (std::is_arithmetic_v<T>) {
      v = static_cast<double>(b.data<T>()[i]);
    }
  });
  return v;
}

Buffer integers_of(DType t, const std::vector<int64_t>& values) {
  Buffer out = Buffer::zeros(t, {static_cast<int64_t>(values.size())});
  dispatch_dtype(t, [&](auto z) {
    using T = decltype(z);
    if constexpr (std::is_integral_v<T>) {
      for (size_t i = 0; i < values.size(); ++i) out.mutable_data<T>()[i] = static_cast<T>(values[i]);
    }
  });
  return out;
}

std::string cuda_unusable_reason() {
  absl::Status st = platform("cuda").usable();
  return st.ok() ? "" : std::string(st.message());
}

absl::StatusOr<std::vector<Buffer>> run_program(Platform& platform, const ir::Program& program,
                                                const std::vector<Buffer>& args) {
  MCX_ASSIGN_OR_RETURN(std::shared_ptr<const Executable> exe, platform.compile(program));
  std::vector<std::shared_ptr<const DeviceBuffer>> held;
  std::vector<const DeviceBuffer*> raw;
  for (const Buffer& a : args) {
    MCX_ASSIGN_OR_RETURN(std::shared_ptr<const DeviceBuffer> b, platform.from_host(a, 0));
    raw.push_back(b.get());
    held.push_back(std::move(b));
  }
  MCX_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<const DeviceBuffer>> outs,
                       exe->execute(std::span<const DeviceBuffer* const>(raw.data(), raw.size()), nullptr));
  std::vector<Buffer> results;
  for (const auto& o : outs) {
    MCX_ASSIGN_OR_RETURN(Buffer h, platform.to_host(*o));
    results.push_back(std::move(h));
  }
  return results;
}

}  // namespace mcx::test
