// Damaging the entries of a compilation-cache directory, for the tests that check a damaged entry is a miss
// that heals (tests/cache). Header-only.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

namespace mcx::test {

// Flips one bit of the middle byte of every entry ("*.mcxc") in dir; returns how many entries it damaged.
inline int damage_every_entry(const std::string& dir) {
  namespace fs = std::filesystem;
  int damaged = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".mcxc") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto size = static_cast<std::streamoff>(fs::file_size(e.path()));
    f.seekg(size / 2);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(size / 2);
    f.write(&c, 1);
    ++damaged;
  }
  return damaged;
}

}  // namespace mcx::test
