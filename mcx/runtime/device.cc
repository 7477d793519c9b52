#include "mcx/runtime/device.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/config.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"
#include "mcx/core/mutex.h"
#include "mcx/core/process_exit.h"
#include "mcx/core/topology.h"
#include "mcx/platform/platform_registry.h"
#include "mcx/runtime/builtin_platforms.h"
#include "mcx/runtime/compilation_cache_setup.h"
#include "mcx/runtime/device_platform.h"
#include "mcx/runtime/stream.h"

namespace mcx {
namespace {

constexpr int kMaxCpuDevices = 1024;

// The devices and streams of this process. Created once, on first use, and never destroyed: stream
// threads are joined by the first of the ordered exit steps instead (core/process_exit.h), so that code
// running during static destruction still finds valid devices, streams run their queued work to the end,
// and everything their tasks use (the CPU thread pool) is stopped only after them.
struct Client {
  std::string platform;               // the default platform (the first selected): devices() are its
  std::vector<Device> devices;        // the whole job, by global id
  std::vector<Device> local_devices;  // this process, by local id
  // Every selected platform and its devices (the default one's local devices; another's are this process's
  // only, with global ids after the job's), in selection order.
  struct PlatformDevices {
    std::string name;
    const Platform* platform;
    std::vector<Device> local;
  };
  std::vector<PlatformDevices> by_platform;
  int process_index = 0;
  int process_count = 1;
  std::vector<std::unique_ptr<Stream>> streams;      // each device's, then the host-to-device queues
  absl::flat_hash_map<int, int> stream_by_global_id;  // global id -> index into streams
  absl::flat_hash_map<int, int> upload_by_global_id;  // global id -> index of its host-to-device queue, if any
  pid_t creator_pid = 0;
};

// Serialises creating the client and set_cpu_device_count (g_client itself is read without it).
Mutex& client_mutex() {
  static Mutex* mu = new Mutex();  // never destroyed
  return *mu;
}
std::atomic<Client*> g_client{nullptr};
std::optional<int> g_requested_cpu_device_count ABSL_GUARDED_BY(client_mutex());

// Joins every stream thread at process exit (ExitStage::kDeviceStreams: before the thread pool the
// streams' kernels use). A child made by fork() inherits the client but not its threads: only the creating
// process joins them.
void shutdown_client_at_exit() {
  Client* c = g_client.load(std::memory_order_acquire);
  if (c == nullptr || c->creator_pid != getpid()) return;
  for (auto& s : c->streams) s->request_stop();  // let every stream drain concurrently
  for (auto& s : c->streams) s->shutdown();
}

absl::StatusOr<int> resolve_cpu_device_count() ABSL_EXCLUSIVE_LOCKS_REQUIRED(client_mutex()) {
  if (g_requested_cpu_device_count) return *g_requested_cpu_device_count;
  MCX_ASSIGN_OR_RETURN(int64_t n, kCpuDeviceCountFlag.get());
  return static_cast<int>(n);
}

absl::StatusOr<std::unique_ptr<Client>> create_client() ABSL_EXCLUSIVE_LOCKS_REQUIRED(client_mutex()) {
  // Mark first, then read the topology: a concurrent distributed::initialize either installed its
  // topology before this point (and we see it) or fails because devices are now in use.
  mark_devices_used();
  // MCX_PLATFORMS is read here, with the devices, so that a bad list fails the first device use.
  MCX_RETURN_IF_ERROR(register_builtin_platforms());
  MCX_ASSIGN_OR_RETURN(std::vector<Platform*> platforms, selected_platforms());
  MCX_ASSIGN_OR_RETURN(int virtual_count, resolve_cpu_device_count());
  const Platform& primary = *platforms.front();
  const std::string name(primary.name());
  const int count = primary.device_count().value_or(virtual_count);
  auto client = std::make_unique<Client>();
  client->creator_pid = getpid();
  client->platform = name;
  if (std::optional<Topology> topo = distributed_topology()) {
    // Multi-process: the topology is authoritative (it was built from what every process contributed
    // in distributed::initialize, whose options may differ from MCX_CPU_DEVICE_COUNT). We adopt its
    // local device count and only warn when it differs from the count configured here.
    client->process_index = topo->process_index;
    client->process_count = topo->process_count;
    for (const TopologyDevice& td : topo->devices) {
      Device d{td.global_id, td.process_index, td.local_id, td.platform.empty() ? "cpu" : td.platform,
               td.kind.empty() ? "cpu" : td.kind};
      client->devices.push_back(d);
      if (d.process_index == topo->process_index) client->local_devices.push_back(d);
    }
    // The job's devices were published at initialize (core/topology.h); this process runs on what it published.
    for (const Device& d : client->local_devices) {
      if (d.platform != name) {
        return absl::FailedPreconditionError(absl::StrCat(
            "[devices] the job's topology lists ", d.to_string(), " (platform '", d.platform, "') for process ",
            topo->process_index, " but this process selected platform '", name,
            "' (MCX_PLATFORMS); expected the platform published at distributed::initialize"));
      }
    }
    if (client->local_devices.empty()) {
      return absl::FailedPreconditionError(absl::StrCat("[devices] the distributed topology lists no devices for "
                                                        "this process (process index ",
                                                        topo->process_index, " of ", topo->process_count, ")"));
    }
    std::stable_sort(client->local_devices.begin(), client->local_devices.end(),
                     [](const Device& a, const Device& b) { return a.local_id < b.local_id; });
    if (static_cast<int>(client->local_devices.size()) != count) {
      log_warn("[devices] the distributed topology gives process {} {} local devices but {} were configured "
               "(set_cpu_device_count / MCX_CPU_DEVICE_COUNT); using the topology's {}",
               topo->process_index, client->local_devices.size(), count, client->local_devices.size());
    }
  } else {
    for (int i = 0; i < count; ++i) client->devices.push_back(Device{i, 0, i, name, primary.device_kind(i)});
    client->local_devices = client->devices;
  }
  client->by_platform.push_back({name, &primary, client->local_devices});
  // The other selected platforms' devices belong to this process alone; their ids follow the job's.
  int next_id = static_cast<int>(client->devices.size());
  for (size_t p = 1; p < platforms.size(); ++p) {
    const std::string other(platforms[p]->name());
    std::vector<Device> local;
    const int n = platforms[p]->device_count().value_or(virtual_count);
    for (int i = 0; i < n; ++i) {
      local.push_back(Device{next_id++, client->process_index, i, other, platforms[p]->device_kind(i)});
    }
    client->by_platform.push_back({other, platforms[p], std::move(local)});
  }
  for (const Client::PlatformDevices& p : client->by_platform) {
    for (const Device& d : p.local) {
      client->stream_by_global_id[d.global_id] = static_cast<int>(client->streams.size());
      client->streams.push_back(std::make_unique<Stream>(d.to_string()));
      if (p.platform->copies_beside_compute()) {
        client->upload_by_global_id[d.global_id] = static_cast<int>(client->streams.size());
        client->streams.push_back(std::make_unique<Stream>(d.to_string() + " uploads"));
      }
    }
  }
  MCX_RETURN_IF_ERROR(setup_compilation_cache(client->process_index));
  return client;
}

Client& client() {
  if (Client* c = g_client.load(std::memory_order_acquire)) return *c;
  MutexLock lock(&client_mutex());
  if (Client* c = g_client.load(std::memory_order_relaxed)) return *c;
  logger();  // never destroyed either; created here so that stream tasks never race to create it
  Client* c = value_or_throw(create_client()).release();  // never destroyed (see Client)
  g_client.store(c, std::memory_order_release);
  // A ProcessFailure names the failed process's devices (the topology does not change after creation).
  set_process_devices_resolver([c](int process) {
    std::vector<int> ids;
    for (const Device& d : c->devices) {
      if (d.process_index == process) ids.push_back(d.global_id);
    }
    return ids;
  });
  run_at_exit(ExitStage::kDeviceStreams, shutdown_client_at_exit);
  return *c;
}

}  // namespace

std::string Device::to_string() const { return absl::StrCat(platform, ":", global_id); }

bool Device::is_addressable() const { return process_index == mcx::process_index(); }

const std::vector<Device>& devices() { return client().devices; }
const std::vector<Device>& local_devices() { return client().local_devices; }

std::vector<Device> local_devices(int process_index) {
  const Client& c = client();
  if (process_index < 0 || process_index >= c.process_count) {
    throw InvalidArgument(absl::StrCat("[local_devices] expected a process index in [0, ", c.process_count,
                                       "), got ", process_index));
  }
  std::vector<Device> out;
  for (const Device& d : c.devices) {
    if (d.process_index == process_index) out.push_back(d);
  }
  std::sort(out.begin(), out.end(), [](const Device& a, const Device& b) { return a.local_id < b.local_id; });
  return out;
}
int device_count() { return static_cast<int>(client().devices.size()); }
int local_device_count() { return static_cast<int>(client().local_devices.size()); }
int process_index() { return client().process_index; }
int process_count() { return client().process_count; }
const Device& default_device() { return client().local_devices.front(); }
std::string default_platform() { return client().platform; }

const std::vector<Device>& devices(std::string_view platform) {
  Client& c = client();
  if (platform == c.platform) return c.devices;
  return local_devices(platform);
}

namespace {

// The selected platform `name` and its devices; NotFound naming the selected platforms otherwise.
absl::StatusOr<const Client::PlatformDevices*> selected(std::string_view name) {
  Client& c = client();
  std::vector<std::string> names;
  for (const Client::PlatformDevices& p : c.by_platform) {
    if (p.name == name) return &p;
    names.push_back(p.name);
  }
  return absl::NotFoundError(absl::StrCat("[devices] no devices of platform '", std::string(name),
                                          "' in this process; the selected platforms are ",
                                          absl::StrJoin(names, ", "), " (MCX_PLATFORMS)"));
}

}  // namespace

const std::vector<Device>& local_devices(std::string_view platform) {
  return value_or_throw(selected(platform))->local;
}

absl::StatusOr<const Platform*> platform_of(const Device& device) {
  MCX_ASSIGN_OR_RETURN(const Client::PlatformDevices* p, selected(device.platform));
  return p->platform;
}

absl::StatusOr<std::vector<TopologyDevice>> describe_local_devices(const std::optional<std::vector<int>>& ids,
                                                                   std::optional<int> cpu_device_count) {
  MutexLock lock(&client_mutex());
  if (g_client.load(std::memory_order_relaxed) != nullptr) {
    return absl::FailedPreconditionError("[devices] the devices were already made; a job's devices are described "
                                         "before the first use of any device");
  }
  set_requested_local_device_ids(ids);  // before a device platform opens its devices
  MCX_RETURN_IF_ERROR(register_builtin_platforms());
  MCX_ASSIGN_OR_RETURN(std::vector<Platform*> platforms, selected_platforms());
  const Platform& primary = *platforms.front();
  int count = 0;
  if (std::optional<int> n = primary.device_count()) {
    count = *n;
  } else if (ids.has_value()) {
    count = static_cast<int>(ids->size());
  } else if (cpu_device_count.has_value()) {
    count = *cpu_device_count;
  } else {
    MCX_ASSIGN_OR_RETURN(count, resolve_cpu_device_count());
  }
  if (count < 1 || count > kMaxCpuDevices) {
    return absl::FailedPreconditionError(absl::StrCat("[devices] platform '", std::string(primary.name()), "' has ",
                                                      count, " devices for this process; expected 1 to ",
                                                      kMaxCpuDevices));
  }
  std::vector<TopologyDevice> out;
  const std::string name(primary.name());
  for (int i = 0; i < count; ++i) out.push_back(TopologyDevice{0, 0, i, name, primary.device_kind(i)});
  return out;
}

void set_cpu_device_count(int n) {
  if (n < 1 || n > kMaxCpuDevices) {
    throw InvalidArgument(absl::StrCat("[set_cpu_device_count] expected a device count in [1, ", kMaxCpuDevices,
                                       "], got ", n));
  }
  MutexLock lock(&client_mutex());
  if (Client* c = g_client.load(std::memory_order_relaxed)) {
    throw FailedPrecondition(absl::StrCat("[set_cpu_device_count] the devices were already created (",
                                          c->local_devices.size(),
                                          " local devices); call set_cpu_device_count(", n,
                                          ") before the first use of any device, array or computation"));
  }
  g_requested_cpu_device_count = n;
}

Stream& stream_for(const Device& device) {
  Client& c = client();
  auto it = c.stream_by_global_id.find(device.global_id);
  if (it == c.stream_by_global_id.end() || device.process_index != c.process_index) {
    throw InvalidArgument(absl::StrCat("[stream_for] expected a device of this process (process ", c.process_index,
                                       "), got ", device.to_string(), " of process ", device.process_index));
  }
  return *c.streams[it->second];
}

std::vector<Device> failed_devices(const ProcessFailure& failure) {
  const Client& c = client();
  std::vector<Device> out;
  for (int id : failure.failed_device_ids()) {
    if (id >= 0 && id < static_cast<int>(c.devices.size())) out.push_back(c.devices[static_cast<size_t>(id)]);
  }
  return out;
}

Stream& host_to_device_stream_for(const Device& device) {
  Stream& compute = stream_for(device);  // checks the device
  Client& c = client();
  auto it = c.upload_by_global_id.find(device.global_id);
  return it == c.upload_by_global_id.end() ? compute : *c.streams[it->second];
}

absl::Status synchronize_device(const Device& device, absl::Time deadline) {
  Stream& compute = stream_for(device);
  Stream& uploads = host_to_device_stream_for(device);
  if (&uploads != &compute) MCX_RETURN_IF_ERROR(uploads.synchronize(deadline));
  return compute.synchronize(deadline);
}

}  // namespace mcx
