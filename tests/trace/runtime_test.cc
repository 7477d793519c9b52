// Tests of the minimal runtime (devices, array values, the executable cache) as the trace layer uses it.
#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "mcx/ir/builder.h"
#include "mcx/runtime/executable_cache.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

TEST(RuntimeTest, DefaultDeviceIsTheFirstLocalCpuDevice) {
  ASSERT_EQ(local_devices().size(), static_cast<size_t>(local_device_count()));
  EXPECT_EQ(default_device().platform, "cpu");
  EXPECT_EQ(default_device().to_string(), "cpu:0");
  Array a = array<float>({1, 2}, {2});
  ASSERT_EQ(a.value().shards.size(), 1u);
  EXPECT_EQ(a.value().shards[0].device, default_device());
  EXPECT_EQ(a.value().aval.to_string(), "f32[2]");
}

ir::Program add_constant(float c) {
  ir::ProgramBuilder b("add_c");
  ir::ValueId x = b.add_parameter({DType::kFloat32, concrete_shape({2})});
  ir::ValueId k = b.constant(Buffer::from_vector<float>({c, c}, {2}));
  return std::move(b).build({b.binary(ir::OpKind::kAdd, x, k)});
}

TEST(RuntimeTest, ExecutableCacheKeysOnStructureAndConstantBits) {
  ExecutableCache cache;
  ir::Program p0 = add_constant(0.0f), pm0 = add_constant(-0.0f), p1 = add_constant(1.0f);
  EXPECT_NE(program_key(p0), program_key(pm0)) << "constants are compared bit for bit";
  EXPECT_NE(program_key(p0), program_key(p1));
  ir::Program renamed = p1;
  renamed.name = "other";
  EXPECT_EQ(program_key(p1), program_key(renamed)) << "the name is not part of the key";
  auto e1 = value_or_throw(cache.get_or_compile(p1));
  auto e2 = value_or_throw(cache.get_or_compile(renamed));
  EXPECT_EQ(e1.get(), e2.get());
  EXPECT_EQ(cache.size(), 1);
  EXPECT_EQ(cache.hits(), 1);
  std::vector<ArrayValue> args{ArrayValue::single(Buffer::from_vector<float>({1, 2}, {2}))};
  std::vector<ArrayValue> out = value_or_throw(execute(*e1, args));
  EXPECT_EQ(value_or_throw(out[0].to_buffer()).to_doubles(), (std::vector<double>{2, 3}));
  // Programs with symbolic shapes cannot be compiled; the error is returned, not cached.
  ir::ProgramBuilder b("sym");
  ir::ValueId x = b.add_parameter({DType::kFloat32, symbolic_shape("n")});
  ir::Program sym = std::move(b).build({b.unary(ir::OpKind::kExp, x)});
  EXPECT_FALSE(cache.get_or_compile(sym).ok());
  EXPECT_EQ(cache.size(), 1);
}

TEST(RuntimeTest, ToVectorIsExactForWideIntegers) {
  int64_t big = (int64_t{1} << 60) + 1;
  Array a = array<int64_t>({big}, {1});
  EXPECT_EQ(a.to_vector<int64_t>()[0], big);
  EXPECT_EQ(a.item<double>(), static_cast<double>(big));
}

}  // namespace
}  // namespace mcx
