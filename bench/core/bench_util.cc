#include "bench/core/bench_util.h"

#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>

#include "nlohmann/json.hpp"

namespace mcx::bench {

namespace {

double run_ms(const std::function<void()>& fn) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

Timing summarise(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  size_t n = t.size();
  double med = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  return {med, t.front()};
}

}  // namespace

Timing time_ms(const std::function<void()>& fn, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < std::max(repeats, 1); ++i) t.push_back(run_ms(fn));
  return summarise(std::move(t));
}

std::pair<Timing, Timing> time_interleaved_ms(const std::function<void()>& a, const std::function<void()>& b,
                                              int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) a(), b();
  std::vector<double> ta, tb;
  for (int i = 0; i < std::max(repeats, 1); ++i) {
    ta.push_back(run_ms(a));
    tb.push_back(run_ms(b));
  }
  return {summarise(std::move(ta)), summarise(std::move(tb))};
}

PeerResults run_python_peers(const std::string& python, const std::string& script, int threads, int repeats,
                             int warmup, const std::vector<std::string>& cases, int timeout_s) {
  std::string case_list;
  for (const auto& c : cases) case_list += (case_list.empty() ? "" : ",") + c;
  std::string cmd = "timeout " + std::to_string(timeout_s) + " " + python + " " + script + " --threads " +
                    std::to_string(threads) + " --repeats " + std::to_string(repeats) + " --warmup " +
                    std::to_string(warmup) + " --cases " + case_list;
  PeerResults out;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) {
    std::cerr << "bench_core: could not start peers: " << cmd << "\n";
    return out;
  }
  std::string line;
  char buf[4096];
  while (fgets(buf, sizeof(buf), pipe.get()) != nullptr) {
    line += buf;
    if (line.empty() || line.back() != '\n') continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    line.clear();
    if (j.is_discarded() || !j.is_object()) continue;
    if (j.contains("error")) {
      std::cerr << "bench_core: peer " << j.value("peer", "?") << " failed: " << j["error"] << "\n";
      continue;
    }
    PeerResult r;
    r.peer = j.value("peer", "");
    r.timing = {j.value("ms", 0.0), j.value("min_ms", 0.0)};
    r.blas = j.value("blas", "");
    out[j.value("case", "")].push_back(r);
  }
  int rc = pclose(pipe.release());
  if (rc != 0) std::cerr << "bench_core: peer command exited with status " << rc << ": " << cmd << "\n";
  return out;
}

std::string openblas_config() { return openblas_get_config(); }

}  // namespace mcx::bench
