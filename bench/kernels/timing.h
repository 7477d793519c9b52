// Timing of the kernel benchmarks (bench_kernels, bench_gemm): the median and the minimum of timed runs.
// On a shared, loaded machine the minimum is the better estimate of what the code costs; the median is what a
// user sees under that load.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace mcx::bench {

struct Timing {
  double median, min;  // milliseconds
};

// Runs fn untimed once and then until `warm_up` has passed (operands in cache, threads awake), then times
// reps >= 1 runs.
inline Timing time_ms(int reps, const std::function<void()>& fn,
                      std::chrono::milliseconds warm_up = std::chrono::milliseconds(0)) {
  const auto warm_until = std::chrono::steady_clock::now() + warm_up;
  do {
    fn();
  } while (std::chrono::steady_clock::now() < warm_until);
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t[0]};
}

}  // namespace mcx::bench
