// mix64: splitmix64's finaliser, the one integer hash of mcx/data (the sampler's Feistel rounds, the
// transforms' per-example keys). Fixed forever: changing it changes every seeded order and augmentation.
#pragma once

#include <cstdint>

namespace mcx::data {

inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace mcx::data
