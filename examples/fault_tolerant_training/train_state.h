// The training state of fault_tolerant_training and train_fashion_mnist (parameters, Adam moments, steps
// taken) and what the programs do with it outside a step: put this process's copy onto a mesh, digest it, and
// give it the tree form {"params", "m", "v"} that mcx::checkpoint saves and restores (the step count is the
// checkpoint's step).
#pragma once

#include <cstdint>
#include <string>

#include "mcx/runtime/mesh.h"
#include "mcx/trace/pytree.h"

namespace fault_tolerant {

struct TrainState {
  mcx::Tree params, m, v;
  int64_t steps = 0;  // steps taken
};

// This process's copy of every leaf (all replicas are bitwise identical), replicated over `mesh`; no
// communication.
mcx::Tree onto(const mcx::Tree& tree, const mcx::Mesh& mesh);

// FNV-1a of this process's copy of every leaf's bytes (the tests compare it across processes).
uint64_t digest(const mcx::Tree& tree);

// {"params": ..., "m": ..., "v": ...}, and back (from_tree throws mcx::Error when a key is missing).
mcx::Tree as_tree(const TrainState& state);
TrainState from_tree(const mcx::Tree& tree, int64_t steps);

}  // namespace fault_tolerant
