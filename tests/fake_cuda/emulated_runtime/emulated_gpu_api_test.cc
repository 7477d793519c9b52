// The public API on the GPU, emulated (the stand-in driver running host-compiled kernels,
// MCX_CUDA_KERNEL_TARGET=host, with MCX_PLATFORMS=cuda,cpu: the GPU is the default device): jit, grad, vmap,
// control flow and an exported function called on GPU arrays, each against the same computation on the CPU; an
// asynchronous checkpoint of GPU arrays; uploads that do not wait behind the GPU's queued computations.
// What only a real GPU shows is the gpu label's (docs/gpu.md).
#include <chrono>
#include <cmath>
#include <future>

#include "gtest/gtest.h"
#include "mcx/checkpoint/checkpoint_manager.h"
#include "mcx/mcx.h"
#include "mcx/runtime/stream.h"
#include "tests/support/temp_dir.h"

namespace mcx {
namespace {

// The same values (within tol, relative to the larger magnitude) on the GPU and the CPU.
void expect_close(const Array& gpu, const Array& cpu, double tol) {
  const Buffer g = gpu.to_host().reshaped({gpu.to_host().num_elements()});
  const Buffer c = cpu.to_host().reshaped({cpu.to_host().num_elements()});
  ASSERT_EQ(g.dims(), c.dims());
  ASSERT_EQ(g.dtype(), DType::kFloat32);
  for (int64_t i = 0; i < g.num_elements(); ++i) {
    const double a = g.data<float>()[i], b = c.data<float>()[i];
    EXPECT_LE(std::abs(a - b), tol * std::max({1.0, std::abs(a), std::abs(b)})) << "element " << i;
  }
}

Array values(std::vector<int64_t> dims, float scale, float shift) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.37f * static_cast<float>(i) + shift);
  return Array(Buffer::from_vector<float>(v, std::move(dims)));
}

Array loss(const Array& w, const Array& x) { return sum(tanh(matmul(x, w)) * tanh(matmul(x, w)), {0, 1}); }

TEST(EmulatedGpuApi, TheGpuIsTheDefaultDevice) {
  EXPECT_EQ(default_platform(), "cuda");
  EXPECT_EQ(default_device().platform, "cuda");
}

TEST(EmulatedGpuApi, JitAndGradOnTheGpuMatchTheCpu) {
  const Device& cpu = local_devices("cpu")[0];
  const Array w = values({5, 3}, 0.5f, 0.1f), x = values({8, 5}, 1.0f, 0.7f);
  const Array g_gpu = jit(grad(loss))(w, x);
  const Array g_cpu = jit(grad(loss))(device_put(w, cpu), device_put(x, cpu));
  EXPECT_EQ(g_gpu.sharding().device_set()[0].platform, "cuda");
  EXPECT_EQ(g_cpu.sharding().device_set()[0].platform, "cpu");
  expect_close(g_gpu, g_cpu, 1e-5);
}

TEST(EmulatedGpuApi, VmapAndControlFlowOnTheGpuMatchTheCpu) {
  const Device& cpu = local_devices("cpu")[0];
  auto f = [](const Array& row) {
    auto [c, ys] = scan([](const Array& c, const Array& x) { return std::pair{tanh(c + x), c * 2.0f}; }, zeros({3}),
                        reshape(row, {4, 3}));
    return sum(c, {0}) + sum(ys, {0, 1});
  };
  const Array batch = values({6, 12}, 1.0f, 0.3f);
  expect_close(jit(vmap(f))(batch), jit(vmap(f))(device_put(batch, cpu)), 1e-5);
}

TEST(EmulatedGpuApi, AnExportedFunctionRunsOnGpuArrays) {
  const Array w = values({5, 3}, 0.5f, 0.2f);
  auto predict = [&](const Array& x) { return softmax(matmul(x, w), -1); };
  Exported e = export_fn(predict, {.platforms = {"cuda", "cpu"}})(AbstractValue{DType::kFloat32, symbolic_shape("b, 5")});
  Exported back = Exported::deserialize(e.serialize());
  const Array x = values({7, 5}, 1.0f, 0.9f);
  const std::vector<Array> on_gpu = back.call(x);
  const std::vector<Array> on_cpu = back.call(device_put(x, local_devices("cpu")[0]));
  ASSERT_EQ(on_gpu.size(), 1u);
  EXPECT_EQ(on_gpu[0].sharding().device_set()[0].platform, "cuda");
  expect_close(on_gpu[0], on_cpu[0], 1e-6);
}

// save_async leaves GPU shards on the device (a registered read) and the writer copies them to the host; the
// arrays given to the next step, donated or not, and the restored ones (back on the GPU) hold the saved values.
TEST(EmulatedGpuApi, AnAsynchronousCheckpointOfGpuArraysIsCopiedByItsWriter) {
  test::TempDir dir;
  const Array w = device_put(values({64, 32}, 0.5f, 0.2f), default_device());
  const Array b = device_put(values({32}, 0.1f, 0.9f), default_device());
  const Buffer w_host = w.to_host(), b_host = b.to_host();
  checkpoint::CheckpointManager ckpt(dir.path());
  ckpt.save_async(1, std::vector<Array>{w, b});
  auto step = jit([](const Array& p) { return p * 2.0f; }, {.donate_argnums = {0}});
  const Array doubled = step(w);  // w donated while the save may still be reading it
  ckpt.wait();
  const std::vector<Array> restored = ckpt.restore(1, std::vector<Array>{doubled, b});
  EXPECT_EQ(restored[0].sharding().device_set()[0].platform, "cuda");
  EXPECT_TRUE(restored[0].to_host().bitwise_equal(w_host));
  EXPECT_TRUE(restored[1].to_host().bitwise_equal(b_host));
  const Buffer d = doubled.to_host();
  for (int64_t i = 0; i < d.num_elements(); ++i) ASSERT_EQ(d.data<float>()[i], 2.0f * w_host.data<float>()[i]);
}

// A GPU copies host data beside its computations (Platform::copies_beside_compute): with the device's queue of
// computations held up, an upload (what the data loader's next batch does) still completes, on the device's
// upload queue; a computation on it then runs once the queue moves.
TEST(EmulatedGpuApi, AnUploadDoesNotWaitBehindTheQueuedComputations) {
  const Device gpu = default_device();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  stream_for(gpu).enqueue([released] { released.wait(); });  // the step still running
  const Array batch = make_array_from_callback({4, 3}, DType::kFloat32, SingleDeviceSharding(gpu), [](const IndexBox& box) {
    std::vector<float> v(12);
    for (int i = 0; i < 12; ++i) v[i] = static_cast<float>(i);
    return Buffer::from_vector<float>(v, box.shape());
  });
  auto uploaded = std::async(std::launch::async, [&] { batch.block_until_ready(); });
  const bool overlapped = uploaded.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  release.set_value();
  uploaded.wait();
  EXPECT_TRUE(overlapped) << "the upload waited for the computation queued before it";
  EXPECT_EQ((batch * 2.0f).to_host().data<float>()[11], 22.0f);
  EXPECT_TRUE(synchronize_device(gpu, absl::Now() + absl::Seconds(30)).ok());
}

}  // namespace
}  // namespace mcx
