// Helpers for core tests that use Debian's numpy as an independent reference.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace mcx::testing {

// A fresh temporary directory, removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mcx_core_test_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

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
