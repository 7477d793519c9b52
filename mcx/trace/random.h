// Counter-based pseudo-random numbers in the style of jax.random, built on the threefry2x32 op.
//
// A key is a u32[2] Array (JAX's raw "key data", jax.random.key_data(jax.random.key(seed))). Nothing is
// hidden state: the same key always gives the same numbers, on any thread count, eagerly or inside jit
// (every function below is composed of ordinary ops through bind(), so it traces; keys may be tracers).
//
// Bit-compatibility with JAX (jax >= 0.5, whose default is jax_threefry_partitionable=True):
//  - key(seed)              == jax.random.key_data(jax.random.key(seed)) for 0 <= seed < 2^64
//                              (JAX's threefry_seed: [seed >> 32, seed & 0xffffffff])
//  - split(key, n)          == key_data(jax.random.split(key, n))      (counters (0, i), i < n)
//  - fold_in(key, d)        == key_data(jax.random.fold_in(key, d))    (threefry of the pair (0, d))
//  - random_bits(key, s)    == jax.random.bits(key, s, uint32)         (y0 ^ y1 of counters (hi, lo) of the
//                                                                       row-major index of each element)
//  - uniform(key, s, f32/f64/f16/bf16, lo, hi) == jax.random.uniform(...) (mantissa-fill method; for
//    non-default bounds bit-identical whenever (hi - lo) * u + lo rounds the same with and without FMA
//    contraction, e.g. always when hi - lo is a power of two).
// Not bit-identical to JAX (documented, tested for distribution only):
//  - normal: f32/f16/bf16 use JAX's method (uniform in (-1, 1), times sqrt(2) * erf_inv) with XLA's
//    single-precision erf_inv polynomial (M. Giles) composed from ops; agrees with JAX to a few ulp.
//    f64 uses Box-Muller (sqrt(-2 log u1) * cos(2 pi u2)) because no double erf_inv polynomial is
//    implemented; it is therefore a different stream from JAX's f64 normal.
//  - permutation(key, n): JAX's algorithm (ceil(3 ln n / ln(2^32 - 1)) rounds; each splits the key, draws
//    32-bit keys from the second half and sorts the indices by them, with argsort: O(n log n)). It equals
//    jax.random.permutation(key, n) whenever a round's keys are distinct; on a tie JAX's (unstable) sort
//    may order the two indices differently, this one keeps index order. Checked here against the
//    algorithm written out on the threefry reference, not against a JAX installation.
//
// Errors (mcx::InvalidArgument, messages start with "[random.<fn>]"): a key that is not u32[2]; a
// negative dimension or more than 2^32 elements; a dtype the function does not support; minval > maxval.
// Thread-safety: all functions are pure and may be called from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "mcx/core/dtype.h"
#include "mcx/trace/array.h"

namespace mcx::random {

// The key for seed, u32[2] = [seed >> 32, seed & 0xffffffff] (jax.random.key / PRNGKey).
Array key(uint64_t seed);

// n new keys derived from key, u32[n, 2] (jax.random.split). Row i is threefry(key, (0, i)).
Array split(const Array& key, int64_t n = 2);
// The same keys as split(key, n), as n separate u32[2] arrays (for `auto ks = split_keys(k, 3);`).
std::vector<Array> split_keys(const Array& key, int64_t n = 2);

// A key derived from key and data (jax.random.fold_in); data may be a u32/i32 scalar tracer, so a jitted
// step can fold in its step counter.
Array fold_in(const Array& key, uint32_t data);
Array fold_in(const Array& key, const Array& data);

// Uniform random u32 bits of the given shape (jax.random.bits with dtype uint32).
Array random_bits(const Array& key, const std::vector<int64_t>& shape);

// Uniform floats in [minval, maxval) (jax.random.uniform). dtype: f16, bf16, f32 or f64.
Array uniform(const Array& key, const std::vector<int64_t>& shape, DType dtype = DType::kFloat32,
              double minval = 0.0, double maxval = 1.0);

// Standard normal floats (see the note on JAX compatibility above). dtype: f16, bf16, f32 or f64.
Array normal(const Array& key, const std::vector<int64_t>& shape, DType dtype = DType::kFloat32);

// Booleans that are true with probability p (jax.random.bernoulli: uniform(key, shape, f32) < p).
Array bernoulli(const Array& key, double p, const std::vector<int64_t>& shape);

// A random permutation of 0..n-1 as i32[n] (jax.random.permutation(key, n); see the note above).
Array permutation(const Array& key, int64_t n);
// x with its rows along axis shuffled (jax.random.permutation(key, x, axis), independent=False): the rows in
// the order of permutation(key, n), n = x's static size along axis. InvalidArgument for a scalar, an axis out
// of range or a symbolic size.
Array permutation(const Array& key, const Array& x, int axis = 0);

// erf^-1(x) for floating x in (-1, 1), composed from ops with XLA's single-precision polynomial
// (returns +-inf at +-1). Computed in f32 for f16/bf16/f32 inputs and returned in x's dtype; f64 inputs
// are computed in f64 with the same polynomial (single-precision accuracy, ~1e-7 relative).
Array erf_inv(const Array& x);

}  // namespace mcx::random
