// Serialised CPU executables (executable.h serialize/deserialize): a loaded executable computes bit for bit
// what the compiled one computes, over every op, control flow, custom rules, fused groups with generated
// kernels and row regions; damaged bytes are errors, never crashes.
#include <cstring>

#include "backend_test_util.h"
#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/core/error.h"
#include "mcx/core/hash.h"
#include "tests/support/compiled_programs.h"

namespace mcx::cpu {
namespace {

using test::bitwise_equal;
using test::compiled_programs;
using test::expect_buffers_near;
using test::mlp_softmax_program;
using test::random_args;
using test::specialised;

// Replaces the trailing SHA-256 of serialised executable bytes after an edit (the format's last 32 bytes).
void reseal(std::string& bytes) {
  const Sha256Digest d = sha256(std::string_view(bytes).substr(0, bytes.size() - 32));
  bytes.replace(bytes.size() - 32, 32, reinterpret_cast<const char*>(d.data()), d.size());
}

struct CodegenSetting {
  bool saved = codegen::enabled();
  ~CodegenSetting() { codegen::set_enabled(saved); }
};

TEST(ExecutableCodec, LoadedExecutablesMatchTheCompiledOnesBitForBit) {
  CodegenSetting restore;
  for (bool generate : {false, true}) {
    codegen::set_enabled(generate);
    for (const ir::Program& p : compiled_programs()) {
      SCOPED_TRACE(p.name + (generate ? " (codegen)" : " (interpreter)"));
      auto compiled = value_or_throw(CpuExecutable::compile(p));
      const std::string bytes = value_or_throw(compiled->serialize());
      const int64_t compiled_before = codegen::stats().kernels_compiled;
      auto loaded = CpuExecutable::deserialize(bytes);
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      EXPECT_EQ(codegen::stats().kernels_compiled, compiled_before) << "loading compiled a kernel";
      EXPECT_EQ((*loaded)->program().name, p.name);
      EXPECT_EQ((*loaded)->has_collectives(), compiled->has_collectives());
      EXPECT_EQ(value_or_throw((*loaded)->serialize()), bytes) << "serialise(load(bytes)) != bytes";
      const std::vector<Buffer> args = random_args(p, 7);
      const std::vector<Buffer> want = value_or_throw(compiled->execute(args));
      const std::vector<Buffer> got = value_or_throw((*loaded)->execute(args));
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(bitwise_equal(got[i], want[i])) << "result " << i;
    }
  }
}

TEST(ExecutableCodec, KernelsTravelAsObjectCode) {
  if (!codegen::built_with_llvm()) GTEST_SKIP() << "built without LLVM (MCX_WITH_LLVM=OFF)";
  CodegenSetting restore;
  codegen::set_enabled(true);
  auto compiled = value_or_throw(CpuExecutable::compile(mlp_softmax_program()));
  const std::string bytes = value_or_throw(compiled->serialize());
  // The ELF magic of the relocatable object of at least one generated kernel is in the bytes.
  EXPECT_NE(bytes.find("\x7f" "ELF"), std::string::npos);
  // Loaded with code generation off, the same bytes run on the interpreter and agree to rounding.
  codegen::set_enabled(false);
  auto loaded = value_or_throw(CpuExecutable::deserialize(bytes));
  const std::vector<Buffer> args = random_args(mlp_softmax_program(), 3);
  const std::vector<Buffer> want = value_or_throw(compiled->execute(args));
  const std::vector<Buffer> got = value_or_throw(loaded->execute(args));
  for (size_t i = 0; i < want.size(); ++i) expect_buffers_near(got[i], want[i], 1e-6, 1e-6);
}

TEST(ExecutableCodec, AnotherVersionOrTargetIsFailedPrecondition) {
  if (!codegen::built_with_llvm()) GTEST_SKIP() << "built without LLVM (MCX_WITH_LLVM=OFF)";
  CodegenSetting restore;
  codegen::set_enabled(true);
  std::string bytes = value_or_throw(value_or_throw(CpuExecutable::compile(mlp_softmax_program()))->serialize());
  std::string newer = bytes;
  newer[8] = 9;  // the format version follows the 8-byte magic
  auto r = CpuExecutable::deserialize(newer);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("format version 9; this build reads version 3"), std::string::npos);
  // The target string follows: one changed character is another CPU.
  std::string other_cpu = bytes;
  const size_t at = other_cpu.find("cpu ");
  ASSERT_NE(at, std::string::npos);
  other_cpu[at + 4] ^= 0x20;
  r = CpuExecutable::deserialize(other_cpu);
  EXPECT_NE(r.status().message().find("checksum"), std::string::npos) << r.status();  // a damaged copy
  reseal(other_cpu);  // as if written by a process on another CPU
  r = CpuExecutable::deserialize(other_cpu);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("kernels generated for"), std::string::npos) << r.status();
}

TEST(ExecutableCodec, TruncatedExtendedOrFlippedBytesAreErrorsNeverCrashes) {
  CodegenSetting restore;
  codegen::set_enabled(false);  // no kernels: every byte is plan or program
  for (const ir::Program& p : {mlp_softmax_program(), specialised(ir::testing_programs::control_flow_program(), {{"b", 2}})}) {
    SCOPED_TRACE(p.name);
    const std::string bytes = value_or_throw(value_or_throw(CpuExecutable::compile(p))->serialize());
    for (size_t n = 0; n < bytes.size(); n += 5) {
      auto r = CpuExecutable::deserialize(std::string_view(bytes).substr(0, n));
      ASSERT_FALSE(r.ok()) << "truncated to " << n;
    }
    EXPECT_FALSE(CpuExecutable::deserialize(bytes + "x").ok());
    // The checksum makes every flipped byte an error: none yields a plan that could run wrong.
    int flips = 0, refused = 0;
    for (size_t i = 0; i < bytes.size(); i += 3) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ 0x41);
      ++flips;
      refused += CpuExecutable::deserialize(bad).ok() ? 0 : 1;
    }
    EXPECT_EQ(refused, flips);
    std::string flipped = bytes;
    flipped[bytes.size() / 2] ^= 0x08;
    auto damaged = CpuExecutable::deserialize(flipped);
    ASSERT_FALSE(damaged.ok());
    EXPECT_NE(damaged.status().message().find("checksum"), std::string::npos) << damaged.status();
  }
  auto r = CpuExecutable::deserialize("not an executable");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("MCXCPUEX"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace mcx::cpu
