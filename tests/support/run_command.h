// Runs a shell command and returns what it printed (stdout; append 2>&1 for stderr too). For tests that run
// their own binary again as a child (/proc/<pid>/exe --gtest_filter=...), with a `timeout` in the command.
#pragma once

#include <unistd.h>

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

// The value after " name=" in a child's report line ("report compiled=3 loaded=0 ..."), or "missing".
inline std::string report_field(const std::string& out, const std::string& name) {
  const size_t at = out.find(" " + name + "=");
  if (at == std::string::npos) return "missing";
  const size_t begin = at + name.size() + 2;
  return out.substr(begin, out.find_first_of(" \n", begin) - begin);
}

// Runs this test binary again as a child with only test `filter` and the environment assignments `env`
// ("A=1 B=2"), under a 120 s timeout; returns its stdout and stderr.
inline std::string run_self(const std::string& env, const std::string& filter) {
  // /proc/<pid>/exe, not /proc/self/exe: the command runs in a shell, whose "self" is the shell.
  return run_command(env + " timeout 120 /proc/" + std::to_string(getpid()) + "/exe --gtest_filter=" + filter + " 2>&1");
}

}  // namespace mcx::test
