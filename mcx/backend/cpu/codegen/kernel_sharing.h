// Sharing compiled kernels between the processes of one job (MCX_SHARE_COMPILED=1; docs/compilation_cache.md).
//
// The first process that needs a kernel claims it (an insert-once key of the coordination service,
// core/job_key_value.h), compiles it and publishes its object code under its own task prefix; every other
// process that needs it waits for that object (up to MCX_SHARE_COMPILED_TIMEOUT_S) and links it. So N processes
// starting together on a cold cache compile each kernel once, not N times. A claimant that dies, fails or is
// slow costs the others at most the wait: then they compile locally. Never a hang: every wait has a deadline.
// Objects over 4 MiB are not sent (the claimant publishes "compile it yourself").
//
// Keys: "mcx/compiled_kernels/<digest>/owner" (the claimant's process index; job-wide, insert-once) and
// "mcx/task/<p>/compiled_kernels/<digest>" (the object, written by its owner only); <digest> is 32 hex digits
// of SHA-256 over the kernel's signature and target, so processes on different CPUs never share objects.
//
// Thread-safety: thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "mcx/backend/cpu/codegen/kernel_key.h"

namespace mcx::cpu::codegen {

// MCX_SHARE_COMPILED is on and this process is one of several in a job (distributed::initialize ran).
bool sharing_enabled();

struct ShareOutcome {
  enum Kind {
    kCompileHere,       // not shared (sharing off, or the claimant gave up or timed out): compile
    kOwner,             // this process claimed the kernel: compile, then publish_shared()
    kFromPeer,          // `object` is the claimant's object code
  };
  Kind kind = kCompileHere;
  std::string object;
  std::string why;  // for kCompileHere after a failed wait: what happened (logged by the caller)
};

// Claims key or fetches the claimant's object (blocks up to MCX_SHARE_COMPILED_TIMEOUT_S).
ShareOutcome share_or_claim(const KernelKey& key);

// The coordination-service key that claims key (tests use it to play a claimant that never publishes).
std::string shared_kernel_owner_key(const KernelKey& key);

// Publishes the claimed kernel's object (an empty object says "compile it yourself": a failed compile, or
// one too large to send). Failures are logged: the waiters then time out and compile.
void publish_shared(const KernelKey& key, std::string_view object);

}  // namespace mcx::cpu::codegen
