// Shared helpers for bench_core: median timing, the Python peer runner and JSON output.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mcx::bench {

struct Timing {
  double median_ms = 0;
  double min_ms = 0;
};

// Runs fn `warmup` times untimed, then `repeats` times, and returns the median and minimum wall time.
Timing time_ms(const std::function<void()>& fn, int warmup, int repeats);
// a and b timed alternately (a, b, a, b, ...), so that a drift of the machine's speed (another process, a
// frequency change) weighs on both alike: for ratios between two variants of one case.
std::pair<Timing, Timing> time_interleaved_ms(const std::function<void()>& a, const std::function<void()>& b,
                                              int warmup, int repeats);

// One peer result parsed from bench/peers/core_peers.py: case name -> (peer name -> timing, blas).
struct PeerResult {
  std::string peer;
  Timing timing;
  std::string blas;
};
using PeerResults = std::map<std::string, std::vector<PeerResult>>;

// Spawns `python core_peers.py --threads N --repeats R --warmup W --cases ...` and parses its JSON lines.
// Returns an empty map (and prints a warning to stderr) when the interpreter or the script fails: the
// mcx numbers are still reported. Blocks until the script exits; the script has its own bounded runtime
// (fixed repeats), and the whole command runs under `timeout` (timeout_s seconds).
PeerResults run_python_peers(const std::string& python, const std::string& script, int threads, int repeats,
                             int warmup, const std::vector<std::string>& cases, int timeout_s);

// The BLAS library name OpenBLAS reports about itself (openblas_get_config), e.g. "OpenBLAS 0.3.21 ...".
std::string openblas_config();

}  // namespace mcx::bench
