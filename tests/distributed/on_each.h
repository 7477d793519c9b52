// Runs fn(0) .. fn(n-1) on n threads at once and joins them: the in-process tests' stand-in for n processes.
#pragma once

#include <functional>
#include <thread>
#include <vector>

namespace mcx::distributed {

inline void on_each(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> ts;
  for (int i = 0; i < n; ++i) ts.emplace_back([&, i] { fn(i); });
  for (auto& t : ts) t.join();
}

}  // namespace mcx::distributed
