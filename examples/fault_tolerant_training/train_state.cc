#include "examples/fault_tolerant_training/train_state.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/core/hash.h"
#include "mcx/mcx.h"

namespace fault_tolerant {

mcx::Tree onto(const mcx::Tree& tree, const mcx::Mesh& mesh) {
  const mcx::Sharding replicated = mcx::NamedSharding(mesh, mcx::P());
  return mcx::tree_map(
      [&](const mcx::Array& leaf) {
        const mcx::Buffer host = leaf.addressable_shards().front().data.to_host();
        return mcx::make_array_from_callback(leaf.dims(), leaf.dtype(), replicated,
                                             [&](const mcx::IndexBox&) { return host; });
      },
      tree);
}

uint64_t digest(const mcx::Tree& tree) {
  std::string bytes;
  for (const mcx::Array& leaf : mcx::tree_leaves(tree)) {
    const mcx::Buffer b = leaf.addressable_shards().front().data.to_host();
    bytes.append(static_cast<const char*>(b.data()), static_cast<size_t>(b.nbytes()));
  }
  return mcx::fnv1a64(bytes);
}

mcx::Tree as_tree(const TrainState& state) {
  return mcx::Tree{{"params", state.params}, {"m", state.m}, {"v", state.v}};
}

TrainState from_tree(const mcx::Tree& tree, int64_t steps) {
  return TrainState{tree.at("params"), tree.at("m"), tree.at("v"), steps};
}

}  // namespace fault_tolerant
