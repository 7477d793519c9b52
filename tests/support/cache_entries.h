// Helpers for the compilation-cache tests (tests/cache): a cache that explains its misses, and damaging the
// entries of a directory to check that a damaged entry is a miss that heals. Header-only.
#pragma once

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "mcx/cache/compilation_cache.h"

namespace mcx::test {

// A cache over dir with MCX_EXPLAIN_CACHE_MISSES on (a failed open fails the test and returns nullptr).
inline std::shared_ptr<cache::CompilationCache> explaining_cache(const std::string& dir) {
  cache::CacheOptions o;
  o.directory = dir;
  o.explain_misses = true;
  auto opened = cache::CompilationCache::open(o);
  EXPECT_TRUE(opened.ok()) << opened.status();
  return opened.ok() ? std::shared_ptr<cache::CompilationCache>(*std::move(opened)) : nullptr;
}

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
