// The shared CPU thread pool. Size from MCX_CPU_THREADS (default: hardware concurrency), settable at run
// time. parallel_for splits [0, n) into chunks of at least `grain` items; it runs inline when n is small
// or when called from inside a pool worker (no nested parallelism, no deadlock).
#pragma once

#include <cstdint>
#include <functional>

namespace mcx::cpu {

void set_num_threads(int n);  // n >= 1; takes effect for the next parallel_for
int num_threads();

// Calls fn(begin, end) over disjoint chunks covering [0, n); blocks until all are done. Exceptions thrown
// by fn are rethrown on the calling thread.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace mcx::cpu
