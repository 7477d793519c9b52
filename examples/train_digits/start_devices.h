// Device set-up shared by the digits and Fashion-MNIST data-parallel programs (data_parallel_digits,
// train_fashion_mnist).
#pragma once

namespace digits {

// Sets up this process's devices, before anything touches one (the device count is fixed at first use, and
// initialize() must come first): launched as a job (mcx-run, mpirun, srun), joins it with `devices` CPU devices
// unless the launcher set MCX_CPU_DEVICE_COUNT; else uses `devices` CPU devices here. Then the CPU kernel
// threads (threads > 0; 0 keeps the default). recoverable: the job survives a process failure (the service mode
// when this process hosts the coordination service; under mcx-run, its --recoverable decides). Returns whether
// the process joined a job. Throws mcx::Error.
bool start_devices(int devices, int threads, bool recoverable = false);

// Ends a process that joined a job with `status`. In a fate-sharing job it first leaves through the shutdown
// barrier, so the first process done does not end the others still finishing (its exit would read as a
// failure); a failed barrier is reported and the exit status stays. In a recoverable job it exits at once: a
// process that died never reaches a barrier, and a dead peer's groups need not be torn down in order. A running
// profiler session (MCX_PROFILE_DIR) is written first: the exit skips the exit handlers.
[[noreturn]] void leave_job(int status);

}  // namespace digits
