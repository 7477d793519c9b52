// The CUDA executable's planning and code generation, without a GPU: real programs (element-wise chains,
// layout ops, constants, reshapes, and every other kind of kernel) are planned and every kernel generated and
// assembled for sm_90 (and sm_80); ops with no
// CUDA kernel are refused naming the instruction; executing without a device says so. Running the kernels is
// the gpu label's (tests/gpu).
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/backend/cuda/cuda_executable.h"
#include "absl/strings/str_cat.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/spmd_rules.h"
#include "mcx/ir/window_rules.h"

namespace mcx::cuda {
namespace {

using ::testing::HasSubstr;
using ir::OpKind;
using ir::ValueId;

const CudaDevices& no_devices() {
  static const CudaDevices none;
  return none;
}

TEST(CudaExecutable, PlansChainsLayoutOpsAndConstantsIntoAssembledKernels) {
  ir::ProgramBuilder b("layout");
  const ValueId x = b.add_parameter(AbstractValue{DType::kFloat32, concrete_shape({6, 10})});
  const ValueId row = b.add_parameter(AbstractValue{DType::kBFloat16, concrete_shape({10})});
  const ValueId t = b.transpose(x, {1, 0});
  const ValueId flat = b.reshape(t, concrete_shape({60}));  // no kernel: the same memory
  const ValueId rev = b.emit_or_throw(OpKind::kReverse, {flat}, {{"dimensions", std::vector<int64_t>{0}}});
  const ValueId sl = b.emit_or_throw(
      OpKind::kSlice, {rev},
      {{"start", concrete_shape({3})}, {"limit", concrete_shape({57})}, {"strides", std::vector<int64_t>{2}}});
  const ValueId bc = b.broadcast_in_dim(b.convert(row, DType::kFloat32), concrete_shape({6, 10}), {1});
  const ValueId y = b.binary(OpKind::kMul, b.unary(OpKind::kExp, x), bc);
  const ValueId z = b.binary(OpKind::kAdd, y, b.full_like(y, 1.0));
  const ir::Program program = std::move(b).build({z, sl, t});
  absl::StatusOr<std::shared_ptr<const CudaExecutable>> exe = CudaExecutable::compile(program, no_devices(), 90);
  ASSERT_TRUE(exe.ok()) << exe.status();
  // transpose, reverse, slice, the convert of the row, broadcast, and one fused exp*b+1 (the constant's
  // broadcast is its own copy kernel): every kernel is a cubin.
  EXPECT_GE((*exe)->kernels().size(), 6u);
  for (const CompiledKernel& k : (*exe)->kernels()) {
    EXPECT_EQ(k.format, KernelImageFormat::kCubin) << k.name;
    EXPECT_EQ(k.image.substr(0, 4), "\x7f" "ELF") << k.name;
  }
  EXPECT_EQ((*exe)->platform(), "cuda");
  // Without a device, execution says so.
  absl::StatusOr<std::vector<std::shared_ptr<const DeviceBuffer>>> out = (*exe)->execute({}, nullptr);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("this process has 0 CUDA devices"));

  // Serialised and read back (the compilation cache's round trip): the same program and kernels.
  absl::StatusOr<std::string> bytes = (*exe)->serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<std::shared_ptr<const CudaExecutable>> back = CudaExecutable::deserialize(*bytes, no_devices(), 90);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->program().name, "layout");
  ASSERT_EQ((*back)->kernels().size(), (*exe)->kernels().size());
  for (size_t k = 0; k < (*exe)->kernels().size(); ++k) EXPECT_EQ((*back)->kernels()[k].image, (*exe)->kernels()[k].image);
  // Another architecture or format is for the caller to compile; damaged bytes are refused.
  EXPECT_THAT(std::string(CudaExecutable::deserialize(*bytes, no_devices(), 80).status().message()),
              HasSubstr("a stored executable for sm_90; this process compiles for sm_80"));
  EXPECT_EQ(CudaExecutable::deserialize("MCXCPU01....", no_devices(), 90).status().code(),
            absl::StatusCode::kFailedPrecondition);
  for (size_t cut : {size_t{9}, bytes->size() / 2, bytes->size() - 1}) {
    EXPECT_EQ(CudaExecutable::deserialize(bytes->substr(0, cut), no_devices(), 90).status().code(),
              absl::StatusCode::kInvalidArgument)
        << "cut at " << cut;
  }
}

// Collectives need no kernel: they run through host staging (staged_spmd.h), so a program holding one compiles to
// the kernels of its other ops.
TEST(CudaExecutable, CollectivesCompileToStagedStepsWithoutKernels) {
  ir::ProgramBuilder b("collective");
  const ValueId x = b.add_parameter(AbstractValue{DType::kFloat32, concrete_shape({4, 4})});
  const ValueId e = b.unary(OpKind::kExp, x);
  const ValueId c = b.emit_or_throw(OpKind::kAllReduce, {e}, ir::all_reduce_attrs(ReduceOp::kSum, {0, 1}, 2));
  const ValueId g = b.emit_or_throw(OpKind::kAllGather, {c}, ir::all_gather_attrs(0, {0, 1}, 2));
  const ir::Program program = std::move(b).build({g});
  absl::StatusOr<std::shared_ptr<const CudaExecutable>> exe = CudaExecutable::compile(program, no_devices(), 90);
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ((*exe)->kernels().size(), 1u);  // exp
}

// Every kind of kernel beyond the element-wise ones (sort passes, scans, gathers and scatters, dynamic windows,
// padding, windowed reductions, convolutions, and the kernels of control-flow regions) generated and assembled
// for sm_90 and sm_80, for several dtypes.
TEST(CudaExecutable, EveryKernelKindAssemblesForBothArchitectures) {
  for (DType t : {DType::kInt32, DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    ir::ProgramBuilder b("kinds");
    const ValueId x = b.add_parameter(AbstractValue{t, concrete_shape({4, 6})});
    const ValueId idx = b.add_parameter(AbstractValue{DType::kInt64, concrete_shape({5})});
    const ValueId start = b.add_parameter(AbstractValue{DType::kInt32, concrete_shape({})});
    std::vector<ValueId> results;
    results.push_back(b.emit_or_throw(OpKind::kArgsort, {x}, {{"dimension", int64_t{1}}, {"descending", int64_t{1}}}));
    results.push_back(b.emit_or_throw(OpKind::kCumsum, {x}, {{"dimension", int64_t{0}}, {"reverse", int64_t{1}}}));
    const ValueId rows = b.emit_or_throw(OpKind::kTake, {x, idx});
    results.push_back(rows);
    results.push_back(b.emit_or_throw(OpKind::kScatterAdd, {x, idx, rows}));
    results.push_back(b.emit_or_throw(OpKind::kDynamicSlice, {x, start, start}, {{"sizes", concrete_shape({2, 3})}}));
    results.push_back(b.emit_or_throw(OpKind::kPad, {x, b.scalar_constant(t, 0)},
                                      {{"low", concrete_shape({1, -1})}, {"high", concrete_shape({0, 2})},
                                       {"interior", std::vector<int64_t>{1, 0}}}));
    ir::ReduceWindowConfig w;
    w.reduce = ReduceOp::kMax;
    w.window_dimensions = {2, 2};
    w.window_strides = {1, 2};
    w.padding_low = concrete_shape({1, 0});
    w.padding_high = concrete_shape({0, 1});
    results.push_back(b.emit_or_throw(OpKind::kReduceWindow, {x}, ir::reduce_window_attrs(w)));
    if (is_floating(t)) {
      ir::ConvConfig c;
      c.lhs_spec = {0, 1};
      c.rhs_spec = {0, 1};
      c.out_spec = {0, 1};
      results.push_back(b.emit_or_throw(OpKind::kConvGeneralDilated, {x, x}, ir::conv_attrs(c)));
    }
    const ir::Program program = std::move(b).build(results);
    for (int arch : {90, 80}) {
      SCOPED_TRACE(absl::StrCat(std::string(dtype_short_name(t)), " sm_", arch));
      absl::StatusOr<std::shared_ptr<const CudaExecutable>> exe = CudaExecutable::compile(program, no_devices(), arch);
      ASSERT_TRUE(exe.ok()) << exe.status();
      for (const CompiledKernel& k : (*exe)->kernels()) EXPECT_EQ(k.format, KernelImageFormat::kCubin) << k.name;
    }
  }
}

// A long row (8192 elements) is reduced in two passes (interleaved partials, then the row's partials): two
// kernels; a short one (1000) in one.
TEST(CudaExecutable, LongRowsAreReducedInTwoPasses) {
  for (const auto& [length, kernels] : {std::pair<int64_t, size_t>{8192, 2}, std::pair<int64_t, size_t>{1000, 1}}) {
    ir::ProgramBuilder b("rows");
    const ValueId x = b.add_parameter(AbstractValue{DType::kFloat16, concrete_shape({4, length})});
    const ir::Program program = std::move(b).build({b.reduce_sum(x, {1})});
    absl::StatusOr<std::shared_ptr<const CudaExecutable>> exe = CudaExecutable::compile(program, no_devices(), 90);
    ASSERT_TRUE(exe.ok()) << exe.status();
    EXPECT_EQ((*exe)->kernels().size(), kernels) << "length " << length;
  }
}

// A softmax's pieces: max and sum over the last axis, reductions over leading and middle axes, every kind.
TEST(CudaExecutable, ReductionsArePlannedAsReduceKernels) {
  ir::ProgramBuilder b("reduce");
  const ValueId x = b.add_parameter(AbstractValue{DType::kFloat32, concrete_shape({8, 5, 6})});
  const ValueId m = b.emit_or_throw(OpKind::kReduceMax, {x}, {{"dimensions", std::vector<int64_t>{2}}});
  const ValueId s = b.reduce_sum(b.unary(OpKind::kExp, x), {0, 2});
  const ValueId p = b.emit_or_throw(OpKind::kReduceProd, {x}, {{"dimensions", std::vector<int64_t>{1}}});
  const ValueId n = b.emit_or_throw(OpKind::kReduceMin, {x}, {{"dimensions", std::vector<int64_t>{0, 1, 2}}});
  const ValueId a = b.emit_or_throw(OpKind::kArgMax, {x}, {{"dimension", int64_t{1}}, {"index_dtype", DType::kInt32}});
  const ir::Program program = std::move(b).build({m, s, p, n, a});
  absl::StatusOr<std::shared_ptr<const CudaExecutable>> exe = CudaExecutable::compile(program, no_devices(), 90);
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ((*exe)->kernels().size(), 6u);  // 5 reductions and the exp
}

// dot_general maps onto cuBLASLt's batched row-major product: operands already in its order need no copy,
// others get one transpose kernel each; integer products are refused naming the op.
TEST(CudaExecutable, ProductsAreLaidOutForCublasLt) {
  auto dot = [](DType t, std::vector<int64_t> lhs, std::vector<int64_t> rhs, std::vector<int64_t> lb,
                std::vector<int64_t> lc, std::vector<int64_t> rb, std::vector<int64_t> rc) {
    ir::ProgramBuilder b("dot");
    const ValueId x = b.add_parameter(AbstractValue{t, concrete_shape(lhs)});
    const ValueId y = b.add_parameter(AbstractValue{t, concrete_shape(rhs)});
    const ValueId d = b.emit_or_throw(OpKind::kDotGeneral, {x, y},
                                      {{"lhs_batch", lb}, {"lhs_contracting", lc}, {"rhs_batch", rb}, {"rhs_contracting", rc}});
    return CudaExecutable::compile(std::move(b).build({d}), no_devices(), 90);
  };
  // [m,k] x [k,n]: no copies.
  absl::StatusOr<std::shared_ptr<const CudaExecutable>> plain = dot(DType::kFloat32, {8, 4}, {4, 6}, {}, {1}, {}, {0});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)->kernels().size(), 0u);
  // x @ w.T ([m,k] x [n,k]): the rhs transposed once.
  absl::StatusOr<std::shared_ptr<const CudaExecutable>> rhs_t = dot(DType::kBFloat16, {8, 4}, {6, 4}, {}, {1}, {}, {1});
  ASSERT_TRUE(rhs_t.ok()) << rhs_t.status();
  EXPECT_EQ((*rhs_t)->kernels().size(), 1u);
  // Batch in the middle of the lhs and last in the rhs, contracting first: both transposed.
  absl::StatusOr<std::shared_ptr<const CudaExecutable>> batched =
      dot(DType::kFloat64, {4, 3, 5}, {4, 7, 3}, {1}, {0}, {2}, {0});
  ASSERT_TRUE(batched.ok()) << batched.status();
  EXPECT_EQ((*batched)->kernels().size(), 2u);
  absl::StatusOr<std::shared_ptr<const CudaExecutable>> ints = dot(DType::kInt32, {8, 4}, {4, 6}, {}, {1}, {}, {0});
  ASSERT_FALSE(ints.ok());
  EXPECT_THAT(std::string(ints.status().message()),
              HasSubstr("(dot_general -> i32[8,6]) of @dot: the cuda platform multiplies float32, float16"));
}

// The random-number path of mcx::random (iota, concatenate, threefry2x32) plans into kernels that assemble.
TEST(CudaExecutable, RandomBitsIotaAndConcatenatePlan) {
  ir::ProgramBuilder b("random");
  const ValueId key = b.add_parameter(AbstractValue{DType::kUInt32, concrete_shape({2})});
  const ValueId i = b.emit_or_throw(OpKind::kIota, {}, {{"dtype", DType::kUInt32}, {"dimension", int64_t{0}},
                                                        {"shape", concrete_shape({3, 1})}});
  const ValueId pairs = b.emit_or_throw(OpKind::kConcatenate, {i, i}, {{"dimension", int64_t{1}}});
  const ValueId bits = b.emit_or_throw(OpKind::kThreefry2x32, {key, pairs});
  const ir::Program program = std::move(b).build({bits});
  absl::StatusOr<std::shared_ptr<const CudaExecutable>> exe = CudaExecutable::compile(program, no_devices(), 90);
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ((*exe)->kernels().size(), 4u);  // iota, two concatenate copies, threefry
}

TEST(CudaExecutable, SymbolicShapesAndBadProgramsAreRefused) {
  ir::ProgramBuilder b("bad");
  const ValueId x = b.add_parameter(AbstractValue{DType::kFloat32, concrete_shape({4})});
  ir::Program program = std::move(b).build({b.unary(OpKind::kExp, x)});
  program.results = {7};  // no such value
  EXPECT_EQ(CudaExecutable::compile(program, no_devices(), 90).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mcx::cuda
