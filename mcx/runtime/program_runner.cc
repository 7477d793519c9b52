#include "mcx/runtime/program_runner.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/collectives/live_set.h"
#include "mcx/runtime/device_platform.h"
#include "mcx/runtime/executable_cache.h"
#include "mcx/runtime/spmd_executable.h"
#include "mcx/runtime/transfer.h"
#include "mcx/runtime/transfer_guard.h"

namespace mcx {
namespace {

std::atomic<int64_t> g_single_runs{0};
std::atomic<int64_t> g_spmd_runs{0};
std::atomic<int64_t> g_spmd_compiles{0};
std::atomic<int64_t> g_spmd_cached{0};  // entries in the process-wide SPMD executable cache

std::vector<int64_t> static_dims(const AbstractValue& a) {
  absl::StatusOr<std::vector<int64_t>> d = to_concrete(a.shape);
  return d.ok() ? *std::move(d) : std::vector<int64_t>{};
}

// A NamedSharding (even over a 1-device mesh) runs the computation on its mesh, as in JAX.
bool is_multi_device(const Sharding& s) { return !s.is_single_device(); }

// The one T (a Mesh, or the Device of a single-device computation) that every source agrees on; the
// first source that disagrees is reported by `conflict(first source, first, this source, this)`.
template <typename T>
class Agreement {
 public:
  using Conflict = std::string (*)(const std::string&, const T&, const std::string&, const T&);
  explicit Agreement(Conflict conflict) : conflict_(conflict) {}

  absl::Status adopt(const T& value, const std::string& source, const std::string& what) {
    if (!value_) {
      value_ = value;
      source_ = source;
      return absl::OkStatus();
    }
    if (*value_ == value) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("[", what, "] ", conflict_(source_, *value_, source, value)));
  }
  const std::optional<T>& value() const { return value_; }

 private:
  Conflict conflict_;
  std::optional<T> value_;
  std::string source_;
};

std::string mesh_conflict(const std::string& a, const Mesh& ma, const std::string& b, const Mesh& mb) {
  return absl::StrCat("every sharding of one computation must use the same mesh: ", a, " uses ", ma.to_string(),
                      ", ", b, " uses ", mb.to_string());
}

std::string device_conflict(const std::string& a, const Device& da, const std::string& b, const Device& db) {
  return absl::StrCat("arguments are committed to different devices: ", a, " on ", da.to_string(), ", ", b, " on ",
                      db.to_string(), "; move them with mcx::device_put first");
}

std::string spmd_cache_key(const std::string& program_key, const Mesh& mesh, std::span<const PartitionSpec> in,
                           std::span<const std::optional<PartitionSpec>> out) {
  std::string key = absl::StrCat(program_key.size(), ":", program_key, "|", mesh.to_string());
  for (const PartitionSpec& s : in) absl::StrAppend(&key, "|i", s.to_string());
  for (const auto& s : out) absl::StrAppend(&key, "|o", s ? s->to_string() : "?");
  return key;
}

struct CachedSpmd {
  std::shared_ptr<const SpmdExecutable> exe;
  std::vector<int> processes;  // of its mesh, ascending
};

// The processes of a mesh's devices, ascending.
std::vector<int> processes_of(const Mesh& mesh) {
  std::vector<int> processes;
  for (const Device& d : mesh.devices()) processes.push_back(d.process_index);
  std::sort(processes.begin(), processes.end());
  processes.erase(std::unique(processes.begin(), processes.end()), processes.end());
  return processes;
}

// Process-wide, by program, mesh and specs. On every compile, executables over a mesh that includes a process
// the job agreed is gone (collectives/live_set.h) are dropped: they can never run again.
absl::StatusOr<std::shared_ptr<const SpmdExecutable>> cached_spmd(const ir::Program& program, SpmdOptions options,
                                                                  const std::string& program_key) {
  static std::mutex* mu = new std::mutex();
  static auto* cache = new std::map<std::string, CachedSpmd>();  // never destroyed
  std::string key = spmd_cache_key(program_key, options.mesh, options.in_specs, options.out_specs);
  {
    std::lock_guard<std::mutex> lock(*mu);
    auto it = cache->find(key);
    if (it != cache->end()) return it->second.exe;
  }
  std::vector<int> processes = processes_of(options.mesh);
  options.program_key = program_key;
  MCX_ASSIGN_OR_RETURN(auto exe, SpmdExecutable::compile(program, std::move(options)));
  ++g_spmd_compiles;
  std::lock_guard<std::mutex> lock(*mu);
  std::erase_if(*cache, [](const auto& entry) { return excludes_any(entry.second.processes); });
  auto inserted = cache->emplace(key, CachedSpmd{exe, std::move(processes)}).first->second.exe;
  g_spmd_cached = static_cast<int64_t>(cache->size());
  return inserted;
}

// std::vector<bool> has no contiguous storage to make a span of.
std::unique_ptr<bool[]> donate_flags(const std::vector<bool>& donate) {
  std::unique_ptr<bool[]> flags(new bool[donate.size() + 1]);
  for (size_t i = 0; i < donate.size(); ++i) flags[i] = donate[i];
  return flags;
}

}  // namespace

absl::StatusOr<ArrayValue> place_argument(const ArrayValue& arg, const Sharding& target, std::string_view what,
                                          size_t i) {
  const std::string api = absl::StrCat(std::string(what), " argument ", i);
  const bool in_place = arg.sharding.equivalent(target, static_dims(arg.aval));
  if (arg.host_data) {
    // Host data is a host-to-device transfer wherever it goes (never device-to-device).
    if (in_place) {
      check_transfer(TransferDirection::kHostToDevice, arg.aval, false, api);
      return arg;
    }
    MCX_ASSIGN_OR_RETURN(Buffer host, arg.to_buffer());
    MCX_ASSIGN_OR_RETURN(ArrayValue placed, put_host(host, target, /*is_explicit=*/false, api));
    placed.committed = arg.committed;
    return placed;
  }
  if (in_place) return arg;
  return reshard(arg, target, /*is_explicit=*/false, /*committed=*/arg.committed, api);
}

absl::StatusOr<std::vector<ArrayValue>> run_program(const ir::Program& program, std::span<const ArrayValue> args,
                                                    const RunOptions& options) {
  const std::string& what = options.what;
  if (args.size() != program.params.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("[", what, "] expected ", program.params.size(), " arguments, found ", args.size()));
  }
  auto in_sharding = [&](size_t i) -> const std::optional<Sharding>* {
    return i < options.in_shardings.size() && options.in_shardings[i] ? &options.in_shardings[i] : nullptr;
  };
  auto out_sharding = [&](size_t r) -> const std::optional<Sharding>* {
    return r < options.out_shardings.size() && options.out_shardings[r] ? &options.out_shardings[r] : nullptr;
  };
  Agreement<Mesh> mesh(mesh_conflict);
  Agreement<Device> device(device_conflict);
  bool committed = false;
  if (options.mesh) MCX_RETURN_IF_ERROR(mesh.adopt(*options.mesh, "a sharding constraint", what));
  for (size_t i = 0; i < args.size(); ++i) {
    if (const auto* s = in_sharding(i)) {
      committed = true;
      if (is_multi_device(**s)) {
        MCX_RETURN_IF_ERROR(mesh.adopt((*s)->mesh(), absl::StrCat("in_shardings[", i, "]"), what));
      } else {
        MCX_RETURN_IF_ERROR(device.adopt((*s)->device_set().front(), absl::StrCat("in_shardings[", i, "]"), what));
      }
    } else if (args[i].committed) {
      committed = true;
      if (is_multi_device(args[i].sharding)) {
        MCX_RETURN_IF_ERROR(mesh.adopt(args[i].sharding.mesh(), absl::StrCat("argument ", i), what));
      } else {
        MCX_RETURN_IF_ERROR(device.adopt(args[i].sharding.device_set().front(), absl::StrCat("argument ", i), what));
      }
    }
  }
  for (size_t r = 0; r < program.results.size(); ++r) {
    if (const auto* s = out_sharding(r)) {
      committed = true;
      if (is_multi_device(**s)) {
        MCX_RETURN_IF_ERROR(mesh.adopt((*s)->mesh(), absl::StrCat("out_shardings[", r, "]"), what));
      } else {
        MCX_RETURN_IF_ERROR(device.adopt((*s)->device_set().front(), absl::StrCat("out_shardings[", r, "]"), what));
      }
    }
  }
  const std::string program_key = options.program_key.empty() ? mcx::program_key(program) : options.program_key;

  if (!mesh.value()) {  // one device
    const Device& run_on = device.value() ? *device.value() : default_device();
    const Sharding target = SingleDeviceSharding(run_on);
    std::vector<ArrayValue> placed;
    placed.reserve(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      MCX_ASSIGN_OR_RETURN(ArrayValue v, place_argument(args[i], target, what, i));
      placed.push_back(std::move(v));
    }
    MCX_ASSIGN_OR_RETURN(const Platform* platform, platform_of(run_on));
    MCX_ASSIGN_OR_RETURN(auto exe, ExecutableCache::global().get_or_compile(*platform, program_key, program));
    ++g_single_runs;
    std::unique_ptr<bool[]> donate = donate_flags(options.donate);
    return launch_on_device(std::move(exe), placed, run_on, committed, what,
                            std::span<const bool>(donate.get(), options.donate.size()));
  }

  const Mesh& m = *mesh.value();
  SpmdOptions spmd(m);
  spmd.name = what;
  spmd.spans_processes = options.spans_processes;
  std::vector<ArrayValue> placed;
  placed.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    Sharding target = NamedSharding(m, PartitionSpec());
    if (const auto* s = in_sharding(i)) {
      if (is_multi_device(**s)) target = **s;
    } else if (is_multi_device(args[i].sharding) && args[i].sharding.mesh() == m) {
      target = args[i].sharding;
    }
    MCX_RETURN_IF_ERROR(target.validate(static_dims(args[i].aval), absl::StrCat(what, " argument ", i)));
    spmd.in_specs.push_back(target.spec());
    MCX_ASSIGN_OR_RETURN(ArrayValue v, place_argument(args[i], target, what, i));
    placed.push_back(std::move(v));
  }
  if (!options.out_shardings.empty()) {
    for (size_t r = 0; r < program.results.size(); ++r) {
      const auto* s = out_sharding(r);
      if (s && !is_multi_device(**s)) {
        return absl::InvalidArgumentError(absl::StrCat("[", what, "] out_shardings[", r, "] is ", (*s)->to_string(),
                                                       " but the computation runs on ", m.to_string()));
      }
      spmd.out_specs.push_back(s ? std::optional<PartitionSpec>((*s)->spec()) : std::nullopt);
    }
  }
  MCX_ASSIGN_OR_RETURN(auto exe, cached_spmd(program, std::move(spmd), program_key));
  ++g_spmd_runs;
  std::unique_ptr<bool[]> donate = donate_flags(options.donate);
  return exe->execute(placed, std::span<const bool>(donate.get(), options.donate.size()));
}

RunStats run_stats() { return {g_single_runs.load(), g_spmd_runs.load(), g_spmd_compiles.load(), g_spmd_cached.load()}; }

}  // namespace mcx
