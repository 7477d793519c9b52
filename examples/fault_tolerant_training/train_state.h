// The training state of fault_tolerant_training (parameters, Adam moments, steps taken) and what the program
// does with it outside a step: put this process's copy onto a mesh, digest it, save it at a preemption sync
// point and load it back to resume.
//
// The saved form is a directory of one .npy file per leaf (readable by numpy) plus a "steps" file written last;
// it is written by one process into "<dir>.partial" and renamed over <dir>, so a run killed while saving leaves
// the previous state. (A stand-in until sharded checkpoints land in mcx; every replica holds the whole state.)
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

// Writes `state` under `dir` (see above). Throws mcx::Error (Unavailable/DataLoss style messages naming the file).
void save_state(const TrainState& state, const std::string& dir);

// Reads a state saved by save_state, checking every leaf against `like` (same structure, dtypes and shapes);
// InvalidArgument naming the file and the leaf on a mismatch, NotFound when `dir` holds no saved state.
TrainState load_state(const std::string& dir, const TrainState& like);

}  // namespace fault_tolerant
