// Function multiversioning for hot loops: AVX-512, AVX2 and baseline clones, picked once at load time by
// an ifunc resolver, so the binary stays portable (no -march=native) yet uses wide vectors where present.
//
// ThreadSanitizer builds use the baseline clone only: ifunc resolvers run during relocation, before the
// TSan runtime is initialised, and instrumented resolvers crash the program at load.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define MCX_TARGET_CLONES
#else
#define MCX_TARGET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
