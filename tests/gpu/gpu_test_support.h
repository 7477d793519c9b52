// What the gpu-label tests share: the CPU and CUDA platforms side by side (registered once), a skip when the
// CUDA platform is not usable here (no driver or no GPU: the reason is printed, and a skipped GPU test is no
// evidence that the GPU works), and running one program on a platform from host buffers to host buffers.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "mcx/core/buffer.h"
#include "mcx/ir/program.h"
#include "mcx/platform/platform.h"

namespace mcx::test {

// The platform `name` ("cpu" or "cuda"), registering both on first use (registered_platforms.h).
Platform& platform(std::string_view name);

// Why the CUDA platform cannot run here, or "" when it can.
std::string cuda_unusable_reason();

#define SKIP_WITHOUT_GPU()                                                             \
  if (const std::string why = ::mcx::test::cuda_unusable_reason(); !why.empty())     \
  GTEST_SKIP() << "no usable CUDA platform here: " << why

// Element i (row-major) of b as a double (bool and integers converted, 16-bit floats widened).
double value_at(const Buffer& b, int64_t i);

// values as an array of integer dtype t (each converted as static_cast does).
Buffer integers_of(DType t, const std::vector<int64_t>& values);

// Compiles `program` on `platform`, copies `args` to its local device 0, runs it and copies the results back.
absl::StatusOr<std::vector<Buffer>> run_program(Platform& platform, const ir::Program& program,
                                                const std::vector<Buffer>& args);

}  // namespace mcx::test
