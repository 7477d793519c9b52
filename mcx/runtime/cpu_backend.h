// The CPU platform's settings as a program sees them (its thread count), and what compiling has cost so far on
// the selected platforms (kernels generated or loaded, executables and partitioned programs read back from the
// persistent compilation cache; compile_statistics.cc). Part of the public API (mcx/mcx.h); the backend's own
// headers stay internal.
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <cstdint>

namespace mcx {

// The threads of the CPU backend's pool (MCX_CPU_THREADS; default: the hardware's concurrency). n >= 1
// (InvalidArgument, thrown as mcx::Error, otherwise); takes effect for the next parallel kernel.
void set_num_cpu_threads(int n);
int num_cpu_threads();

// Counters since the process started.
struct CompileStatistics {
  int64_t kernels_compiled = 0;    // distinct fused kernels generated here
  double kernel_compile_ms = 0;    // total time generating them
  int64_t kernels_loaded = 0;      // distinct kernels loaded (compilation cache, serialised executables)
  double kernel_load_ms = 0;
  int64_t kernels_from_peers = 0;  // kernels another process of the job compiled (MCX_SHARE_COMPILED)
  int64_t executables_loaded = 0;  // executables read back from the compilation cache
  int64_t executables_compiled = 0;  // executables planned and compiled because the cache missed
  double executable_load_ms = 0;
  int64_t programs_partitioned = 0;  // SPMD programs partitioned here
  int64_t programs_loaded = 0;       // partitioned SPMD programs read back from the compilation cache
};
CompileStatistics compile_statistics();

}  // namespace mcx
