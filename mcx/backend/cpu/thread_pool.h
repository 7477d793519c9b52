// The shared CPU thread pool. Size from MCX_CPU_THREADS (default: hardware concurrency), settable at run
// time. OpenBLAS uses the same thread count, except while a reduced intra-op budget is active in some
// thread (ScopedIntraOpThreads below): then every GEMM runs single-threaded on its caller, because
// OpenBLAS's one thread server would serialise concurrent callers. parallel_for splits [0, n) into chunks of at least `grain` items; it runs inline when n is small
// or when called from inside a pool worker (no nested parallelism, no deadlock).
#pragma once

#include <cstdint>
#include <functional>

namespace mcx::cpu {

void set_num_threads(int n);  // n >= 1; takes effect for the next parallel_for
int num_threads();

// Threads one op may use on the calling thread: num_threads(), or less inside a ScopedIntraOpThreads.
// When several device streams run at once (SPMD on N virtual devices), each stream gets a share of the
// cores, so kernels do not fight over the pool (and GEMMs do not queue on OpenBLAS's thread server).
int intra_op_threads();
class ScopedIntraOpThreads {
 public:
  explicit ScopedIntraOpThreads(int n);  // n >= 1
  ~ScopedIntraOpThreads();
  ScopedIntraOpThreads(const ScopedIntraOpThreads&) = delete;
  ScopedIntraOpThreads& operator=(const ScopedIntraOpThreads&) = delete;

 private:
  int previous_;
  bool limited_ = false;
};

// While alive, OpenBLAS runs every call single-threaded on its caller (process-wide, by the same mechanism
// as a reduced ScopedIntraOpThreads), without limiting parallel_for: for kernels that call BLAS from
// inside parallel_for chunks, one single-threaded GEMM per worker instead of GEMMs queueing on
// OpenBLAS's thread server. Other threads' GEMMs meanwhile run single-threaded too.
class ScopedBlasOnCaller {
 public:
  ScopedBlasOnCaller();
  ~ScopedBlasOnCaller();
  ScopedBlasOnCaller(const ScopedBlasOnCaller&) = delete;
  ScopedBlasOnCaller& operator=(const ScopedBlasOnCaller&) = delete;
};

// Calls fn(begin, end) over disjoint chunks covering [0, n); blocks until all are done. Exceptions thrown
// by fn are rethrown on the calling thread.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace mcx::cpu
