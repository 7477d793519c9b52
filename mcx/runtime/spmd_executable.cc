#include "mcx/runtime/spmd_executable.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"
#include "mcx/core/mutex.h"
#include "mcx/core/profiler.h"
#include "mcx/ir/fingerprint.h"
#include "mcx/ir/text.h"
#include "mcx/platform/stored_compile.h"
#include "mcx/runtime/communicator_cache.h"
#include "mcx/runtime/device_platform.h"
#include "mcx/runtime/executable_cache.h"
#include "mcx/runtime/spmd_entry.h"
#include "mcx/runtime/stream.h"
#include "mcx/runtime/thread_guard.h"

namespace mcx {
namespace {

std::atomic<int64_t> g_spmd_partitioned{0};
std::atomic<int64_t> g_spmd_loaded{0};
std::atomic<int64_t> g_spmd_checked{0};
std::atomic<int64_t> g_spmd_check_mismatches{0};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Launches so far per mesh (by device ids), for the launch check of meshes that span processes: every process
// enqueues the same computations over a mesh in the same order, so the counts agree (until
// restart_launch_sequences). mu also orders the enqueues of one launch against another's, so that every
// device's stream sees the launches in sequence order.
struct LaunchCount {
  std::vector<int> processes;  // of the mesh, ascending
  uint64_t launched = 0;
};
struct LaunchSequences {
  Mutex mu;
  std::map<std::vector<int>, LaunchCount> counts ABSL_GUARDED_BY(mu);
};

LaunchSequences& launch_sequences() {
  static auto* sequences = new LaunchSequences();  // never destroyed: streams may launch until exit
  return *sequences;
}

uint64_t next_launch_sequence(LaunchSequences& sequences, const Mesh& mesh)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(sequences.mu) {
  std::vector<int> ids;
  for (const Device& d : mesh.devices()) ids.push_back(d.global_id);
  LaunchCount& c = sequences.counts[ids];
  if (c.processes.empty()) {
    for (const Device& d : mesh.devices()) c.processes.push_back(d.process_index);
    std::sort(c.processes.begin(), c.processes.end());
    c.processes.erase(std::unique(c.processes.begin(), c.processes.end()), c.processes.end());
  }
  return c.launched++;
}

uint64_t fingerprint64(const ir::Program& program) {
  const std::array<uint8_t, 32> f = ir::fingerprint(program);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | f[i];
  return v;
}

// Global type of a per-device value laid out by spec (manual mode): local dims times shard counts.
AbstractValue global_type(const AbstractValue& local, const PartitionSpec& spec, const MeshAxes& mesh) {
  AbstractValue g = local;
  for (int d = 0; d < local.rank(); ++d) {
    g.shape[d] = local.shape[d] * DimExpr(num_shards(spec, mesh, d));
  }
  return g;
}

std::vector<int64_t> static_dims(const AbstractValue& a) {
  absl::StatusOr<std::vector<int64_t>> d = to_concrete(a.shape);
  return d.ok() ? *std::move(d) : std::vector<int64_t>{};
}

// The shard of `value` held by `device` (nullptr when it holds none).
const Shard* shard_on(const ArrayValue& value, const Device& device) {
  for (const Shard& s : value.shards) {
    if (s.device == device) return &s;
  }
  return nullptr;
}

// The platform of a mesh's devices. InvalidArgument when they are on more than one platform.
absl::StatusOr<const Platform*> mesh_platform(const Mesh& mesh, std::string_view what) {
  const Device& first = mesh.devices().front();
  for (const Device& d : mesh.devices()) {
    if (d.platform != first.platform) {
      return absl::InvalidArgumentError(absl::StrCat("[", std::string(what), "] the mesh ", mesh.to_string(),
                                                     " holds devices of platforms '", first.platform, "' and '",
                                                     d.platform, "'; expected one platform"));
    }
  }
  return platform_of(first);
}

// The work one device does for one execution, run on its stream: await the inputs (take them, when
// donated), run the executable, complete the outputs with the buffers or with the error.
struct DeviceTask {
  std::shared_ptr<const Executable> exe;
  std::vector<std::shared_ptr<AsyncBuffer>> inputs;
  std::vector<ReadLease> reads;  // per input: the read registered at enqueue (empty for a donated input)
  std::vector<bool> donated;
  std::vector<std::shared_ptr<AsyncBuffer>> outputs;
  Device device;
  std::string what;
  std::vector<Device> partition_devices;  // SPMD: the mesh devices by partition id; empty: one device
  int64_t position = 0;                   // SPMD: this device's partition id
  int local_partitions = 1;               // SPMD: partitions of this launch running in this process
  std::optional<LaunchTag> launch;        // SPMD over processes: tags this launch's collectives

  // Records an input (the shard must exist and, when donated, must not have been donated before).
  // Nothing is marked yet: see commit_donations().
  absl::Status add_input(const Shard* shard, bool donate, size_t i) {
    if (shard == nullptr) {
      return absl::InternalError(absl::StrCat("[", what, "] argument ", i, " has no shard on ", device.to_string()));
    }
    if (donate && shard->data->is_donated()) {
      return absl::InvalidArgumentError(
          absl::StrCat("[", what, "] argument ", i, " was already donated: the array is deleted"));
    }
    ReadLease read;  // a non-donated input is read even if a later launch donates it
    if (!donate) {
      absl::StatusOr<ReadLease> lease = shard->data->lease_read();
      if (!lease.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("[", what, "] argument ", i, ": ", lease.status().message()));
      }
      read = *std::move(lease);
    }
    inputs.push_back(shard->data);
    reads.push_back(std::move(read));
    donated.push_back(donate);
    return absl::OkStatus();
  }

  // Marks the donated inputs, once every task of the launch has been checked. A donated buffer that is also
  // another input of the same call is refused first (as PjRt does): the call would read memory it gave away.
  absl::Status commit_donations() {
    if (std::find(donated.begin(), donated.end(), true) != donated.end()) {
      absl::flat_hash_map<const AsyncBuffer*, size_t> first_use;  // buffer -> the first input that uses it
      for (size_t j = 0; j < inputs.size(); ++j) {
        auto [it, inserted] = first_use.emplace(inputs[j].get(), j);
        const size_t i = it->second;
        if (inserted || !(donated[i] || donated[j])) continue;
        if (donated[i] && donated[j]) {
          return absl::InvalidArgumentError(absl::StrCat("[", what, "] arguments ", i, " and ", j,
                                                         " donate the same buffer twice (on ", device.to_string(),
                                                         "); expected each donated buffer once"));
        }
        return absl::InvalidArgumentError(absl::StrCat(
            "[", what, "] argument ", donated[i] ? i : j, " is donated but its buffer is also passed as argument ",
            donated[i] ? j : i, " of the same call (on ", device.to_string(),
            "); a donated buffer cannot also be read by the call: pass a copy, or do not donate it"));
      }
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (donated[i]) MCX_RETURN_IF_ERROR(inputs[i]->mark_donated(absl::StrCat("donated to ", what, " argument ", i)));
    }
    return absl::OkStatus();
  }

  void operator()() {
    auto fail = [&](const absl::Status& s) {
      for (auto& o : outputs) o->set_error(s);
    };
    profiler::Scope traced("launch", what);
    if (traced.recording()) {
      traced.arg("device", device.to_string());
      if (!partition_devices.empty()) traced.arg("partition", position);
      if (launch) traced.arg("launch", static_cast<int64_t>(launch->sequence));
    }
    const absl::Time deadline = default_device_deadline();
    // Inline storage: no allocation for up to 8 inputs (this runs for every op dispatched).
    absl::InlinedVector<std::shared_ptr<const DeviceBuffer>, 8> held;
    absl::InlinedVector<const DeviceBuffer*, 8> buffers;
    {
      profiler::Scope waited("launch", "wait for inputs");
      for (size_t i = 0; i < inputs.size(); ++i) {
        absl::StatusOr<std::shared_ptr<const DeviceBuffer>> b =
            donated[i] ? inputs[i]->take_donated(deadline) : reads[i].await_device(deadline);
        if (!b.ok()) return fail(b.status());
        buffers.push_back(b->get());
        held.push_back(*std::move(b));
      }
    }
    ExecutionContext ctx;
    ctx.partition_id = static_cast<int>(position);
    ctx.num_partitions = std::max<int>(1, static_cast<int>(partition_devices.size()));
    ctx.local_partitions = local_partitions;
    ctx.deadline = deadline;
    ctx.local_device = device.local_id;
    std::vector<std::shared_ptr<Communicator>> in_use;  // keeps the groups alive until execute() returns
    if (!partition_devices.empty()) ctx.communicator = [&](std::span<const int64_t> group) -> absl::StatusOr<Communicator*> {
      std::vector<Device> members;
      members.reserve(group.size());
      for (int64_t p : group) members.push_back(partition_devices.at(p));
      MCX_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> comm, group_communicator(members, device, deadline));
      if (launch) comm->set_launch(*launch);
      in_use.push_back(comm);
      return comm.get();
    };
    absl::StatusOr<std::vector<std::shared_ptr<const DeviceBuffer>>> outs =
        exe->execute(std::span<const DeviceBuffer* const>(buffers.data(), buffers.size()), &ctx);
    buffers.clear();
    held.clear();
    if (!outs.ok()) {
      return fail(with_message(outs.status(), absl::StrCat("[", what, " on ", device.to_string(), "] ",
                                                           outs.status().message())));
    }
    for (size_t r = 0; r < outputs.size(); ++r) outputs[r]->set(std::move((*outs)[r]));
  }
};

}  // namespace

absl::StatusOr<std::shared_ptr<const SpmdExecutable>> SpmdExecutable::compile(const ir::Program& global,
                                                                              SpmdOptions options) {
  profiler::Scope traced("compile", "partition ", options.name);
  if (traced.recording()) traced.arg("mesh devices", static_cast<int64_t>(options.mesh.size()));
  auto exe = std::shared_ptr<SpmdExecutable>(new SpmdExecutable(options));
  const MeshAxes& axes = options.mesh.axes();
  if (options.in_specs.size() != global.params.size()) {
    return absl::InvalidArgumentError(absl::StrCat("[", options.name, "] expected ", global.params.size(),
                                                   " input shardings, found ", options.in_specs.size()));
  }
  MCX_ASSIGN_OR_RETURN(const Platform* platform, mesh_platform(options.mesh, options.name));
  ir::Program per_device;
  std::vector<PartitionSpec> out_specs;
  std::optional<CompiledKey> stored_key;  // set when a persistent cache is installed (not for manual)
  std::optional<std::string> stored_bytes;  // the store's entry under stored_key
  bool check_stored = false;                // a hit to partition again and compare (check_this_hit)
  std::vector<AbstractValue> in_avals;
  auto t0 = std::chrono::steady_clock::now();
  if (options.manual) {
    if (options.out_specs.size() != global.results.size()) {
      return absl::InvalidArgumentError(absl::StrCat("[", options.name, "] expected ", global.results.size(),
                                                     " output specs, found ", options.out_specs.size()));
    }
    per_device = global;
    for (size_t i = 0; i < global.params.size(); ++i) {
      in_avals.push_back(global_type(global.params[i], options.in_specs[i], axes));
    }
    std::vector<AbstractValue> results = global.result_types();
    for (size_t i = 0; i < results.size(); ++i) {
      if (!options.out_specs[i] || options.out_specs[i]->has_unconstrained()) {
        return absl::InvalidArgumentError(
            absl::StrCat("[", options.name, "] output ", i, " needs a fully specified out spec"));
      }
      out_specs.push_back(*options.out_specs[i]);
      exe->out_avals_.push_back(global_type(results[i], out_specs.back(), axes));
    }
  } else {
    in_avals = global.params;
    exe->out_avals_ = global.result_types();
    // With a persistent compilation cache, a partitioned program is one entry (spmd_entry.h): a hit skips
    // the partitioner, the planner and the code generator.
    if (std::shared_ptr<CompiledStore> store = compiled_store()) {
      stored_key = executable_key(*platform, options.program_key.empty() ? ir::canonical_encoding(global)
                                                                          : options.program_key);
      stored_key->kind = kCompiledSpmdExecutable;
      stored_key->device_assignment = spmd_device_assignment(axes, options.in_specs, options.out_specs);
      MCX_ASSIGN_OR_RETURN(stored_bytes, store->load(*stored_key));
      check_stored = stored_bytes.has_value() && store->check_this_hit();  // then partitioned and compared below
      if (stored_bytes && !check_stored) {
        absl::StatusOr<SpmdEntry> entry = decode_spmd_entry(*stored_bytes, *platform);
        if (entry.ok() && entry->out_specs.size() == global.results.size() &&
            entry->executable->program().num_params() == global.num_params()) {
          out_specs = std::move(entry->out_specs);
          exe->stats_ = std::move(entry->stats);
          exe->fingerprint_ = entry->fingerprint;
          exe->exe_ = std::move(entry->executable);
          ++g_spmd_loaded;
        } else {
          MCX_RETURN_IF_ERROR(store->problem(absl::DataLossError(absl::StrCat(
              "[spmd] a stored executable of ", options.name, " did not load, partitioning it: ",
              entry.ok() ? std::string("its layouts do not fit the program") : std::string(entry.status().message())))));
        }
      }
    }
    if (!exe->exe_) {
      MCX_ASSIGN_OR_RETURN(spmd::PartitionedProgram partitioned,
                           spmd::partition(global, axes, options.in_specs, options.out_specs));
      ++g_spmd_partitioned;
      per_device = std::move(partitioned.per_device);
      out_specs = std::move(partitioned.out_specs);
      exe->stats_ = std::move(partitioned.stats);
    }
  }
  exe->partition_seconds_ = seconds_since(t0);
  if (log_level() == "debug" || log_level() == "trace") {  // printing the program is not free
    log_debug("[spmd] {}: {} on {}: {} all_reduce, {} all_gather, {} all_to_all, {} local slices, {} fallback "
              "gathers; per-device program:\n{}",
              options.name, options.manual ? "manual (shard_map)" : "partitioned", options.mesh.to_string(),
              exe->stats_.all_reduces, exe->stats_.all_gathers, exe->stats_.all_to_alls, exe->stats_.local_slices,
              exe->stats_.fallback_gathers, ir::print_program(exe->exe_ ? exe->exe_->program() : per_device));
  }
  if (!exe->exe_) {
    MCX_ASSIGN_OR_RETURN(exe->exe_, ExecutableCache::global().get_or_compile(*platform, per_device));
    exe->fingerprint_ = fingerprint64(per_device);
    const double compile_ms = 1e3 * seconds_since(t0);
    std::shared_ptr<CompiledStore> store = compiled_store();
    if (stored_key && store && (check_stored || store->wants(compile_ms))) {
      absl::StatusOr<std::string> bytes =
          encode_spmd_entry(SpmdEntry{out_specs, exe->stats_, exe->fingerprint_, exe->exe_});
      const bool same = check_stored && bytes.ok() && *bytes == *stored_bytes;
      if (check_stored && bytes.ok()) {
        ++g_spmd_checked;
        if (!same) {
          ++g_spmd_check_mismatches;
          MCX_RETURN_IF_ERROR(store->problem(absl::DataLossError(absl::StrCat(
              "[spmd] the stored executable of ", options.name, " (", stored_bytes->size(),
              " bytes) differs from a fresh partition and compile (", bytes->size(),
              " bytes, first difference at byte ", first_difference(*bytes, *stored_bytes),
              "): the fresh one is used and stored in its place"))));
        }
      }
      if (bytes.ok()) {
        if (!same) MCX_RETURN_IF_ERROR(store->save(*stored_key, *bytes, compile_ms));
      } else {
        log_warn("[spmd] could not serialise the executable of {}: {}", options.name,
                 std::string(bytes.status().message()));
      }
    }
  }
  for (size_t i = 0; i < in_avals.size(); ++i) {
    exe->in_shardings_.push_back(NamedSharding(options.mesh, options.in_specs[i]));
  }
  for (const PartitionSpec& s : out_specs) exe->out_shardings_.push_back(NamedSharding(options.mesh, s));
  if (!options.spans_processes) options.spans_processes = !options.mesh.is_fully_addressable();
  options.program_key = std::string();  // needed only to compile: not kept with the executable
  exe->options_ = std::move(options);
  return std::shared_ptr<const SpmdExecutable>(std::move(exe));
}

SpmdCompileStats spmd_compile_stats() {
  return {g_spmd_partitioned.load(), g_spmd_loaded.load(), g_spmd_checked.load(), g_spmd_check_mismatches.load()};
}


absl::StatusOr<std::vector<ArrayValue>> SpmdExecutable::execute(std::span<const ArrayValue> args,
                                                                std::span<const bool> donate) const {
  const std::string& what = options_.name;
  check_thread_guard(options_.spans_processes, what);
  if (args.size() != in_shardings_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("[", what, "] expected ", in_shardings_.size(), " arguments, found ", args.size()));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    std::vector<int64_t> dims = static_dims(args[i].aval);
    if (!args[i].sharding.equivalent(in_shardings_[i], dims)) {
      return absl::InvalidArgumentError(absl::StrCat("[", what, "] argument ", i, " has sharding ",
                                                     args[i].sharding.to_string(), ", expected ",
                                                     in_shardings_[i].to_string()));
    }
  }
  // Results: one pending shard per addressable device of the mesh.
  std::vector<ArrayValue> results(out_avals_.size());
  for (size_t r = 0; r < results.size(); ++r) {
    results[r].aval = out_avals_[r];
    results[r].sharding = out_shardings_[r];
    results[r].committed = true;
    std::vector<int64_t> dims = static_dims(out_avals_[r]);
    for (auto& [device, box] : out_shardings_[r].addressable_devices_indices_map(dims)) {
      results[r].shards.push_back(Shard{device, box, AsyncBuffer::pending()});
    }
  }
  const Mesh& mesh = options_.mesh;
  // The devices of this execution run at once (a platform whose kernels use host threads shares them out).
  int local_parts = 0;
  for (const Device& d : mesh.devices()) local_parts += d.is_addressable() ? 1 : 0;
  // Every device's task is checked before any is enqueued: a partial launch would leave the launched
  // devices waiting in their first collective for partners that never come.
  std::vector<DeviceTask> tasks;
  for (int64_t position = 0; position < mesh.size(); ++position) {
    const Device& device = mesh.devices()[position];
    if (!device.is_addressable()) continue;
    DeviceTask task{exe_, {}, {}, {}, {}, device, what, mesh.devices(), position, local_parts, std::nullopt};
    for (size_t i = 0; i < args.size(); ++i) {
      MCX_RETURN_IF_ERROR(task.add_input(shard_on(args[i], device), i < donate.size() && donate[i], i));
    }
    for (ArrayValue& r : results) task.outputs.push_back(shard_on(r, device)->data);
    tasks.push_back(std::move(task));
  }
  for (DeviceTask& task : tasks) MCX_RETURN_IF_ERROR(task.commit_donations());
  LaunchSequences& sequences = launch_sequences();
  MutexLock launch(&sequences.mu);
  if (options_.spans_processes) {
    const LaunchTag tag{what, fingerprint_, next_launch_sequence(sequences, mesh)};
    for (DeviceTask& task : tasks) task.launch = tag;
  }
  for (DeviceTask& task : tasks) stream_for(task.device).enqueue(std::move(task));
  return results;
}

absl::StatusOr<std::vector<ArrayValue>> launch_on_device(std::shared_ptr<const Executable> exe,
                                                         std::span<const ArrayValue> args,
                                                         const Device& device, bool committed,
                                                         std::string_view what, std::span<const bool> donate) {
  if (exe->platform() != device.platform) {
    return absl::InvalidArgumentError(absl::StrCat("[", std::string(what), "] an executable of platform '",
                                                   std::string(exe->platform()), "' cannot run on ",
                                                   device.to_string()));
  }
  DeviceTask task{std::move(exe), {}, {}, {}, {}, device, std::string(what), {}, 0, 1, std::nullopt};
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].shards.size() != 1) {
      return absl::InternalError(absl::StrCat("[", task.what, "] launch_on_device needs single-shard arguments"));
    }
    MCX_RETURN_IF_ERROR(task.add_input(&args[i].shards.front(), i < donate.size() && donate[i], i));
  }
  MCX_RETURN_IF_ERROR(task.commit_donations());
  std::vector<ArrayValue> results;
  for (const AbstractValue& t : task.exe->program().result_types()) {
    results.push_back(ArrayValue::single_pending(t, device, committed));
    task.outputs.push_back(results.back().shards.front().data);
  }
  stream_for(device).enqueue(std::move(task));
  return results;
}

void restart_launch_sequences(const std::vector<int>& processes) {
  LaunchSequences& sequences = launch_sequences();
  MutexLock lock(&sequences.mu);
  for (auto& [ids, count] : sequences.counts) {
    if (std::includes(processes.begin(), processes.end(), count.processes.begin(), count.processes.end())) {
      count.launched = 0;
    }
  }
}

}  // namespace mcx
