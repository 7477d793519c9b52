// Typed configuration flags: each knob has a type, a default, an MCX_* environment variable and a
// description (docs/config.md lists them all). Where a knob also has an options field (for example
// ClientOptions::cpu_threads), resolve(option) gives the precedence: option > environment > default.
//
// Defining a flag (at namespace scope in a .cc file, so it registers during static initialisation):
//   const mcx::Flag<int64_t> kPrefetchDepth("MCX_PREFETCH_DEPTH", 2, "batches prefetched per loader",
//                                           mcx::int_in_range(0, 64));
// Registration note: a flag defined in a static-library object file that nothing references is not
// linked, so all_flags() lists the flags of the objects linked into the program.
//
// Errors: reading a flag whose environment value does not parse or fails its check is an
// InvalidArgument naming the variable and the value, e.g.
//   [config] MCX_CPU_THREADS=abc is not a valid integer (worker threads of the CPU backend ...)
// Thread-safety: all functions are thread-safe; values are read from the environment on every get()
// (callers on hot paths keep the value), so tests may setenv()/unsetenv() between reads but not while
// other threads read flags.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mcx {

enum class FlagType { kBool, kInt, kDouble, kString };

// What the registry knows about a flag (for docs and diagnostics).
struct FlagInfo {
  std::string env_var;        // "MCX_CPU_THREADS"
  FlagType type;
  std::string type_name;      // "bool", "int", "double", "string"
  std::string default_text;   // the default, as it would be written in the environment
  std::string description;
  std::optional<std::string> env_value;  // the current environment value, if set
};

class FlagBase {
 public:
  virtual ~FlagBase();
  FlagBase(const FlagBase&) = delete;
  FlagBase& operator=(const FlagBase&) = delete;
  const std::string& env_var() const { return env_var_; }
  const std::string& description() const { return description_; }
  virtual FlagInfo info() const = 0;
  // OK when the variable is unset or holds a valid value.
  virtual absl::Status validate() const = 0;

 protected:
  FlagBase(std::string_view env_var, std::string_view description);  // registers the flag
  std::string env_var_;
  std::string description_;
};

template <typename T>
class Flag : public FlagBase {
 public:
  // Returns std::nullopt when the value is acceptable, else the reason ("must be in [1, 64]").
  using Check = std::function<std::optional<std::string>(const T&)>;

  // env_var must start with "MCX_" (asserted); the default must pass the check (asserted).
  Flag(std::string_view env_var, T default_value, std::string_view description, Check check = nullptr);

  const T& default_value() const { return default_; }
  // The environment value if the variable is set (non-empty), else the default.
  absl::StatusOr<T> get() const;
  // option if it has a value (checked too), else get().
  absl::StatusOr<T> resolve(const std::optional<T>& option) const;
  // get(), throwing mcx::InvalidArgument on a bad environment value (for the public API).
  T value() const;

  FlagInfo info() const override;
  absl::Status validate() const override { return get().status(); }

 private:
  absl::StatusOr<T> checked(T v, std::string_view source) const;
  T default_;
  Check check_;
};

extern template class Flag<bool>;
extern template class Flag<int64_t>;
extern template class Flag<double>;
extern template class Flag<std::string>;

// Ready-made checks.
Flag<int64_t>::Check int_in_range(int64_t lo, int64_t hi);
Flag<std::string>::Check one_of(std::vector<std::string> allowed);

// Every registered flag, sorted by environment variable.
std::vector<FlagInfo> all_flags();
// Validates every registered flag; the error lists each bad variable (for startup checks).
absl::Status validate_all_flags();
// A Markdown table "| Env var | Type | Default | Meaning |" of all registered flags (docs/config.md).
std::string flags_markdown_table();

// The flags of mcx/core.
extern const Flag<std::string> kLogLevelFlag;  // MCX_LOG_LEVEL: trace|debug|info|warn(ing)|error|critical|off
extern const Flag<int64_t> kCpuThreadsFlag;    // MCX_CPU_THREADS: 0 = hardware concurrency
extern const Flag<int64_t> kHostCacheMbFlag;   // MCX_HOST_CACHE_MB: reused large host buffers (host_allocator.h)
extern const Flag<std::string> kCpuGemmFlag;   // MCX_CPU_GEMM: auto | avx512 | avx2 | openblas
extern const Flag<std::string> kProfileDirFlag;  // MCX_PROFILE_DIR: write a trace of the whole process here

// The flags of the runtime's devices and transfer guard (defined here so all_flags() always lists them).
extern const Flag<int64_t> kCpuDeviceCountFlag;   // MCX_CPU_DEVICE_COUNT: virtual CPU devices, 1..1024
extern const Flag<double> kDeviceTimeoutFlag;     // MCX_DEVICE_TIMEOUT_S: default device-wait deadline (s)
// MCX_TRANSFER_GUARD (all directions) and the per-direction overrides; "" means unset (inherit).
extern const Flag<std::string> kTransferGuardFlag;
extern const Flag<std::string> kTransferGuardHostToDeviceFlag;
extern const Flag<std::string> kTransferGuardDeviceToDeviceFlag;
extern const Flag<std::string> kTransferGuardDeviceToHostFlag;
extern const Flag<bool> kThreadGuardFlag;  // MCX_THREAD_GUARD: the thread guard for the whole process
// MCX_ENABLE_PREEMPTION_SERVICE: the preemption sync service (read by the distributed and multihost layers)
extern const Flag<bool> kEnablePreemptionServiceFlag;

// The data plane's flags (cross-process collectives; docs/distributed.md).
extern const Flag<bool> kDeterministicReductionsFlag;   // MCX_DETERMINISTIC_REDUCTIONS
extern const Flag<std::string> kCollectivesFlag;         // MCX_COLLECTIVES: auto | tcp | gloo | mpi
extern const Flag<bool> kDataPlaneTlsFlag;               // MCX_DATA_PLANE_TLS
extern const Flag<bool> kDataPlaneSharedMemoryFlag;      // MCX_DATA_PLANE_SHARED_MEMORY
extern const Flag<int64_t> kCoordinatorRateLimitFlag;    // MCX_COORDINATOR_RATE_LIMIT: requests/s per peer
extern const Flag<int64_t> kKvMaxKeysPerTaskFlag;        // MCX_KV_MAX_KEYS_PER_TASK
extern const Flag<int64_t> kKvMaxBytesPerTaskFlag;       // MCX_KV_MAX_BYTES_PER_TASK
extern const Flag<std::string> kDataPlaneAddressFlag;    // MCX_DATA_PLANE_ADDRESS: bind address
extern const Flag<bool> kAllowPlaintextDataPlaneFlag;    // MCX_ALLOW_PLAINTEXT_DATA_PLANE
// The control plane's fast path (docs/distributed.md).
extern const Flag<bool> kCoordinationFastPathFlag;         // MCX_COORDINATION_FAST_PATH

// MCX_CPU_THREADS resolved: the flag value, or for 0 the number of CPUs the process may run on (cpu_affinity.h).
absl::StatusOr<int> cpu_threads();
// Now plus MCX_DEVICE_TIMEOUT_S: the default deadline of a wait on device work (the runtime's
// default_device_deadline, the backends' own waits). InvalidArgument naming the variable for a bad value.
absl::StatusOr<absl::Time> device_deadline_from_now();

}  // namespace mcx
