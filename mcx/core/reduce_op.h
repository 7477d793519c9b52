// The reduction of a collective (all_reduce, reduce_scatter, psum, pmax, ...) and of a windowed reduction:
// a name shared by the IR, the kernels and the collectives layer, which none of them owns.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string_view>

namespace mcx {

enum class ReduceOp : uint8_t { kSum, kMax, kMin, kProd };
std::string_view reduce_op_name(ReduceOp op);  // "sum", "max", "min", "prod"

}  // namespace mcx
