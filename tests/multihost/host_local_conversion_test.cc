// host_local_array_to_global_array / global_array_to_host_local_array in one process with 4 CPU devices: eagerly
// (local and global coincide) and inside jit, vmap and grad, where a traced value is already global and the
// conversion pins its layout (a sharding constraint). Across processes (dimensions split over processes, and
// the refusal inside jit) they are tested by the multiprocess multihost worker.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/mcx.h"
#include "mcx/multihost/multihost.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

namespace mh = mcx::multihost;
using ::testing::HasSubstr;
using testing_util::error_of;
using testing_util::expect_allclose;

Mesh four() { return make_mesh({4}, {"i"}); }

std::vector<double> doubles(const Array& a) { return device_get(a).to_doubles(); }

TEST(HostLocalConversion, OneProcessHoldsTheWholeArrayEagerly) {
  const Array local = arange(8, DType::kFloat32);
  const Array global = mh::host_local_array_to_global_array(local, four(), P("i"));
  EXPECT_EQ(global.dims(), std::vector<int64_t>{8});
  EXPECT_TRUE(global.sharding() == Sharding(NamedSharding(four(), P("i"))));
  EXPECT_EQ(doubles(mh::global_array_to_host_local_array(global, four(), P("i"))), doubles(local));
}

TEST(HostLocalConversion, InsideJitTheValueIsPinnedToTheSpec) {
  auto f = jit([](const Array& x) {
    const Array g = mh::host_local_array_to_global_array(x, four(), P("i", None));
    return mh::global_array_to_host_local_array(g * 2.0f, four(), P("i", None));
  });
  const Array x = reshape(arange(8, DType::kFloat32), {4, 2});
  const Array y = f(x);
  EXPECT_TRUE(y.sharding() == Sharding(NamedSharding(four(), P("i", None))));
  std::vector<double> expected = doubles(x);
  for (double& v : expected) v *= 2;
  expect_allclose(y, expected);
  // Over a pytree with one spec per leaf, inside jit too.
  auto tree_f = jit([](const Tree& t) { return mh::host_local_array_to_global_array(t, four(), {P("i"), P()}); });
  const Tree out = tree_f(Tree{{"a", arange(4, DType::kFloat32)}, {"b", arange(3, DType::kFloat32)}});
  EXPECT_TRUE(out.at("a").array().sharding() == Sharding(NamedSharding(four(), P("i"))));
  EXPECT_TRUE(out.at("b").array().sharding() == Sharding(NamedSharding(four(), P())));
  expect_allclose(out.at("b").array(), {0, 1, 2});
}

TEST(HostLocalConversion, InsideVmapTheBatchDimensionIsLeftFree) {
  // Each example is a vector laid out over "i"; the batch of 3 is mapped (JAX's batching rule inserts an
  // unconstrained dimension into the spec).
  auto per_example = [](const Array& v) { return mh::host_local_array_to_global_array(v, four(), P("i")) + 1.0f; };
  const Array xs = reshape(arange(12, DType::kFloat32), {3, 4});
  const Array ys = vmap(per_example)(xs);
  EXPECT_EQ(ys.dims(), (std::vector<int64_t>{3, 4}));
  std::vector<double> expected = doubles(xs);
  for (double& v : expected) v += 1;
  expect_allclose(ys, expected);
  expect_allclose(jit(vmap(per_example))(xs), expected);
}

TEST(HostLocalConversion, UnderGradItIsTheIdentity) {
  auto loss = [](const Array& x) {
    const Array g = mh::host_local_array_to_global_array(x, four(), P("i"));
    return sum(g * g);
  };
  const Array x = arange(4, DType::kFloat32);
  expect_allclose(grad(loss)(x), {0, 2, 4, 6});
}

TEST(HostLocalConversion, ASpecThatDoesNotFitIsRefusedInsideATrace) {
  auto unknown_axis = jit([](const Array& x) { return mh::host_local_array_to_global_array(x, four(), P("i", "j")); });
  EXPECT_THAT(error_of([&] { (void)unknown_axis(arange(8, DType::kFloat32)); }),
              HasSubstr("names mesh axis 'j', which the mesh does not have"));
  auto too_long = jit([](const Array& x) { return mh::global_array_to_host_local_array(x, four(), P("i", None)); });
  EXPECT_THAT(error_of([&] { (void)too_long(arange(8, DType::kFloat32)); }),
              HasSubstr("global_array_to_host_local_array"));
}

}  // namespace
}  // namespace mcx
