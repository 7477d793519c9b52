// Runs a shell command and returns what it printed (stdout; append 2>&1 for stderr too). For tests that run
// their own binary again as a child (/proc/<pid>/exe --gtest_filter=...), with a `timeout` in the command.
#pragma once

#include <array>
#include <cstdio>
#include <string>

namespace mcx::test {

inline std::string run_command(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return "popen failed";
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  pclose(p);
  return out;
}

}  // namespace mcx::test
