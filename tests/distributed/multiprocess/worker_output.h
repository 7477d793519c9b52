// Output helpers shared by the multi-process test workers (sharded_worker, collectives_worker,
// multihost_worker): whole lines written at once (lines of different threads never interleave), messages
// folded onto one line, and the "CHECK <name> OK|FAIL <details>" protocol the tests parse.
#pragma once

#include <cstdio>
#include <exception>
#include <functional>
#include <string>

namespace mcx::mptest {

inline void print_line(const std::string& line) {
  const std::string l = line + "\n";
  std::fwrite(l.data(), 1, l.size(), stdout);
  std::fflush(stdout);
}

inline std::string one_line(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = '|';
  }
  return s;
}

// Runs body (which returns "" for success or what went wrong; an exception is a failure) and prints its CHECK
// line. Returns whether it passed; counts failures.
class Checks {
 public:
  bool run(const std::string& name, const std::function<std::string()>& body) {
    std::string problem;
    try {
      problem = body();
    } catch (const std::exception& e) {
      problem = std::string("unexpected exception: ") + e.what();
    }
    print_line("CHECK " + name + (problem.empty() ? " OK" : " FAIL " + one_line(problem)));
    if (!problem.empty()) ++failures_;
    return problem.empty();
  }
  int failures() const { return failures_; }

 private:
  int failures_ = 0;
};

}  // namespace mcx::mptest
