#include "examples/fault_tolerant_training/train_state.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/core/hash.h"
#include "mcx/core/npy.h"
#include "mcx/mcx.h"

namespace fault_tolerant {
namespace {

namespace fs = std::filesystem;

const char* const kTrees[] = {"params", "m", "v"};

std::vector<mcx::Tree*> trees_of(TrainState& s) { return {&s.params, &s.m, &s.v}; }

std::string leaf_file(const std::string& dir, int tree, size_t leaf) {
  return absl::StrCat(dir, "/", kTrees[tree], "_", leaf, ".npy");
}

}  // namespace

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

void save_state(const TrainState& state, const std::string& dir) {
  const std::string partial = dir + ".partial";
  std::error_code ec;
  fs::remove_all(partial, ec);
  fs::create_directories(partial, ec);
  if (ec) throw mcx::Unavailable(absl::StrCat("[save_state] cannot create ", partial, ": ", ec.message()));
  TrainState copy = state;
  std::vector<mcx::Tree*> trees = trees_of(copy);
  for (int t = 0; t < 3; ++t) {
    const std::vector<mcx::Array> leaves = mcx::tree_leaves(*trees[t]);
    for (size_t i = 0; i < leaves.size(); ++i) {
      mcx::throw_if_error(
          mcx::write_npy(leaf_file(partial, t, i), leaves[i].addressable_shards().front().data.to_host()));
    }
  }
  {
    std::ofstream steps(partial + "/steps");
    steps << state.steps << "\n";
    if (!steps) throw mcx::Unavailable(absl::StrCat("[save_state] cannot write ", partial, "/steps"));
  }
  fs::remove_all(dir, ec);
  fs::rename(partial, dir, ec);
  if (ec) throw mcx::Unavailable(absl::StrCat("[save_state] cannot rename ", partial, " to ", dir, ": ", ec.message()));
}

TrainState load_state(const std::string& dir, const TrainState& like) {
  std::ifstream steps_file(dir + "/steps");
  if (!steps_file) throw mcx::NotFound(absl::StrCat("[load_state] no saved state in ", dir, " (no ", dir, "/steps)"));
  std::string line;
  std::getline(steps_file, line);
  TrainState out = like;
  if (!absl::SimpleAtoi(line, &out.steps) || out.steps < 0) {
    throw mcx::InvalidArgument(absl::StrCat("[load_state] ", dir, "/steps holds '", line, "', expected a step count"));
  }
  std::vector<mcx::Tree*> trees = trees_of(out);
  for (int t = 0; t < 3; ++t) {
    auto [leaves, def] = mcx::tree_flatten(*trees[t]);
    for (size_t i = 0; i < leaves.size(); ++i) {
      const std::string file = leaf_file(dir, t, i);
      mcx::Buffer b = mcx::value_or_throw(mcx::read_npy(file));
      if (b.dtype() != leaves[i].dtype() || b.dims() != leaves[i].dims()) {
        throw mcx::InvalidArgument(absl::StrCat("[load_state] ", file, " (leaf ", i, " of ", kTrees[t],
                                                ") does not match the model: expected ", leaves[i].aval().to_string(),
                                                ", found ", mcx::Array(b).aval().to_string()));
      }
      leaves[i] = mcx::Array(std::move(b));
    }
    *trees[t] = mcx::tree_unflatten<mcx::Tree>(def, leaves);
  }
  return out;
}

}  // namespace fault_tolerant
