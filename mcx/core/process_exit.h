// Ordered shutdown of mcx's process-wide services that own threads.
//
// The device client (one stream thread per device) and the CPU thread pool are created on first use and
// never destroyed by static destructors: a function-local static is destroyed by the exit handlers in
// reverse order of construction, which knows nothing of the threads still using it (a device stream running
// a kernel that calls parallel_for on a pool already destroyed was a use-after-free at exit). Instead each
// service registers a step here, and one exit handler runs the steps in stage order: the streams drain and
// join first, then the services they use. See docs/architecture.md, "Threads and process exit".
//
// Contract for a service that registers a step: it is heap-allocated and never deleted; after its step has
// run it keeps working without its threads (the thread pool runs work inline; a stream runs late work on the
// caller). Steps run on the thread that calls exit() (or returns from main), once.
// A child made by fork() inherits the registrations but not the threads: steps registered by another
// process are skipped.
// Thread-safety: run_at_exit and exiting may be called from any thread.
#pragma once

#include <functional>

namespace mcx {

// Lower stages run first.
enum class ExitStage : int {
  kDeviceStreams = 0,  // drain and join every device stream (their tasks still use everything below)
  kDataPlane = 1,      // finalise the data plane's transport (MPI) when the program did not shut down
  kCpuThreadPool = 2,  // join the CPU thread pool's workers
  kProfiler = 3,       // write the MCX_PROFILE_DIR session's trace (after the streams drained: their launches are in it)
};

// Registers step to run at process exit in stage order (registration order within a stage).
void run_at_exit(ExitStage stage, std::function<void()> step);

}  // namespace mcx
