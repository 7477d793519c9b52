// Machine code for fused element-wise groups (docs/codegen.md): each FusedGroup (fusion.h) the planner forms
// is emitted as one LLVM IR function that computes every node of the group per element, in registers,
// optimised at O3 for the host CPU (the loop vectoriser widens it; transcendentals map to glibc's libmvec
// vector functions, the same ones the interpreter calls) and linked in process by ORC JIT. The interpreter
// (run_fused over eval_node) stays the reference and the fallback: MCX_CODEGEN=0, a build without LLVM
// (MCX_WITH_LLVM=OFF), a group the generator does not take (unsupported_reason), or a failed compile all
// run the interpreter instead.
//
// Results: bitwise equal to the interpreter for every op and dtype the generator takes, including the
// transcendentals (generated loops call the same libmvec vector functions as the interpreter's vmath, and
// a partial block is padded rather than run through scalar code; see kKernelBlock in fusion.h). One
// exception: on AVX-512 hosts the interpreter's AVX-512 clone and generated code may pick libmvec
// variants of different widths, which can differ in the last bit. tests/backend/codegen_test.cc checks it.
//
// Thread-safety: every function here is thread-safe. Generated code stays mapped until the process exits
// (kernels are shared by every executable with the same group signature, so the set is bounded by the
// number of distinct signatures, not by the number of compiles).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "mcx/platform/compiled_store.h"
#include "mcx/backend/cpu/fusion.h"

namespace mcx::cpu::codegen {

// The calling convention of a generated kernel: computes elements [0, n) of every output.
// leaves[k] points at n contiguous values of leaf k (its dtype in memory: bool as one byte 0/1, float16 and
// bfloat16 as their 16-bit patterns); outs[j] at n contiguous values of output j. An output may be exactly the storage of a leaf (element i read before
// element i is written), never a partial overlap.
using FusedKernelFn = void (*)(const void* const* leaves, void* const* outs, int64_t n);

struct GeneratedKernel {
  void* code = nullptr;  // the function: a FusedKernelFn (fn()) or a RowKernelFn (row_kernel.h)
  FusedKernelFn fn() const { return reinterpret_cast<FusedKernelFn>(code); }
  std::string symbol;       // the kernel's name in the JIT ("mcx_fused_<digest>", "mcx_rows_<digest>")
  bool from_store = false;  // object code loaded from the compiled-code store, not compiled
  bool from_peer = false;   // object code another process of the job compiled (kernel_sharing.h)
  double compile_ms = 0;    // compile (IR, optimisation, machine code) and link, or load and link
  std::string object;       // the relocatable object it was linked from (what a serialised executable keeps)
};

// Whether this build contains the LLVM code generator.
bool built_with_llvm();

// Whether CpuExecutable::compile generates code: built_with_llvm() and MCX_CODEGEN is not 0. Read once;
// set_enabled() overrides it for the rest of the process (tests and benchmarks compare both paths).
bool enabled();
void set_enabled(bool on);

// Groups with fewer nodes gain nothing from generation (the interpreter's kernel for one op is already a
// single vectorised loop), so the planner keeps them on the interpreter.
inline constexpr int kMinNodesToGenerate = 2;

// Why g cannot be generated, or "" when it can: integer pow, a kind/dtype the interpreter has no kernel for
// either. (float16/bfloat16 groups are generated: computed in float and rounded after every node, as the
// interpreter does.)
std::string unsupported_reason(const FusedGroup& g);

// A canonical description of g without its dims (leaf dtypes, nodes, outputs): equal signatures share one
// kernel. Also the input of the kernel's name.
std::string signature(const FusedGroup& g);

// Returns g's kernel: the one already made in this process for g's signature, else its object code from the
// compiled-code store (platform/compiled_store.h: the persistent compilation cache) linked in, else (MCX_SHARE_COMPILED, in a
// job) the object another process of the job compiled (kernel_sharing.h), else compiled (IR, O3, machine
// code: typically 5-20 ms per kernel on one core), offered to the store and linked in. Errors:
// Unimplemented when not built with LLVM or unsupported_reason(g) is not empty; Internal when LLVM fails
// (its message included). A stored object that does not load is logged and compiled instead.
absl::StatusOr<std::shared_ptr<const GeneratedKernel>> compile_fused(const FusedGroup& g);

// g's kernel from object code compiled for g's signature on this target_description() (a serialised
// executable's, executable.h): the kernel already in this process for the signature, else object linked in.
// Nothing is compiled. Errors: Unimplemented when not built with LLVM; Internal when the object does not
// link (the caller then compiles, or runs the interpreter).
absl::StatusOr<std::shared_ptr<const GeneratedKernel>> load_fused(const FusedGroup& g, std::string_view object);

// The generator's identity, for compilation-cache keys and diagnostics: LLVM version, host CPU name and
// its features ("llvm 19.1.7; cpu skylake; +avx2,+fma,..."); "none" without LLVM.
std::string target_description();
// target_description() as named key components (platform/compiled_store.h), one per part: llvm_version,
// generator, cpu, cpu_features (target_<i> for any further part), so a cache miss names the part that changed.
std::vector<KeyComponent> target_components();

// Process-wide counters (for stats and tests).
struct CodegenStats {
  int64_t kernels_compiled = 0;  // distinct signatures compiled
  int64_t kernels_loaded = 0;    // distinct signatures loaded from the compiled-code store or a serialised executable
  int64_t kernels_from_peers = 0;  // distinct signatures another process of the job compiled (MCX_SHARE_COMPILED)
  int64_t kernel_reuses = 0;     // compile_fused calls answered by a kernel already in this process
  int64_t kernels_checked = 0;   // store hits compiled again to compare (MCX_COMPILATION_CACHE_CHECK_CONTENTS)
  int64_t kernel_check_mismatches = 0;  // of those, stored objects that differed from the fresh one
  double compile_ms_total = 0;
  double load_ms_total = 0;
};
CodegenStats stats();

}  // namespace mcx::cpu::codegen
