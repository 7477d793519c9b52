#include "tests/support/backend/element_cases.h"

#include <algorithm>
#include <limits>
#include <random>

#include "absl/strings/str_cat.h"
#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/backend/cpu/elementwise.h"
#include "mcx/backend/cpu/fusion.h"

namespace mcx::test {

using ir::OpKind;

Buffer interesting_values(DType t, int64_t n, uint64_t seed) {
  Buffer b = Buffer::uninitialized(t, {n});
  std::mt19937_64 rng(seed);
  dispatch_dtype(t, [&](auto v) {
    using T = decltype(v);
    if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
      // Special bit patterns (zeros, ones, subnormals, max, inf, quiet and signalling NaNs), then random bits.
      const bool half = std::is_same_v<T, float16_t>;
      const std::vector<uint16_t> special =
          half ? std::vector<uint16_t>{0x0000, 0x8000, 0x3c00, 0xbc00, 0x0001, 0x83ff, 0x7bff, 0xfbff, 0x7c00, 0xfc00,
                                       0x7e00, 0x7d01, 0xfe3f, 0x3800, 0x4500, 0x5640}
               : std::vector<uint16_t>{0x0000, 0x8000, 0x3f80, 0xbf80, 0x0001, 0x807f, 0x7f7f, 0xff7f, 0x7f80, 0xff80,
                                       0x7fc0, 0x7f81, 0xffc1, 0x3f00, 0x42b1, 0x4f80};
      T* p = b.mutable_data<T>();
      for (int64_t i = 0; i < n; ++i) {
        p[i].bits = i < static_cast<int64_t>(special.size()) ? special[i] : static_cast<uint16_t>(rng());
      }
      std::shuffle(p, p + n, rng);
    } else if constexpr (std::is_arithmetic_v<T>) {
      T* p = b.mutable_data<T>();
      std::vector<T> special;
      if constexpr (std::is_floating_point_v<T>) {
        using L = std::numeric_limits<T>;
        special = {T(0), -T(0), T(1), T(-1), T(0.5), T(-2.5), T(2.5), T(3.7), L::denorm_min(), -L::min(),
                   L::infinity(), -L::infinity(), L::quiet_NaN(), L::max(), L::lowest(), T(88.7), T(-103.3),
                   T(1e10), T(-3e9), T(127.5), T(-128.5), T(4294967295.5), T(1e-3)};
        std::uniform_real_distribution<double> d(-12, 12);
        for (int64_t i = 0; i < n; ++i) p[i] = i < static_cast<int64_t>(special.size()) ? special[i] : T(d(rng));
        // Shuffle so that special values meet each other in binary ops.
        std::shuffle(p, p + n, rng);
      } else if constexpr (std::is_same_v<T, bool>) {
        for (int64_t i = 0; i < n; ++i) p[i] = (rng() & 1) != 0;
      } else {
        using L = std::numeric_limits<T>;
        special = {T(0), T(1), L::max(), L::min(), T(7), T(3), T(2)};
        if constexpr (std::is_signed_v<T>) {
          special.push_back(T(-1));
          special.push_back(T(-7));
        }
        for (int64_t i = 0; i < n; ++i) {
          // Small values most of the time, so that pow and division stay interesting.
          p[i] = i < static_cast<int64_t>(special.size()) ? special[i]
                 : (rng() % 4 == 0) ? static_cast<T>(rng())
                                    : static_cast<T>(static_cast<int64_t>(rng() % 17) - (std::is_signed_v<T> ? 8 : 0));
        }
        std::shuffle(p, p + n, rng);
      }
    }
  });
  return b;
}

std::vector<ElementCase> all_element_cases() {
  const DType kTypes[] = {DType::kBool,   DType::kInt8,    DType::kInt16,    DType::kInt32,
                          DType::kInt64,  DType::kUInt8,   DType::kUInt32,   DType::kFloat16,
                          DType::kBFloat16, DType::kFloat32, DType::kFloat64};
  std::vector<ElementCase> cases;
  for (int k = 0; k < ir::kNumOpKinds; ++k) {
    const OpKind kind = static_cast<OpKind>(k);
    const bool fusible = ir::is_elementwise(kind) || kind == OpKind::kConvert || kind == OpKind::kIsFinite;
    if (!fusible) continue;
    const ir::OpClass c = ir::op_info(kind).op_class;
    for (DType r : kTypes) {
      for (DType o : kTypes) {
        ElementCase cs{kind, r, o, {}};
        if (kind == OpKind::kConvert || kind == OpKind::kIsFinite) {
          if (kind == OpKind::kIsFinite && r != DType::kBool) continue;
          cs.leaves = {o};
        } else if (c == ir::OpClass::kCompare) {
          if (r != DType::kBool) continue;
          cs.leaves = {o, o};
        } else if (kind == OpKind::kSelect) {
          if (o != r) continue;
          cs.leaves = {DType::kBool, r, r};
        } else {
          if (o != r) continue;
          cs.leaves.assign(ir::op_info(kind).arity, r);
        }
        if (!cpu::elementwise_supported(kind, r, o)) continue;
        cpu::FusedGroup g;
        g.leaf_dtypes = cs.leaves;
        cpu::FusedNode node{kind, r, o, {}};
        for (size_t a = 0; a < cs.leaves.size(); ++a) node.args.push_back(static_cast<int>(a));
        g.nodes = {node};
        g.outputs = {0};
        if (!cpu::codegen::unsupported_reason(g).empty()) continue;
        cases.push_back(std::move(cs));
      }
    }
  }
  return cases;
}

std::string element_case_name(const ElementCase& c) {
  return absl::StrCat(std::string(ir::op_name(c.kind)), " ", std::string(dtype_short_name(c.result)), "(",
                      std::string(dtype_short_name(c.operand)), ")");
}


}  // namespace mcx::test
