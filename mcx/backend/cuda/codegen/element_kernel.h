// A GPU kernel for one fused group of element-wise ops, made from the same per-element rules as the CPU's
// generated code (kernelgen/element_emitter.h) with CUDA's libdevice for math functions, compiled to PTX
// through LLVM's NVPTX target (nvptx_compiler.h; kernel_source.h generates it). No LLVM in this header.
//
// The kernel's parameters are the leaves' device pointers, then the outputs' (in spec order), then the element
// count n (i64). Each thread computes elements i = global thread index, i + total threads, ... < n, so any
// launch grid covers the group. Outputs are contiguous (row-major over dims); a leaf is read through its
// strides over the same dims (0 where it is broadcast), with its element index computed in the kernel from
// the output index. The index is 32-bit when the group and every leaf's extent stay below 2^31 elements
// (cheaper), else 64-bit.
// An output may be the storage of a leaf only when that leaf is contiguous (each element reads its leaves
// before writing).
//
// Errors at generation: Unimplemented naming the op and dtype when a node has no per-element rule;
// InvalidArgument for a malformed spec (slot out of range, stride count not the rank).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/backend/cuda/codegen/ptx_kernel.h"
#include "mcx/core/dtype.h"
#include "mcx/kernelgen/element_node.h"

namespace mcx::cuda::codegen {

struct ElementKernelLeaf {
  DType dtype;
  std::vector<int64_t> strides;  // in elements, one per dim of the group (0: broadcast along that dim; negative:
                                 // read backwards, as a reverse does)
  int64_t offset = 0;            // element read at coordinates 0 (a slice's start)
};

struct ElementKernelSpec {
  std::vector<int64_t> dims;
  std::vector<ElementKernelLeaf> leaves;
  std::vector<kernelgen::ElementNode> nodes;  // slots: leaves first, then each node
  std::vector<int> outputs;                   // node indices whose values are written out
  // Where the outputs are written: empty, contiguously over dims; else a window of a larger array, element
  // (coordinates c) at out_offset + sum of c[d] * out_strides[d] (a concatenate's operand in its result).
  std::vector<int64_t> out_strides;
  int64_t out_offset = 0;
};

// Row-major strides of dims (the strides of a contiguous leaf).
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims);

}  // namespace mcx::cuda::codegen
