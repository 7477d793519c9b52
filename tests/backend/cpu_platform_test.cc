// The CPU platform (backend/cpu/cpu_platform.h) through the platform interface only, against CpuExecutable
// run directly: registration, compile, execute, host transfers without copies, serialisation, and the errors
// for another platform's buffers.
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/backend/cpu/cpu_platform.h"
#include "mcx/core/error.h"
#include "mcx/ir/builder.h"
#include "mcx/platform/platform_registry.h"
#include "tests/support/platform_run.h"
#include "tests/support/test_util.h"

namespace mcx::cpu {
namespace {

using ::testing::HasSubstr;
using ir::OpKind;

Platform& cpu_platform() {
  throw_if_error(register_cpu_platform());
  return *value_or_throw(find_platform("cpu"));
}

// y = tanh(x * w) + c, r = reduce_sum(y): a fused group, a constant and a reduction.
ir::Program small_program() {
  ir::ProgramBuilder b("small");
  const ir::ValueId x = b.add_parameter({DType::kFloat32, concrete_shape({3, 5})});
  const ir::ValueId w = b.add_parameter({DType::kFloat32, concrete_shape({3, 5})});
  const ir::ValueId c = b.constant(Buffer::from_vector<float>(std::vector<float>(15, 0.5f), {3, 5}));
  const ir::ValueId y = b.binary(OpKind::kAdd, b.unary(OpKind::kTanh, b.binary(OpKind::kMul, x, w)), c);
  const ir::ValueId r = b.reduce_sum(y, {1});
  return std::move(b).build({y, r});
}

// A buffer of some other platform: what the CPU platform must refuse.
class ForeignBuffer final : public DeviceBuffer {
 public:
  std::string_view platform() const override { return "test"; }
  DType dtype() const override { return DType::kFloat32; }
  const std::vector<int64_t>& dims() const override { return dims_; }
  const Buffer* host_buffer() const override { return nullptr; }

 private:
  std::vector<int64_t> dims_{3, 5};
};

TEST(CpuPlatform, IsRegisteredOnceUsableAndNamesItsCompileSetting) {
  ASSERT_TRUE(register_cpu_platform().ok());
  ASSERT_TRUE(register_cpu_platform().ok());  // idempotent
  Platform& p = cpu_platform();
  EXPECT_EQ(p.name(), "cpu");
  EXPECT_TRUE(p.usable().ok());
  const std::vector<KeyComponent> key = p.compile_key();
  ASSERT_GE(key.size(), 3u);
  EXPECT_EQ(key[0].name, "options");
  EXPECT_EQ(key[0].value, codegen::enabled() ? "codegen=1" : "codegen=0");
  EXPECT_EQ(key[1], (KeyComponent{"executable_format", CpuExecutable::format_description()}));
  EXPECT_EQ(p.compile_setting(), codegen::enabled() ? 1u : 0u);
  const bool was_enabled = codegen::enabled();
  codegen::set_enabled(false);
  EXPECT_EQ(p.compile_key().back(), (KeyComponent{"target", "interpreter"}));
  EXPECT_EQ(p.compile_setting(), 0u);
  codegen::set_enabled(true);
  if (codegen::built_with_llvm()) {
    EXPECT_EQ(p.compile_key()[2].name, "llvm_version");
    EXPECT_EQ(p.compile_setting(), 1u);
  }
  codegen::set_enabled(was_enabled);
}

TEST(CpuPlatform, ExecutesBitForBitAsCpuExecutable) {
  Platform& p = cpu_platform();
  const ir::Program program = small_program();
  const std::vector<Buffer> args = {test::random_buffer(DType::kFloat32, {3, 5}, 1),
                                    test::random_buffer(DType::kFloat32, {3, 5}, 2)};
  std::shared_ptr<const Executable> exe = value_or_throw(p.compile(program));
  EXPECT_EQ(exe->platform(), "cpu");
  EXPECT_EQ(exe->program().num_params(), 2);
  EXPECT_FALSE(exe->has_collectives());
  const std::vector<Buffer> got = test::run_on_platform(p, *exe, args);
  const std::vector<Buffer> want = value_or_throw(value_or_throw(CpuExecutable::compile(program))->execute(args));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i].bitwise_equal(want[i])) << "result " << i;
}

TEST(CpuPlatform, HostTransfersShareStorage) {
  Platform& p = cpu_platform();
  const Buffer host = test::random_buffer(DType::kFloat64, {4, 2}, 3);
  std::shared_ptr<const DeviceBuffer> d = value_or_throw(p.from_host(host, 0));
  EXPECT_EQ(d->platform(), "cpu");
  EXPECT_EQ(d->dtype(), DType::kFloat64);
  EXPECT_EQ(d->dims(), (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(d->nbytes(), 64u);
  EXPECT_EQ(d->describe(), "f64[4,2] on cpu");
  ASSERT_NE(d->host_buffer(), nullptr);
  EXPECT_EQ(d->host_buffer()->data(), host.data());
  const Buffer back = value_or_throw(p.to_host(*d));
  EXPECT_EQ(back.data(), host.data());
  const absl::StatusOr<std::shared_ptr<const DeviceBuffer>> bad = p.from_host(host, -1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CpuPlatform, SerialisedExecutablesRunTheSame) {
  Platform& p = cpu_platform();
  const std::vector<Buffer> args = {test::random_buffer(DType::kFloat32, {3, 5}, 4),
                                    test::random_buffer(DType::kFloat32, {3, 5}, 5)};
  std::shared_ptr<const Executable> exe = value_or_throw(p.compile(small_program()));
  const std::string bytes = value_or_throw(exe->serialize());
  std::shared_ptr<const Executable> back = value_or_throw(p.deserialize(bytes));
  const std::vector<Buffer> a = test::run_on_platform(p, *exe, args);
  const std::vector<Buffer> b = test::run_on_platform(p, *back, args);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].bitwise_equal(b[i])) << "result " << i;
  std::string damaged = bytes;
  damaged[damaged.size() / 2] ^= 1;
  EXPECT_EQ(p.deserialize(damaged).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CpuPlatform, RefusesAnotherPlatformsBuffersAndWrongArguments) {
  Platform& p = cpu_platform();
  std::shared_ptr<const Executable> exe = value_or_throw(p.compile(small_program()));
  const ForeignBuffer foreign;
  std::shared_ptr<const DeviceBuffer> ok = value_or_throw(p.from_host(test::random_buffer(DType::kFloat32, {3, 5}, 6), 0));
  std::vector<const DeviceBuffer*> args = {&foreign, ok.get()};
  auto r = exe->execute(args, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("[cpu] argument 0 is a buffer of platform 'test' (f32[3,5] on test); copy it to the cpu first"));
  auto host = p.to_host(foreign);
  ASSERT_FALSE(host.ok());
  EXPECT_THAT(std::string(host.status().message()), HasSubstr("to_host's argument is a buffer of platform 'test'"));

  std::shared_ptr<const DeviceBuffer> wrong = value_or_throw(p.from_host(Buffer::zeros(DType::kInt32, {3, 5}), 0));
  args = {wrong.get(), ok.get()};
  r = exe->execute(args, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("argument 0: expected f32[3,5], found i32[3,5]"));
  args = {ok.get()};
  EXPECT_EQ(exe->execute(args, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CpuPlatform, CompileErrorsAreCpuExecutables) {
  Platform& p = cpu_platform();
  ir::ProgramBuilder b("sym");
  const ir::ValueId x = b.add_parameter({DType::kFloat32, symbolic_shape("n")});
  const ir::ValueId y = b.unary(OpKind::kExp, x);
  auto exe = p.compile(std::move(b).build({y}));
  ASSERT_FALSE(exe.ok());
  EXPECT_EQ(exe.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(exe.status().message()), HasSubstr("specialise the program to concrete shapes first"));
}

}  // namespace
}  // namespace mcx::cpu
