// Fused evaluation of a group of element-wise ops with one output shape, tile by tile.
//
// A FusedGroup is a small DAG: slots 0..L-1 are leaves (strided views supplied at run time, already
// broadcast/transposed to the group's dims, so no temporary is made for them), slots L.. are nodes in
// topological order. Each tile of kTileElements consecutive output elements (row-major) is computed in
// per-thread scratch; tiles are distributed over the thread pool. Tile boundaries depend only on the
// shape, never on the thread count, so results are bitwise identical for any MCX_CPU_THREADS.
// float16/bfloat16 values are computed in float and rounded to their type after every node, as if each
// op ran separately.
//
// A group may carry a generated kernel (codegen/fused_kernel.h): then each tile is one call of machine
// code that computes every node per element in registers, instead of one interpreter kernel per node.
// Tiling, leaf gathers and results (see fused_kernel.h for the two exceptions) stay the same.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "mcx/backend/cpu/view.h"
#include "mcx/core/dtype.h"
#include "mcx/ir/op.h"
#include "mcx/kernelgen/element_node.h"

namespace mcx::cpu {

inline constexpr int64_t kTileElements = 1024;

// One node: an element-wise op over earlier slots (kernelgen/element_node.h).
using FusedNode = kernelgen::ElementNode;

namespace codegen {
struct GeneratedKernel;
}

struct FusedGroup {
  std::vector<int64_t> dims;
  std::vector<DType> leaf_dtypes;
  std::vector<FusedNode> nodes;
  std::vector<int> outputs;  // node indices (not slots) whose values are written out
  // Machine code for this group (set by CpuExecutable::compile when code generation is on), or null.
  std::shared_ptr<const codegen::GeneratedKernel> kernel;
};

// Generated kernels are called on whole blocks of this many elements: a partial last tile is padded
// (inputs with ones, outputs into scratch), so the vectorised loop never runs its scalar remainder and
// every element goes through the same vector code, as in the interpreter's vmath.
inline constexpr int64_t kKernelBlock = 64;

// True when an element-wise op kind/dtype combination has a kernel (checked at compile time of a Program).
bool elementwise_supported(ir::OpKind kind, DType result, DType operand);

// Evaluates g. leaves[i] has dims g.dims and dtype g.leaf_dtypes[i]; outs[j] is a contiguous buffer of
// g.dims and dtype nodes[outputs[j]].dtype. An output may be the storage of a leaf (in-place reuse) only
// when that leaf is contiguous. Throws std::logic_error for an unsupported kind/dtype combination.
// With rows >= 0, g.dims[0] is taken to be rows (leaves and outputs then cover a block of rows of the
// group: executable.cc runs row-block regions this way).
void run_fused(const FusedGroup& g, const std::vector<View>& leaves, const std::vector<std::byte*>& outs,
               int64_t rows = -1);

}  // namespace mcx::cpu
