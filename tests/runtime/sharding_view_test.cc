// visualize_sharding (jax.debug.visualize_sharding): the grid of which device holds which box, for every rank
// it draws, replicated and partly replicated shardings, an empty dimension, and the rank it refuses.
#include "mcx/runtime/sharding_view.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "mcx/core/error.h"
#include "mcx/runtime/mesh.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;

TEST(VisualizeSharding, ATwoByTwoMeshOverRowsAndColumns) {
  const Mesh m = make_mesh({2, 2}, {"x", "y"});
  EXPECT_EQ(visualize_sharding(std::vector<int64_t>{4, 6}, NamedSharding(m, P("x", "y"))),
            "+-------+-------+\n"
            "| cpu:0 | cpu:1 |\n"
            "+-------+-------+\n"
            "| cpu:2 | cpu:3 |\n"
            "+-------+-------+\n");
  // Rows split over y, x replicated: each row block is held by the two devices of its y index.
  EXPECT_EQ(visualize_sharding(std::vector<int64_t>{4, 6}, NamedSharding(m, P("y", None))),
            "+-------------+\n"
            "| cpu:0,cpu:2 |\n"
            "+-------------+\n"
            "| cpu:1,cpu:3 |\n"
            "+-------------+\n");
}

TEST(VisualizeSharding, RankOneIsOneRowAndReplicatedIsOneCell) {
  const Mesh m = make_mesh({4}, {"d"});
  EXPECT_EQ(visualize_sharding(std::vector<int64_t>{8}, NamedSharding(m, P("d"))),
            "+-------+-------+-------+-------+\n"
            "| cpu:0 | cpu:1 | cpu:2 | cpu:3 |\n"
            "+-------+-------+-------+-------+\n");
  EXPECT_EQ(visualize_sharding(std::vector<int64_t>{8}, NamedSharding(make_mesh({2}, {"d"}), P())),
            "+-------------+\n"
            "| cpu:0,cpu:1 |\n"
            "+-------------+\n");
  EXPECT_EQ(visualize_sharding(std::vector<int64_t>{}, SingleDeviceSharding(local_devices()[3])),
            "+-------+\n"
            "| cpu:3 |\n"
            "+-------+\n");
  // An empty dimension still has its cells.
  EXPECT_EQ(visualize_sharding(std::vector<int64_t>{0, 4}, NamedSharding(make_mesh({2}, {"d"}), P(None, "d"))),
            "+-------+-------+\n"
            "| cpu:0 | cpu:1 |\n"
            "+-------+-------+\n");
}

TEST(VisualizeSharding, ARankAboveTwoIsRefused) {
  try {
    (void)visualize_sharding(std::vector<int64_t>{2, 2, 2}, NamedSharding(make_mesh({2}, {"d"}), P("d")));
    ADD_FAILURE() << "rank 3 was drawn";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("[visualize_sharding] expected an array of rank 0, 1 or 2, found rank 3"));
  }
}

}  // namespace
}  // namespace mcx
