// Returns from main while every device stream still has work queued: element-wise kernels and GEMMs that
// call the CPU thread pool's parallel_for. The process must exit cleanly (exit code 0, no sanitizer
// report): the streams drain and join before the pool they use is stopped (core/process_exit.h). Before
// the ordered exit steps, the pool (a function-local static) was destroyed while stream threads still
// pushed onto its queue, which AddressSanitizer reports as a heap-use-after-free.
#include <cstdio>
#include <vector>

#include "mcx/mcx.h"

int main() {
  std::vector<mcx::Array> pending;
  for (const mcx::Device& d : mcx::local_devices()) {
    mcx::Array x = mcx::device_put(mcx::ones(mcx::concrete_shape({256, 256})), d);
    // Each eager op is enqueued on d's stream and returns at once; nothing below waits for them.
    for (int i = 0; i < 8; ++i) x = mcx::tanh(mcx::matmul(x, x) * 0.01f) + mcx::exp(x * 0.001f);
    pending.push_back(x);
  }
  std::printf("queued work on %zu devices; returning from main\n", pending.size());
  return 0;
}
