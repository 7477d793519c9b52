#include "mcx/core/config.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/cpu_affinity.h"
#include "mcx/core/mutex.h"
#include "fmt/format.h"
#include "mcx/core/error.h"

namespace mcx {
namespace {

struct Registry {
  Mutex mu;
  std::vector<const FlagBase*> flags ABSL_GUARDED_BY(mu);
};
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

std::optional<std::string> env_value(const std::string& var) {
  const char* v = std::getenv(var.c_str());
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

template <typename T> struct FlagTraits;
template <> struct FlagTraits<bool> {
  static constexpr FlagType type = FlagType::kBool;
  static constexpr const char* name = "bool";
  static std::optional<bool> parse(const std::string& s) {
    const std::string l = absl::AsciiStrToLower(s);
    if (l == "1" || l == "true" || l == "yes" || l == "on") return true;
    if (l == "0" || l == "false" || l == "no" || l == "off") return false;
    return std::nullopt;
  }
  static std::string format(bool v) { return v ? "true" : "false"; }
  static constexpr const char* expected = "a boolean (1/0, true/false, yes/no, on/off)";
};
template <> struct FlagTraits<int64_t> {
  static constexpr FlagType type = FlagType::kInt;
  static constexpr const char* name = "int";
  static std::optional<int64_t> parse(const std::string& s) {
    int64_t v;
    if (!absl::SimpleAtoi(absl::string_view(s.data(), s.size()), &v)) return std::nullopt;
    return v;
  }
  static std::string format(int64_t v) { return std::to_string(v); }
  static constexpr const char* expected = "a valid integer";
};
template <> struct FlagTraits<double> {
  static constexpr FlagType type = FlagType::kDouble;
  static constexpr const char* name = "double";
  static std::optional<double> parse(const std::string& s) {
    double v;
    if (!absl::SimpleAtod(absl::string_view(s.data(), s.size()), &v)) return std::nullopt;
    return v;
  }
  static std::string format(double v) { return fmt::format("{}", v); }
  static constexpr const char* expected = "a valid number";
};
template <> struct FlagTraits<std::string> {
  static constexpr FlagType type = FlagType::kString;
  static constexpr const char* name = "string";
  static std::optional<std::string> parse(const std::string& s) { return s; }
  static std::string format(const std::string& v) { return v; }
  static constexpr const char* expected = "a string";
};

}  // namespace

FlagBase::FlagBase(std::string_view env_var, std::string_view description)
    : env_var_(env_var), description_(description) {
  assert(env_var_.rfind("MCX_", 0) == 0 && "flag environment variables start with MCX_");
  Registry& r = registry();
  MutexLock lock(&r.mu);
  r.flags.push_back(this);
}

FlagBase::~FlagBase() {
  Registry& r = registry();
  MutexLock lock(&r.mu);
  r.flags.erase(std::remove(r.flags.begin(), r.flags.end(), this), r.flags.end());
}

template <typename T>
Flag<T>::Flag(std::string_view env_var, T default_value, std::string_view description, Check check)
    : FlagBase(env_var, description), default_(std::move(default_value)), check_(std::move(check)) {
  assert((!check_ || !check_(default_)) && "a flag's default must pass its own check");
}

template <typename T>
absl::StatusOr<T> Flag<T>::checked(T v, std::string_view source) const {
  if (check_) {
    if (auto why = check_(v)) {
      return absl::InvalidArgumentError(absl::StrCat("[config] ", std::string(source), " ", *why, " (",
                                                     description_, ")"));
    }
  }
  return v;
}

template <typename T>
absl::StatusOr<T> Flag<T>::get() const {
  const std::optional<std::string> raw = env_value(env_var_);
  if (!raw) return default_;
  const std::string source = absl::StrCat(env_var_, "=", *raw);
  std::optional<T> v = FlagTraits<T>::parse(*raw);
  if (!v) {
    return absl::InvalidArgumentError(absl::StrCat("[config] ", source, " is not ", FlagTraits<T>::expected,
                                                   " (", description_, ")"));
  }
  return checked(*std::move(v), source);
}

template <typename T>
absl::StatusOr<T> Flag<T>::resolve(const std::optional<T>& option) const {
  if (option) {
    return checked(*option, absl::StrCat("option for ", env_var_, " = ", FlagTraits<T>::format(*option)));
  }
  return get();
}

template <typename T>
T Flag<T>::value() const {
  return value_or_throw(get());
}

template <typename T>
FlagInfo Flag<T>::info() const {
  return FlagInfo{env_var_,    FlagTraits<T>::type, FlagTraits<T>::name, FlagTraits<T>::format(default_),
                  description_, env_value(env_var_)};
}

template class Flag<bool>;
template class Flag<int64_t>;
template class Flag<double>;
template class Flag<std::string>;

Flag<int64_t>::Check int_in_range(int64_t lo, int64_t hi) {
  return [lo, hi](const int64_t& v) -> std::optional<std::string> {
    if (v >= lo && v <= hi) return std::nullopt;
    return absl::StrCat("is out of range: expected an integer in [", lo, ", ", hi, "]");
  };
}

Flag<std::string>::Check one_of(std::vector<std::string> allowed) {
  return [allowed = std::move(allowed)](const std::string& v) -> std::optional<std::string> {
    if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return std::nullopt;
    return absl::StrCat("is not one of ", absl::StrJoin(allowed, ", "));
  };
}

std::vector<FlagInfo> all_flags() {
  std::vector<FlagInfo> out;
  {
    Registry& r = registry();
    MutexLock lock(&r.mu);
    for (const FlagBase* f : r.flags) out.push_back(f->info());
  }
  std::sort(out.begin(), out.end(), [](const FlagInfo& a, const FlagInfo& b) { return a.env_var < b.env_var; });
  return out;
}

absl::Status validate_all_flags() {
  std::vector<std::string> errors;
  Registry& r = registry();
  MutexLock lock(&r.mu);
  for (const FlagBase* f : r.flags) {
    absl::Status s = f->validate();
    if (!s.ok()) errors.emplace_back(s.message());
  }
  if (errors.empty()) return absl::OkStatus();
  std::sort(errors.begin(), errors.end());
  return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
}

std::string flags_markdown_table() {
  std::string out = "| Env var | Type | Default | Meaning |\n|---|---|---|---|\n";
  for (const FlagInfo& f : all_flags()) {
    absl::StrAppend(&out, "| `", f.env_var, "` | ", f.type_name, " | `", f.default_text, "` | ", f.description,
                    " |\n");
  }
  return out;
}

const Flag<std::string> kLogLevelFlag(
    "MCX_LOG_LEVEL", "info", "log level of the mcx logger: trace, debug, info, warn (or warning), error, critical or off",
    one_of({"trace", "debug", "info", "warn", "warning", "error", "critical", "off"}));

const Flag<int64_t> kCpuThreadsFlag(
    "MCX_CPU_THREADS", 0, "worker threads of the CPU backend; 0 means one per CPU the process may run on (its affinity mask)",
    int_in_range(0, 4096));

const Flag<int64_t> kCpuDeviceCountFlag(
    "MCX_CPU_DEVICE_COUNT", 1, "virtual CPU devices of this process (each with its own stream thread)",
    int_in_range(1, 1024));

const Flag<double> kDeviceTimeoutFlag(
    "MCX_DEVICE_TIMEOUT_S", 300.0, "default deadline in seconds of waits on device work and collectives",
    [](const double& v) -> std::optional<std::string> {
      if (v > 0 && v <= 1e9) return std::nullopt;
      return "is out of range: expected seconds in (0, 1e9]";
    });

namespace {
Flag<std::string>::Check transfer_guard_level_check() {
  return [](const std::string& v) -> std::optional<std::string> {
    static const char* const kLevels[] = {"allow", "log", "disallow", "log_explicit", "disallow_explicit"};
    if (v.empty()) return std::nullopt;
    for (const char* level : kLevels) {
      if (v == level) return std::nullopt;
    }
    return "is not a transfer guard level: expected allow, log, disallow, log_explicit or disallow_explicit";
  };
}
}  // namespace

const Flag<std::string> kTransferGuardFlag(
    "MCX_TRANSFER_GUARD", "", "transfer guard level for every direction (empty: allow)",
    transfer_guard_level_check());
const Flag<std::string> kTransferGuardHostToDeviceFlag(
    "MCX_TRANSFER_GUARD_HOST_TO_DEVICE", "", "transfer guard level for host-to-device transfers (empty: MCX_TRANSFER_GUARD)",
    transfer_guard_level_check());
const Flag<std::string> kTransferGuardDeviceToDeviceFlag(
    "MCX_TRANSFER_GUARD_DEVICE_TO_DEVICE", "",
    "transfer guard level for device-to-device transfers (empty: MCX_TRANSFER_GUARD)", transfer_guard_level_check());
const Flag<std::string> kTransferGuardDeviceToHostFlag(
    "MCX_TRANSFER_GUARD_DEVICE_TO_HOST", "", "transfer guard level for device-to-host transfers (empty: MCX_TRANSFER_GUARD)",
    transfer_guard_level_check());

const Flag<bool> kEnablePreemptionServiceFlag(
    "MCX_ENABLE_PREEMPTION_SERVICE", true,
    "0: no preemption service (as jax_enable_preemption_service=False): mcx::distributed::initialize attaches no "
    "preemption sync, SIGTERM keeps its default action, and reached_preemption_sync_point / "
    "enable_preemption_sync / notify_preemption throw FailedPrecondition naming the variable");
const Flag<bool> kThreadGuardFlag(
    "MCX_THREAD_GUARD", false,
    "1: the thread guard holds for the whole process (as a jax.thread_guard around the program): the first thread "
    "that issues a computation spanning processes owns it, and another thread issuing one (or opening a guard) "
    "gets ThreadGuardError naming both");

absl::StatusOr<absl::Time> device_deadline_from_now() {
  absl::StatusOr<double> seconds = kDeviceTimeoutFlag.get();
  if (!seconds.ok()) return seconds.status();
  return absl::Now() + absl::Seconds(*seconds);
}

absl::StatusOr<int> cpu_threads() {
  MCX_ASSIGN_OR_RETURN(int64_t n, kCpuThreadsFlag.get());
  if (n > 0) return static_cast<int>(n);
  return allowed_cpu_count();
}

}  // namespace mcx

namespace mcx {

const Flag<int64_t> kHostCacheMbFlag(
    "MCX_HOST_CACHE_MB", 1024,
    "megabytes of freed large host buffers (>= 128 KiB) kept for reuse instead of returned to the C library; 0: "
    "no cache",
    int_in_range(0, int64_t{1} << 30));
const Flag<std::string> kCpuGemmFlag(
    "MCX_CPU_GEMM", "auto",
    "f32 matrix products on the CPU: avx512 or avx2 (mcx's own kernels for that vector width), openblas, or auto: "
    "the widest of mcx's kernels the CPU supports, else OpenBLAS. A kernel the CPU lacks falls back to auto",
    one_of({"auto", "avx512", "avx2", "openblas"}));
const Flag<std::string> kProfileDirFlag(
    "MCX_PROFILE_DIR", "",
    "a directory: the profiler traces the whole process and writes mcx-trace.<process>.<pid>.json there at exit "
    "(Chrome trace-event JSON, for Perfetto; docs/profiling.md). Empty: no trace");

// The data plane's flags (read by core's spanning group, the runtime and the distributed layer).
const Flag<bool> kDeterministicReductionsFlag(
    "MCX_DETERMINISTIC_REDUCTIONS", false,
    "1: cross-process reductions gather every device's input and reduce in device rank order, so results are "
    "bitwise identical to one process with the same device count (costs more traffic)");
const Flag<std::string> kCollectivesFlag(
    "MCX_COLLECTIVES", "auto",
    "data plane between processes: tcp (mcx's own: every connection proves it belongs to the job; TLS 1.3 with "
    "MCX_DATA_PLANE_TLS=1), gloo (Gloo's TCP: plaintext, unauthenticated), mpi (under mpirun); auto: tcp",
    one_of({"auto", "tcp", "gloo", "mpi"}));
const Flag<bool> kDataPlaneTlsFlag(
    "MCX_DATA_PLANE_TLS", false,
    "1: the data plane (MCX_COLLECTIVES=tcp) runs over TLS 1.3 with the mTLS certificates (MCX_MTLS_*_FILE); on by "
    "default between hosts when MCX_REQUIRE_MTLS=1");
const Flag<bool> kDataPlaneSharedMemoryFlag(
    "MCX_DATA_PLANE_SHARED_MEMORY", true,
    "1: the data plane (MCX_COLLECTIVES=tcp) carries the bytes between processes of one host through shared memory "
    "(/dev/shm), their TCP connection only waking the other side; 0: TCP between all processes");
const Flag<std::string> kDataPlaneAddressFlag(
    "MCX_DATA_PLANE_ADDRESS", "",
    "IP address the data plane binds to; empty: the local address that reaches the coordinator (never all "
    "interfaces)");
// The control plane's fast path (distributed/fast_path_server.h).
const Flag<bool> kCoordinationFastPathFlag(
    "MCX_COORDINATION_FAST_PATH", true,
    "1: the coordinator's port speaks the fast path (length-prefixed frames over TCP) beside gRPC and agents use "
    "it for every call (never with mTLS); 0: gRPC only. Set the same value for the coordinator and every process");
// Abuse limits of the coordination service (distributed/security/rate_limiter.h, coordination/service.h).
const Flag<int64_t> kCoordinatorRateLimitFlag(
    "MCX_COORDINATOR_RATE_LIMIT", 10000,
    "requests per second each peer (a certificate's principal, else a connection) may make to the coordination "
    "service, in bursts of as many; beyond it RESOURCE_EXHAUSTED; 0: no limit",
    int_in_range(0, int64_t{1} << 30));
const Flag<int64_t> kKvMaxKeysPerTaskFlag(
    "MCX_KV_MAX_KEYS_PER_TASK", 100000,
    "keys one task may own in the coordination service's key-value store (with identity binding); beyond it "
    "RESOURCE_EXHAUSTED",
    int_in_range(1, int64_t{1} << 40));
const Flag<int64_t> kKvMaxBytesPerTaskFlag(
    "MCX_KV_MAX_BYTES_PER_TASK", int64_t{256} << 20,
    "bytes (keys + values) one task may own in the key-value store (with identity binding); beyond it "
    "RESOURCE_EXHAUSTED",
    int_in_range(1, int64_t{1} << 50));
const Flag<bool> kAllowPlaintextDataPlaneFlag(
    "MCX_ALLOW_PLAINTEXT_DATA_PLANE", false,
    "1: allow a plaintext data plane between hosts when MCX_REQUIRE_MTLS=1 (otherwise it runs over TLS)");

}  // namespace mcx
