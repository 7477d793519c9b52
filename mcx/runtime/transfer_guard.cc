#include "mcx/runtime/transfer_guard.h"

#include <array>
#include <atomic>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "mcx/core/config.h"
#include "mcx/core/logging.h"

namespace mcx {
namespace {

constexpr int kDirections = 3;
constexpr int kUnset = -1;

int index_of(TransferDirection d) { return static_cast<int>(d); }

// Process-wide settings made by set_transfer_guard(); kUnset means "use the environment".
std::array<std::atomic<int>, kDirections> g_process_level = {kUnset, kUnset, kUnset};

// The levels from the environment, read once (on first use) and cached; a bad value is not cached, so
// every use reports it until it is fixed.
struct EnvLevels {
  std::mutex mu;
  bool loaded = false;
  std::array<TransferGuardLevel, kDirections> level{};
};
EnvLevels& env_levels() {
  static EnvLevels* e = new EnvLevels();  // never destroyed: transfers may happen during exit
  return *e;
}

// The scopes of this thread: the innermost TransferGuard's level per direction, if any.
thread_local std::array<std::optional<TransferGuardLevel>, kDirections> t_scope_level;

const Flag<std::string>& direction_flag(int i) {
  switch (i) {
    case 0: return kTransferGuardHostToDeviceFlag;
    case 1: return kTransferGuardDeviceToDeviceFlag;
    default: return kTransferGuardDeviceToHostFlag;
  }
}

absl::StatusOr<std::optional<TransferGuardLevel>> level_from_flag(const Flag<std::string>& flag) {
  // A bad value is an InvalidArgument from the flag: "[config] MCX_TRANSFER_GUARD=x is not a transfer
  // guard level: expected allow, log, ...".
  MCX_ASSIGN_OR_RETURN(std::string text, flag.get());
  if (text.empty()) return std::optional<TransferGuardLevel>();
  std::optional<TransferGuardLevel> level = parse_transfer_guard_level(text);
  if (!level) {  // unreachable while the flag's check and the parser agree; kept so they cannot drift
    return absl::InvalidArgumentError(absl::StrCat("[transfer_guard] ", flag.env_var(), "=", text,
                                                   " is not a transfer guard level: expected allow, log, "
                                                   "disallow, log_explicit or disallow_explicit"));
  }
  return level;
}

absl::StatusOr<TransferGuardLevel> env_level(TransferDirection direction) {
  EnvLevels& e = env_levels();
  std::lock_guard<std::mutex> lock(e.mu);
  if (!e.loaded) {
    MCX_ASSIGN_OR_RETURN(std::optional<TransferGuardLevel> all, level_from_flag(kTransferGuardFlag));
    std::array<TransferGuardLevel, kDirections> levels{};
    for (int i = 0; i < kDirections; ++i) {
      MCX_ASSIGN_OR_RETURN(std::optional<TransferGuardLevel> one, level_from_flag(direction_flag(i)));
      levels[i] = one ? *one : all.value_or(TransferGuardLevel::kAllow);
    }
    e.level = levels;
    e.loaded = true;
  }
  return e.level[index_of(direction)];
}

}  // namespace

std::string_view transfer_guard_level_name(TransferGuardLevel level) {
  switch (level) {
    case TransferGuardLevel::kAllow: return "allow";
    case TransferGuardLevel::kLog: return "log";
    case TransferGuardLevel::kDisallow: return "disallow";
    case TransferGuardLevel::kLogExplicit: return "log_explicit";
    case TransferGuardLevel::kDisallowExplicit: return "disallow_explicit";
  }
  return "unknown";
}

std::string_view transfer_direction_name(TransferDirection direction) {
  switch (direction) {
    case TransferDirection::kHostToDevice: return "host-to-device";
    case TransferDirection::kDeviceToDevice: return "device-to-device";
    case TransferDirection::kDeviceToHost: return "device-to-host";
  }
  return "unknown";
}

std::optional<TransferGuardLevel> parse_transfer_guard_level(std::string_view text) {
  for (TransferGuardLevel level : {TransferGuardLevel::kAllow, TransferGuardLevel::kLog, TransferGuardLevel::kDisallow,
                                   TransferGuardLevel::kLogExplicit, TransferGuardLevel::kDisallowExplicit}) {
    if (text == transfer_guard_level_name(level)) return level;
  }
  return std::nullopt;
}

void set_transfer_guard(TransferGuardLevel level) {
  for (auto& l : g_process_level) l.store(static_cast<int>(level), std::memory_order_relaxed);
}

void set_transfer_guard(TransferDirection direction, TransferGuardLevel level) {
  g_process_level[index_of(direction)].store(static_cast<int>(level), std::memory_order_relaxed);
}

TransferGuardLevel transfer_guard_level(TransferDirection direction) {
  // The environment is validated on every first use, even when a scope or a process setting hides it,
  // so a misspelt MCX_TRANSFER_GUARD* is reported rather than silently ignored.
  TransferGuardLevel from_env = value_or_throw(env_level(direction));
  const int i = index_of(direction);
  if (t_scope_level[i]) return *t_scope_level[i];
  const int process = g_process_level[i].load(std::memory_order_relaxed);
  if (process != kUnset) return static_cast<TransferGuardLevel>(process);
  return from_env;
}

TransferGuard::TransferGuard(TransferGuardLevel level) {
  for (int i = 0; i < kDirections; ++i) {
    saved_[i] = t_scope_level[i];
    set_[i] = true;
    t_scope_level[i] = level;
  }
}

TransferGuard::TransferGuard(TransferDirection direction, TransferGuardLevel level) {
  const int i = index_of(direction);
  saved_[i] = t_scope_level[i];
  set_[i] = true;
  t_scope_level[i] = level;
}

TransferGuard::~TransferGuard() {
  for (int i = 0; i < kDirections; ++i) {
    if (set_[i]) t_scope_level[i] = saved_[i];
  }
}

void check_transfer(TransferDirection direction, const AbstractValue& aval, bool is_explicit,
                    std::string_view what) {
  const TransferGuardLevel level = transfer_guard_level(direction);
  bool log = false;
  bool disallow = false;
  switch (level) {
    case TransferGuardLevel::kAllow: break;
    case TransferGuardLevel::kLog: log = !is_explicit; break;
    case TransferGuardLevel::kDisallow: disallow = !is_explicit; break;
    case TransferGuardLevel::kLogExplicit: log = true; break;
    case TransferGuardLevel::kDisallowExplicit: disallow = true; break;
  }
  if (!log && !disallow) return;
  const std::string transfer = absl::StrCat(is_explicit ? "explicit " : "implicit ", std::string(transfer_direction_name(direction)),
                                            " transfer of ", aval.to_string(), " (", std::string(what), ")");
  const std::string setting =
      absl::StrCat("the ", std::string(transfer_direction_name(direction)), " transfer guard is '", std::string(transfer_guard_level_name(level)), "'");
  if (disallow) throw TransferGuardError(absl::StrCat("[transfer_guard] disallowed ", transfer, "; ", setting));
  log_warn("[transfer_guard] {}; {}", transfer, setting);
}

namespace detail {

void reset_transfer_guard_for_testing() {
  for (auto& l : g_process_level) l.store(kUnset, std::memory_order_relaxed);
  EnvLevels& e = env_levels();
  std::lock_guard<std::mutex> lock(e.mu);
  e.loaded = false;
}

}  // namespace detail

}  // namespace mcx
