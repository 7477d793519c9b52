#include "mcx/core/debug_output.h"

#include <cstdio>
#include <mutex>
#include <utility>

namespace mcx {
namespace {

struct SinkState {
  std::mutex mu;
  DebugPrintSink sink;  // guarded by mu; empty: stdout
};

SinkState& state() {
  static SinkState* s = new SinkState();  // never destroyed: device threads may print until process exit
  return *s;
}

}  // namespace

DebugPrintSink set_debug_print_sink(DebugPrintSink sink) {
  SinkState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::swap(s.sink, sink);
  return sink;
}

void write_debug_print(std::string_view line) {
  SinkState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.sink) {
    s.sink(line);
    return;
  }
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

}  // namespace mcx
