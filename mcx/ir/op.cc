#include "mcx/ir/op.h"

#include <array>

namespace mcx::ir {
namespace {

using C = OpClass;
constexpr int kVar = -1;

// One row per OpKind, in enum order (checked by the static_assert-like loop in op_info and by tests).
constexpr std::array<OpInfo, kNumOpKinds> kOps = {{
    {OpKind::kConstant, "constant", C::kNullary, 0, false},
    {OpKind::kIota, "iota", C::kNullary, 0, false},
    {OpKind::kNeg, "neg", C::kUnary, 1, true},
    {OpKind::kAbs, "abs", C::kUnary, 1, true},
    {OpKind::kSign, "sign", C::kUnary, 1, false},
    {OpKind::kExp, "exp", C::kUnary, 1, true},
    {OpKind::kLog, "log", C::kUnary, 1, true},
    {OpKind::kLog1p, "log1p", C::kUnary, 1, true},
    {OpKind::kExpm1, "expm1", C::kUnary, 1, true},
    {OpKind::kTanh, "tanh", C::kUnary, 1, true},
    {OpKind::kLogistic, "logistic", C::kUnary, 1, true},
    {OpKind::kSqrt, "sqrt", C::kUnary, 1, true},
    {OpKind::kRsqrt, "rsqrt", C::kUnary, 1, true},
    {OpKind::kFloor, "floor", C::kUnary, 1, false},
    {OpKind::kCeil, "ceil", C::kUnary, 1, false},
    {OpKind::kRound, "round", C::kUnary, 1, false},
    {OpKind::kSin, "sin", C::kUnary, 1, true},
    {OpKind::kCos, "cos", C::kUnary, 1, true},
    {OpKind::kNot, "not", C::kUnary, 1, false},
    {OpKind::kStopGradient, "stop_gradient", C::kUnary, 1, false},
    {OpKind::kIsFinite, "is_finite", C::kUnary, 1, false},
    {OpKind::kConvert, "convert", C::kUnary, 1, true},
    {OpKind::kAdd, "add", C::kBinary, 2, true},
    {OpKind::kSub, "sub", C::kBinary, 2, true},
    {OpKind::kMul, "mul", C::kBinary, 2, true},
    {OpKind::kDiv, "div", C::kBinary, 2, true},
    {OpKind::kRem, "rem", C::kBinary, 2, true},
    {OpKind::kPow, "pow", C::kBinary, 2, true},
    {OpKind::kMax, "max", C::kBinary, 2, true},
    {OpKind::kMin, "min", C::kBinary, 2, true},
    {OpKind::kAnd, "and", C::kBinary, 2, false},
    {OpKind::kOr, "or", C::kBinary, 2, false},
    {OpKind::kXor, "xor", C::kBinary, 2, false},
    {OpKind::kEq, "eq", C::kCompare, 2, false},
    {OpKind::kNe, "ne", C::kCompare, 2, false},
    {OpKind::kLt, "lt", C::kCompare, 2, false},
    {OpKind::kLe, "le", C::kCompare, 2, false},
    {OpKind::kGt, "gt", C::kCompare, 2, false},
    {OpKind::kGe, "ge", C::kCompare, 2, false},
    {OpKind::kSelect, "select", C::kTernary, 3, true},
    {OpKind::kClamp, "clamp", C::kTernary, 3, true},
    {OpKind::kBroadcastInDim, "broadcast_in_dim", C::kOther, 1, true},
    {OpKind::kReshape, "reshape", C::kOther, 1, true},
    {OpKind::kTranspose, "transpose", C::kOther, 1, true},
    {OpKind::kSlice, "slice", C::kOther, 1, true},
    {OpKind::kDynamicSlice, "dynamic_slice", C::kOther, kVar, true},
    {OpKind::kDynamicUpdateSlice, "dynamic_update_slice", C::kOther, kVar, true},
    {OpKind::kConcatenate, "concatenate", C::kOther, kVar, true},
    {OpKind::kPad, "pad", C::kOther, 2, true},
    {OpKind::kReverse, "reverse", C::kOther, 1, true},
    {OpKind::kReduceSum, "reduce_sum", C::kOther, 1, true},
    {OpKind::kReduceMax, "reduce_max", C::kOther, 1, true},
    {OpKind::kReduceMin, "reduce_min", C::kOther, 1, true},
    {OpKind::kReduceProd, "reduce_prod", C::kOther, 1, true},
    {OpKind::kArgMax, "argmax", C::kOther, 1, false},
    {OpKind::kArgMin, "argmin", C::kOther, 1, false},
    {OpKind::kDotGeneral, "dot_general", C::kOther, 2, true},
    {OpKind::kCumsum, "cumsum", C::kOther, 1, true},
    {OpKind::kTake, "take", C::kOther, 2, true},
    {OpKind::kScatterAdd, "scatter_add", C::kOther, 3, true},
    {OpKind::kThreefry2x32, "threefry2x32", C::kOther, 2, false},
    {OpKind::kAllReduce, "all_reduce", C::kOther, 1, true, 2},
    {OpKind::kAllGather, "all_gather", C::kOther, 1, true, 2},
    {OpKind::kReduceScatter, "reduce_scatter", C::kOther, 1, true, 2},
    {OpKind::kAllToAll, "all_to_all", C::kOther, 1, true, 2},
    {OpKind::kCollectivePermute, "collective_permute", C::kOther, 1, true, 2},
    {OpKind::kAxisIndex, "axis_index", C::kNullary, 0, false, 2},
    {OpKind::kShardingConstraint, "sharding_constraint", C::kOther, 1, true, 2},
    {OpKind::kConvGeneralDilated, "conv_general_dilated", C::kOther, 2, true, 3},
    {OpKind::kReduceWindow, "reduce_window", C::kOther, 1, true, 3},
    {OpKind::kErf, "erf", C::kUnary, 1, true, 4},
    {OpKind::kArgsort, "argsort", C::kOther, 1, false, 4},
    {OpKind::kErfc, "erfc", C::kUnary, 1, true, 5},
    {OpKind::kErfInv, "erf_inv", C::kUnary, 1, true, 5},
    {OpKind::kRematBarrier, "remat_barrier", C::kUnary, 1, true, 6},
    {OpKind::kWhile, "while", C::kOther, kVar, true, 7},
    {OpKind::kScan, "scan", C::kOther, kVar, true, 7},
    {OpKind::kCond, "cond", C::kOther, kVar, true, 7},
    {OpKind::kCustomVjpCall, "custom_vjp_call", C::kOther, kVar, true, 8},
    {OpKind::kCustomJvpCall, "custom_jvp_call", C::kOther, kVar, true, 8},
    {OpKind::kShardMap, "shard_map", C::kOther, kVar, true, 9},
    {OpKind::kDebugPrint, "debug_print", C::kOther, kVar, false, 9},
}};

constexpr bool table_in_enum_order() {
  for (int i = 0; i < kNumOpKinds; ++i)
    if (static_cast<int>(kOps[i].kind) != i) return false;
  return true;
}
static_assert(table_in_enum_order(), "kOps must list every OpKind in enum order");

}  // namespace

const OpInfo& op_info(OpKind kind) { return kOps[static_cast<int>(kind)]; }

std::string_view op_name(OpKind kind) { return op_info(kind).name; }

std::optional<OpKind> op_from_name(std::string_view name) {
  for (const OpInfo& info : kOps)
    if (info.name == name) return info.kind;
  return std::nullopt;
}

}  // namespace mcx::ir
