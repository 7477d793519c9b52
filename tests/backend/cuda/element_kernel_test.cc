// The GPU's element-wise kernels, checked without a GPU: every op and dtype the CPU's code generator takes is
// generated from the shared per-element rules through LLVM's NVPTX target, and the PTX is assembled for sm_90
// (Hopper) and sm_80 (Ampere) with no register spills. Running them against the CPU is the gpu label's
// differential test.
#include <chrono>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/backend/cuda/codegen/kernel_source.h"
#include "mcx/backend/cuda/ptx_assembler.h"
#include "tests/support/backend/element_cases.h"

namespace mcx::cuda::codegen {
namespace {

using ::testing::HasSubstr;
using ir::OpKind;

// The spill bytes the assembler reports ("N bytes spill stores, M bytes spill loads", summed over every
// kernel), or -1 when it reports none.
int64_t spill_bytes(const std::string& info) {
  int64_t total = -1;
  const std::string marker = " bytes spill ";
  for (size_t at = info.find(marker); at != std::string::npos; at = info.find(marker, at + 1)) {
    size_t start = at;
    while (start > 0 && std::isdigit(static_cast<unsigned char>(info[start - 1]))) --start;
    if (start == at) continue;
    total = std::max<int64_t>(total, 0) + std::stoll(info.substr(start, at - start));
  }
  return total;
}

ElementKernelSpec single_op(const test::ElementCase& c, std::vector<int64_t> dims) {
  ElementKernelSpec spec;
  spec.dims = std::move(dims);
  kernelgen::ElementNode node{c.kind, c.result, c.operand, {}};
  for (size_t a = 0; a < c.leaves.size(); ++a) {
    spec.leaves.push_back({c.leaves[a], contiguous_strides(spec.dims)});
    node.args.push_back(static_cast<int>(a));
  }
  spec.nodes = {node};
  spec.outputs = {0};
  return spec;
}

// Generates and assembles spec for both architectures; returns the sm_90 PTX.
std::string generate_and_assemble(const ElementKernelSpec& spec, const std::string& name) {
  std::string ptx90;
  for (int arch : {90, 80}) {
    absl::StatusOr<PtxKernel> k = generate_ptx_kernel(spec, arch, name);
    EXPECT_TRUE(k.ok()) << "sm_" << arch << ": " << k.status();
    if (!k.ok()) return "";
    EXPECT_THAT(k->ptx, HasSubstr(absl::StrCat(".target sm_", arch)));
    EXPECT_THAT(k->ptx, HasSubstr(absl::StrCat(".entry ", name)));
    absl::StatusOr<AssembledKernel> a = assemble_ptx(k->ptx, arch);
    EXPECT_TRUE(a.ok()) << "sm_" << arch << ": " << a.status() << "\n" << k->ptx;
    if (!a.ok()) return "";
    EXPECT_EQ(spill_bytes(a->info), 0) << "sm_" << arch << ": " << a->info;
    if (arch == 90) ptx90 = k->ptx;
  }
  return ptx90;
}

TEST(CudaElementKernel, EveryOpAndDtypeAssemblesForHopperAndAmpereWithoutSpills) {
  const std::vector<test::ElementCase> cases = test::all_element_cases();
  ASSERT_GE(cases.size(), 350u);  // the bulk of the element-wise table, or this test would prove little
  const auto t0 = std::chrono::steady_clock::now();
  int done = 0;
  for (const test::ElementCase& c : cases) {
    SCOPED_TRACE(test::element_case_name(c));
    const std::string ptx = generate_and_assemble(single_op(c, {1000}), absl::StrCat("case_", done));
    if (ptx.empty()) continue;
    ++done;
  }
  EXPECT_EQ(done, static_cast<int>(cases.size()));
  std::printf("[cuda codegen] %d op/dtype cases generated and assembled for sm_90 and sm_80 in %.1f s\n", done,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

TEST(CudaElementKernel, MathFunctionsComeFromLibdeviceInlined) {
  test::ElementCase exp{OpKind::kExp, DType::kFloat32, DType::kFloat32, {DType::kFloat32}};
  const std::string ptx = generate_and_assemble(single_op(exp, {4096}), "exp_f32");
  // libdevice's __nv_expf is linked in and inlined: no call remains, and the fast ex2 instruction does the work.
  EXPECT_THAT(ptx, ::testing::Not(HasSubstr("call")));
  EXPECT_THAT(ptx, HasSubstr("ex2.approx"));
  // IEEE arithmetic around it (libdevice's own ex2.approx.ftz works on a scaled argument): no flush-to-zero
  // multiplications or additions.
  EXPECT_THAT(ptx, HasSubstr("mul.rn.f32"));
  EXPECT_THAT(ptx, ::testing::Not(HasSubstr("mul.rn.ftz")));
  EXPECT_THAT(ptx, ::testing::Not(HasSubstr("add.rn.ftz")));
}

// a * b + c stays a rounded multiplication and a rounded addition, as on the CPU: no fused multiply-add
// (LLVM's NVPTX target would contract them unless told not to), so the results agree bit for bit.
TEST(CudaElementKernel, MultiplyThenAddIsNotContractedIntoAnFma) {
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    ElementKernelSpec spec;
    spec.dims = {1024};
    for (int k = 0; k < 3; ++k) spec.leaves.push_back({t, {1}, 0});
    using N = kernelgen::ElementNode;
    spec.nodes = {N{OpKind::kMul, t, t, {0, 1}}, N{OpKind::kAdd, t, t, {3, 2}}};
    spec.outputs = {1};
    const std::string ptx = generate_and_assemble(spec, "mul_add");
    EXPECT_THAT(ptx, ::testing::Not(HasSubstr("fma.")));
    EXPECT_THAT(ptx, HasSubstr(t == DType::kFloat32 ? "mul.rn.f32" : "mul.rn.f64"));
  }
}

// exp(a) * b + 1 over a broadcast row b and a transposed (strided) leaf c, two outputs, one over a contiguous
// leaf: the index arithmetic for broadcast and strided leaves, and several outputs.
TEST(CudaElementKernel, BroadcastAndStridedLeavesAndSeveralOutputs) {
  ElementKernelSpec spec;
  spec.dims = {64, 96};
  spec.leaves = {{DType::kFloat32, {96, 1}},                // a: contiguous
                 {DType::kBFloat16, {0, 1}},                // b: one row, broadcast over rows
                 {DType::kFloat32, {1, 64}},                // c: the transpose of a 96x64 array
                 {DType::kFloat32, {0, 0}}};                // d: a scalar
  using N = kernelgen::ElementNode;
  spec.nodes = {N{OpKind::kExp, DType::kFloat32, DType::kFloat32, {0}},                 // slot 4
                N{OpKind::kConvert, DType::kFloat32, DType::kBFloat16, {1}},            // slot 5
                N{OpKind::kMul, DType::kFloat32, DType::kFloat32, {4, 5}},              // slot 6
                N{OpKind::kAdd, DType::kFloat32, DType::kFloat32, {6, 3}},              // slot 7
                N{OpKind::kMax, DType::kFloat32, DType::kFloat32, {7, 2}},              // slot 8
                N{OpKind::kConvert, DType::kFloat16, DType::kFloat32, {8}}};            // slot 9
  spec.outputs = {3, 5};
  const std::string ptx = generate_and_assemble(spec, "chain");
  EXPECT_THAT(ptx, HasSubstr(".param .u64 chain_param_5"));  // 4 leaves, 2 outputs, n
  EXPECT_THAT(ptx, HasSubstr(".param .u64 chain_param_6"));
}

TEST(CudaElementKernel, MoreThanTwoBillionElementsUseA64BitIndex) {
  test::ElementCase add{OpKind::kAdd, DType::kFloat32, DType::kFloat32, {DType::kFloat32, DType::kFloat32}};
  const std::string narrow = generate_and_assemble(single_op(add, {1 << 20}), "narrow");
  const std::string wide = generate_and_assemble(single_op(add, {int64_t{3} << 30}), "wide");
  // The loop's compare is on the index type.
  EXPECT_THAT(narrow, HasSubstr("setp.ge.u32"));
  EXPECT_THAT(wide, HasSubstr("setp.ge.u64"));
}

TEST(CudaElementKernel, UnsupportedNodesAndMalformedSpecsAreNamed) {
  ElementKernelSpec spec;
  spec.dims = {8};
  spec.leaves = {{DType::kFloat32, {1}}, {DType::kFloat32, {1}}};
  spec.nodes = {kernelgen::ElementNode{OpKind::kDotGeneral, DType::kFloat32, DType::kFloat32, {0, 1}}};
  spec.outputs = {0};
  absl::StatusOr<PtxKernel> k = generate_ptx_kernel(spec, 90, "dot");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("no rule for dot_general on f32"));

  spec.nodes = {kernelgen::ElementNode{OpKind::kAdd, DType::kFloat32, DType::kFloat32, {0, 2}}};
  k = generate_ptx_kernel(spec, 90, "bad_slot");
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("node 0 reads slot 2; expected a slot below 2"));

  spec.nodes[0].args = {0, 1};
  spec.leaves[1].strides = {1, 1};
  k = generate_ptx_kernel(spec, 90, "bad_strides");
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("leaf 1 has 2 strides; expected one per dim (1)"));

  spec.leaves[1].strides = {1};
  spec.outputs = {};
  EXPECT_EQ(generate_ptx_kernel(spec, 90, "no_outputs").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mcx::cuda::codegen
