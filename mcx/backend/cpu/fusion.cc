// O3: the gathers (runs of a broadcast value, strided copies) are hot loops that -O2 leaves scalar.
#pragma GCC optimize("O3")

#include "mcx/backend/cpu/fusion.h"
#include "mcx/backend/cpu/multiversion.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/backend/cpu/elementwise.h"
#include "mcx/backend/cpu/thread_pool.h"

namespace mcx::cpu {
namespace {

// A leaf view with size-1 dims dropped and mergeable dims merged, so gathers walk few, long runs.
struct Leaf {
  const std::byte* data;
  DType dtype;
  int elem_size;
  bool contiguous;
  bool uniform;  // every stride is 0 (a broadcast scalar): one tile of it serves all tiles
  std::vector<int64_t> dims, strides;
};

Leaf prepare_leaf(const View& v) {
  Leaf l;
  l.data = v.data;
  l.dtype = v.dtype;
  l.elem_size = dtype_size(v.dtype);
  l.contiguous = v.is_contiguous();
  // Keep size-1 dims out; merge dims i, i+1 when stride[i] == stride[i+1] * dim[i+1] (linear order kept).
  for (int i = 0; i < v.rank(); ++i) {
    if (v.dims[i] == 1) continue;
    if (!l.dims.empty() && l.strides.back() == v.strides[i] * v.dims[i]) {
      l.dims.back() *= v.dims[i];
      l.strides.back() = v.strides[i];
      continue;
    }
    l.dims.push_back(v.dims[i]);
    l.strides.push_back(v.strides[i]);
  }
  l.uniform = std::all_of(l.strides.begin(), l.strides.end(), [](int64_t s) { return s == 0; });
  return l;
}

// Fills of broadcast runs (a row's value over the row, in softmax-like groups) are a hot store loop:
// AVX-512 / AVX2 clones store 4x / 2x wider than the baseline ISA.
MCX_TARGET_CLONES void fill32(uint32_t* p, uint32_t v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) p[i] = v;
}

template <typename T>
inline void fill_run(T* p, T v, int64_t n) {
  if constexpr (sizeof(T) == 4) fill32(reinterpret_cast<uint32_t*>(p), static_cast<uint32_t>(v), n);
  else std::fill(p, p + n, v);
}

// Copies elements [start, start + n) (row-major over the leaf's dims) into out (storage type, packed).
template <typename T>
void gather_typed(const Leaf& l, int64_t start, int64_t n, T* out) {
  const T* base = reinterpret_cast<const T*>(l.data);
  const int r = static_cast<int>(l.dims.size());
  if (r == 0) {
    std::fill(out, out + n, base[0]);
    return;
  }
  int64_t idx[16];
  int64_t off = 0, rem = start;
  for (int d = r - 1; d >= 0; --d) {
    idx[d] = rem % l.dims[d];
    rem /= l.dims[d];
    off += idx[d] * l.strides[d];
  }
  const int64_t inner = l.dims[r - 1], s_in = l.strides[r - 1];
  int64_t done = 0;
  while (done < n) {
    int64_t run = std::min(inner - idx[r - 1], n - done);
    const T* p = base + off;
    if (s_in == 1) {
      std::memcpy(out + done, p, run * sizeof(T));
    } else if (s_in == 0) {
      fill_run(out + done, *p, run);
    } else {
      for (int64_t i = 0; i < run; ++i) out[done + i] = p[i * s_in];
    }
    done += run;
    // Advance the multi-index by `run` along the innermost dim, carrying outward.
    idx[r - 1] += run;
    off += run * s_in;
    for (int d = r - 1; d > 0 && idx[d] == l.dims[d]; --d) {
      off -= l.dims[d] * l.strides[d];
      idx[d] = 0;
      ++idx[d - 1];
      off += l.strides[d - 1];
    }
  }
}

void gather(const Leaf& l, int64_t start, int64_t n, void* out) {
  switch (l.elem_size) {
    case 1: return gather_typed(l, start, n, static_cast<uint8_t*>(out));
    case 2: return gather_typed(l, start, n, static_cast<uint16_t*>(out));
    case 4: return gather_typed(l, start, n, static_cast<uint32_t*>(out));
    default: return gather_typed(l, start, n, static_cast<uint64_t*>(out));
  }
}

bool needs_conversion(DType t) { return compute_dtype(t) != t; }

// Writes n ones of dtype t (the padding of a generated kernel's partial block: harmless for every op,
// e.g. no division by zero).
void fill_ones(DType t, std::byte* p, int64_t n) {
  dispatch_dtype(t, [&](auto v) {
    using T = decltype(v);
    std::fill_n(reinterpret_cast<T*>(p), n, T(1.0f));
  });
}

// One tile through g's generated kernel. ptr[i] holds leaf i's n values in its storage type (the kernel
// widens 16-bit floats itself); slot_mem(s) is this chunk's scratch; out has one entry per output.
template <typename SlotMem>
void run_kernel_tile(const FusedGroup& g, const std::vector<Leaf>& leaves, std::vector<const void*>& ptr,
                     const std::vector<std::byte*>& outs, int64_t start, int64_t n, SlotMem slot_mem,
                     std::vector<void*>& out) {
  const int num_leaves = static_cast<int>(leaves.size());
  const size_t num_outs = g.outputs.size();
  const int64_t padded = (n + kKernelBlock - 1) / kKernelBlock * kKernelBlock;
  if (padded == n) {
    for (size_t j = 0; j < num_outs; ++j) out[j] = outs[j] + start * dtype_size(g.nodes[g.outputs[j]].dtype);
    g.kernel->fn()(ptr.data(), out.data(), n);
    return;
  }
  // The partial last tile (it is the last tile of its chunk, so overwriting a uniform leaf's scratch past
  // n is safe): inputs padded with ones to a whole block, outputs into the node slots, then copied out.
  for (int i = 0; i < num_leaves; ++i) {
    std::byte* s = slot_mem(i);
    const int es = leaves[i].elem_size;
    if (ptr[i] != s) std::memcpy(s, ptr[i], n * es);
    fill_ones(leaves[i].dtype, s + n * es, padded - n);
    ptr[i] = s;
  }
  for (size_t j = 0; j < num_outs; ++j) out[j] = slot_mem(num_leaves + static_cast<int>(j));
  g.kernel->fn()(ptr.data(), out.data(), padded);
  for (size_t j = 0; j < num_outs; ++j) {
    const int es = dtype_size(g.nodes[g.outputs[j]].dtype);
    std::memcpy(outs[j] + start * es, out[j], n * es);
  }
}

}  // namespace

void run_fused(const FusedGroup& g, const std::vector<View>& leaves, const std::vector<std::byte*>& outs,
               int64_t rows) {
  std::vector<int64_t> dims = g.dims;
  if (rows >= 0 && !dims.empty()) dims[0] = rows;
  const int64_t total = product(dims);
  if (total == 0) return;
  const int num_leaves = static_cast<int>(g.leaf_dtypes.size());
  const int num_nodes = static_cast<int>(g.nodes.size());
  std::vector<Leaf> prepared;
  prepared.reserve(num_leaves);
  for (const View& v : leaves) prepared.push_back(prepare_leaf(v));
  for (const Leaf& l : prepared) {
    if (l.dims.size() > 16) throw std::logic_error("[cpu] fused leaf of rank > 16");
  }
  // Which node writes which output; such a node computes straight into the output buffer when its
  // storage type is its compute type and the output does not alias any leaf storage.
  std::vector<int> out_of_node(num_nodes, -1);
  for (size_t j = 0; j < g.outputs.size(); ++j) out_of_node[g.outputs[j]] = static_cast<int>(j);
  std::vector<bool> direct(num_nodes, false);
  for (int i = 0; i < num_nodes; ++i) {
    int j = out_of_node[i];
    if (j < 0 || needs_conversion(g.nodes[i].dtype)) continue;
    bool aliases = false;
    for (const View& v : leaves) {
      aliases |= (v.data == outs[j]);
    }
    direct[i] = !aliases;
  }

  const int64_t num_tiles = (total + kTileElements - 1) / kTileElements;
  const int num_slots = num_leaves + num_nodes;
  parallel_for(num_tiles, std::max<int64_t>(1, 32768 / kTileElements), [&](int64_t tb, int64_t te) {
    // Per-chunk scratch: one tile per slot (compute values) plus one for storage-typed gathers.
    const size_t slot_bytes = kTileElements * 8;
    std::unique_ptr<std::byte[]> scratch(new std::byte[slot_bytes * (num_slots + 1) + 64]);
    std::byte* base = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(scratch.get()) + 63) & ~uintptr_t{63});
    auto slot_mem = [&](int s) { return base + slot_bytes * s; };
    std::byte* staging = slot_mem(num_slots);
    std::vector<const void*> ptr(num_slots);
    std::vector<const void*> args;
    std::vector<bool> filled(num_leaves, false);
    std::vector<void*> kernel_out(g.outputs.size());
    for (int64_t t = tb; t < te; ++t) {
      const int64_t start = t * kTileElements;
      const int64_t n = std::min(kTileElements, total - start);
      for (int i = 0; i < num_leaves; ++i) {
        const Leaf& l = prepared[i];
        // A generated kernel reads 16-bit floats as stored; the interpreter computes on float tiles.
        const bool convert = needs_conversion(l.dtype) && !g.kernel;
        if (l.uniform && !l.contiguous) {
          if (!filled[i]) {  // as long as the longest tile, so it serves every tile
            const int64_t m = std::min(kTileElements, total);
            gather(l, 0, m, convert ? staging : slot_mem(i));
            if (convert) load_compute(l.dtype, staging, slot_mem(i), m);
            filled[i] = true;
          }
          ptr[i] = slot_mem(i);
          continue;
        }
        if (l.contiguous && !convert) {
          ptr[i] = l.data + start * l.elem_size;
          continue;
        }
        if (l.contiguous) {
          load_compute(l.dtype, l.data + start * l.elem_size, slot_mem(i), n);
        } else if (!convert) {
          gather(l, start, n, slot_mem(i));
        } else {
          gather(l, start, n, staging);
          load_compute(l.dtype, staging, slot_mem(i), n);
        }
        ptr[i] = slot_mem(i);
      }
      if (g.kernel) {
        run_kernel_tile(g, prepared, ptr, outs, start, n, slot_mem, kernel_out);
        continue;
      }
      for (int i = 0; i < num_nodes; ++i) {
        const FusedNode& node = g.nodes[i];
        args.clear();
        for (int a : node.args) args.push_back(ptr[a]);
        const int s = num_leaves + i;
        void* dst = direct[i] ? static_cast<void*>(outs[out_of_node[i]] + start * dtype_size(node.dtype))
                              : static_cast<void*>(slot_mem(s));
        eval_node(node, args.data(), dst, n);
        if (needs_conversion(node.dtype)) round_to_storage(node.dtype, static_cast<float*>(dst), n);
        ptr[s] = dst;
      }
      // Stores come last: an output may share storage with a leaf that later nodes of this tile read.
      for (size_t j = 0; j < g.outputs.size(); ++j) {
        const int i = g.outputs[j];
        if (direct[i]) continue;
        store_compute(g.nodes[i].dtype, ptr[num_leaves + i], outs[j] + start * dtype_size(g.nodes[i].dtype), n);
      }
    }
  });
}

}  // namespace mcx::cpu
