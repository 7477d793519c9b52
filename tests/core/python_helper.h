// Helpers for core tests that use Debian's numpy as an independent reference.
#pragma once

#include "tests/support/temp_dir.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace mcx::testing {

using TempDir = test::TempDir;

inline bool have_numpy() {
  static const bool ok = std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
  return ok;
}

// Writes script to dir/script.py and runs it with dir as its only argument; returns the exit status.
inline int run_python(const TempDir& dir, const std::string& script) {
  const std::string path = dir.file("script.py");
  std::ofstream(path) << script;
  const std::string cmd = "timeout 60 /usr/bin/python3 " + path + " " + dir.path();
  return std::system(cmd.c_str());
}

}  // namespace mcx::testing
