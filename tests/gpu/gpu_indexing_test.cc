// The differential test of the CUDA backend's sorting, scanning and indexing kernels (label gpu; emulated on the
// host as emulated_gpu/... on every machine): argsort, cumsum, take, scatter_add, dynamic_slice,
// dynamic_update_slice and pad, on the GPU and on the CPU in one process, over inputs full of special values
// (NaN, infinities, signed zeros, integer extremes, ties) and indices out of range. Each kernel computes what the
// CPU does in the CPU's order, so every result is compared bit for bit (NaNs as NaNs: a sum's NaN may have
// another payload).
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mcx/core/dtype.h"
#include "mcx/ir/builder.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/support/backend/element_cases.h"

namespace mcx::test {
namespace {

using ir::OpKind;
using ir::ValueId;

// "" when a and b hold the same elements bit for bit, NaNs matching any NaN; else the first difference.
std::string difference(const Buffer& gpu, const Buffer& cpu) {
  if (gpu.dtype() != cpu.dtype() || gpu.dims() != cpu.dims()) {
    return absl::StrCat("types differ: gpu ", gpu.to_string(), " cpu ", cpu.to_string());
  }
  const size_t size = dtype_size(gpu.dtype());
  const auto* g = static_cast<const std::byte*>(gpu.data());
  const auto* c = static_cast<const std::byte*>(cpu.data());
  for (int64_t i = 0; i < gpu.num_elements(); ++i) {
    if (std::memcmp(g + i * size, c + i * size, size) == 0) continue;
    if (is_floating(gpu.dtype())) {
      const double gv = value_at(gpu, i), cv = value_at(cpu, i);
      if (std::isnan(gv) && std::isnan(cv)) continue;
      return absl::StrCat("element ", i, ": gpu ", gv, " cpu ", cv);
    }
    return absl::StrCat("element ", i, " differs");
  }
  return "";
}

// Runs program on both platforms and compares every result.
void expect_same_on_gpu_and_cpu(const ir::Program& program, const std::vector<Buffer>& args) {
  absl::StatusOr<std::vector<Buffer>> gpu = run_program(platform("cuda"), program, args);
  absl::StatusOr<std::vector<Buffer>> cpu = run_program(platform("cpu"), program, args);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_EQ(gpu->size(), cpu->size());
  for (size_t r = 0; r < gpu->size(); ++r) EXPECT_EQ(difference((*gpu)[r], (*cpu)[r]), "") << "result " << r;
}

// Values with many ties: interesting values, every other one replaced by one of a few repeated values.
Buffer values_with_ties(DType t, int64_t n, uint64_t seed) {
  Buffer v = interesting_values(t, n, seed);
  const Buffer few = interesting_values(t, 5, seed + 1);
  const size_t size = dtype_size(t);
  auto* p = static_cast<std::byte*>(v.mutable_data());
  for (int64_t i = 0; i < n; i += 2) std::memcpy(p + i * size, static_cast<const std::byte*>(few.data()) + (i / 2 % 5) * size, size);
  return v;
}

TEST(GpuIndexing, ArgsortIsTheCpusStableOrder) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::kInt8, DType::kUInt32, DType::kInt64, DType::kFloat16, DType::kBFloat16,
                  DType::kFloat32, DType::kFloat64}) {
    for (const std::vector<int64_t>& dims : {std::vector<int64_t>{5, 37, 3}, std::vector<int64_t>{64}, std::vector<int64_t>{1},
                                             std::vector<int64_t>{3, 0}, std::vector<int64_t>{2, 1000}}) {
      for (int64_t dim = 0; dim < static_cast<int64_t>(dims.size()); ++dim) {
        for (int64_t descending : {0, 1}) {
          SCOPED_TRACE(absl::StrCat(std::string(dtype_short_name(t)), " dims ", dims.size(), ":", dims[0], " dim ", dim,
                                    descending ? " descending" : " ascending"));
          ir::ProgramBuilder b("argsort");
          const ValueId x = b.add_parameter(AbstractValue{t, concrete_shape(dims)});
          const ValueId s = b.emit_or_throw(OpKind::kArgsort, {x}, {{"dimension", dim}, {"descending", descending}});
          int64_t n = 1;
          for (int64_t d : dims) n *= d;
          expect_same_on_gpu_and_cpu(std::move(b).build({s}), {values_with_ties(t, n, 3).reshaped(dims)});
        }
      }
    }
  }
}

TEST(GpuIndexing, CumsumIsTheCpusBitForBit) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::kBool, DType::kInt8, DType::kInt32, DType::kUInt32, DType::kInt64, DType::kFloat16,
                  DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    for (int64_t dim : {0, 1, 2}) {
      for (int64_t reverse : {0, 1}) {
        SCOPED_TRACE(absl::StrCat(std::string(dtype_short_name(t)), " dim ", dim, reverse ? " reversed" : ""));
        ir::ProgramBuilder b("cumsum");
        const ValueId x = b.add_parameter(AbstractValue{t, concrete_shape({6, 33, 5})});
        absl::StatusOr<ValueId> c = b.emit(OpKind::kCumsum, {x}, {{"dimension", dim}, {"reverse", reverse}});
        if (!c.ok()) continue;  // a dtype cumsum does not take
        expect_same_on_gpu_and_cpu(std::move(b).build({*c}), {interesting_values(t, 6 * 33 * 5, 4).reshaped({6, 33, 5})});
      }
    }
  }
}

// Indices in range, negative and past the end (both clamped), of several integer dtypes.
Buffer row_indices(DType t, int64_t n, int64_t rows) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back((i * 7) % (rows + 4) - 2);
  return integers_of(t, v);
}

TEST(GpuIndexing, TakeAndScatterAddClampIndicesAndAddDuplicatesInOrder) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::kInt8, DType::kInt32, DType::kInt64, DType::kFloat16, DType::kBFloat16, DType::kFloat32,
                  DType::kFloat64}) {
    for (DType index : {DType::kInt32, DType::kInt64, DType::kUInt8}) {
      SCOPED_TRACE(absl::StrCat(std::string(dtype_short_name(t)), " indices ", std::string(dtype_short_name(index))));
      const int64_t rows = 9, cols = 6, k = 40;  // 40 indices into 9 rows: many duplicates
      // Unsigned indices cannot be negative: past the end only.
      const Buffer idx = index == DType::kUInt8 ? integers_of(index, std::vector<int64_t>(k, 11)) : row_indices(index, k, rows);
      {
        ir::ProgramBuilder b("take");
        const ValueId x = b.add_parameter(AbstractValue{t, concrete_shape({rows, cols})});
        const ValueId i = b.add_parameter(AbstractValue{index, concrete_shape({k})});
        const ValueId r = b.emit_or_throw(OpKind::kTake, {x, i});
        expect_same_on_gpu_and_cpu(std::move(b).build({r}), {interesting_values(t, rows * cols, 5).reshaped({rows, cols}), idx});
      }
      {
        ir::ProgramBuilder b("scatter_add");
        const ValueId x = b.add_parameter(AbstractValue{t, concrete_shape({rows, cols})});
        const ValueId i = b.add_parameter(AbstractValue{index, concrete_shape({k})});
        const ValueId u = b.add_parameter(AbstractValue{t, concrete_shape({k, cols})});
        const ValueId r = b.emit_or_throw(OpKind::kScatterAdd, {x, i, u});
        expect_same_on_gpu_and_cpu(std::move(b).build({r}), {interesting_values(t, rows * cols, 6).reshaped({rows, cols}), idx,
                                                             interesting_values(t, k * cols, 7).reshaped({k, cols})});
      }
    }
  }
}

TEST(GpuIndexing, DynamicSlicesClampTheirStarts) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::kBool, DType::kInt16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    for (const std::vector<int64_t>& start : {std::vector<int64_t>{1, 2}, std::vector<int64_t>{-3, 100},
                                              std::vector<int64_t>{7, 0}}) {
      SCOPED_TRACE(absl::StrCat(std::string(dtype_short_name(t)), " start ", start[0], ",", start[1]));
      ir::ProgramBuilder b("dynamic");
      const ValueId x = b.add_parameter(AbstractValue{t, concrete_shape({8, 10})});
      const ValueId u = b.add_parameter(AbstractValue{t, concrete_shape({3, 4})});
      const ValueId s0 = b.add_parameter(AbstractValue{DType::kInt32, concrete_shape({})});
      const ValueId s1 = b.add_parameter(AbstractValue{DType::kInt64, concrete_shape({})});
      const ValueId slice = b.emit_or_throw(OpKind::kDynamicSlice, {x, s0, s1}, {{"sizes", concrete_shape({3, 4})}});
      const ValueId updated = b.emit_or_throw(OpKind::kDynamicUpdateSlice, {x, u, s0, s1});
      expect_same_on_gpu_and_cpu(std::move(b).build({slice, updated}),
                                 {interesting_values(t, 80, 8).reshaped({8, 10}), interesting_values(t, 12, 9).reshaped({3, 4}),
                                  Buffer::scalar<int32_t>(static_cast<int32_t>(start[0])), Buffer::scalar<int64_t>(start[1])});
    }
  }
}

TEST(GpuIndexing, PadWithEdgesInteriorAndCropping) {
  SKIP_WITHOUT_GPU();
  struct PadCase {
    std::vector<int64_t> low, high, interior;
  };
  for (DType t : {DType::kInt8, DType::kFloat16, DType::kFloat32}) {
    for (const PadCase& c : {PadCase{{1, 2}, {3, 0}, {0, 0}}, PadCase{{0, 1}, {1, 0}, {2, 1}},
                             PadCase{{-2, 1}, {1, -3}, {1, 0}}, PadCase{{-4, 0}, {0, 0}, {0, 0}}}) {
      SCOPED_TRACE(absl::StrCat(std::string(dtype_short_name(t)), " low ", c.low[0], ",", c.low[1], " interior ",
                                c.interior[0], ",", c.interior[1]));
      ir::ProgramBuilder b("pad");
      const ValueId x = b.add_parameter(AbstractValue{t, concrete_shape({4, 5})});
      const ValueId value = b.add_parameter(AbstractValue{t, concrete_shape({})});
      absl::StatusOr<ValueId> r = b.emit(OpKind::kPad, {x, value},
                                         {{"low", concrete_shape(c.low)}, {"high", concrete_shape(c.high)}, {"interior", c.interior}});
      ASSERT_TRUE(r.ok()) << r.status();
      expect_same_on_gpu_and_cpu(std::move(b).build({*r}),
                                 {interesting_values(t, 20, 10).reshaped({4, 5}), interesting_values(t, 1, 11).reshaped({})});
    }
  }
}

}  // namespace
}  // namespace mcx::test
