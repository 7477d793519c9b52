// The coordination service's vocabulary, shared by the service, its clients, the agent and the transports: task
// ids and incarnations, the clock, task and job states, what the calls take and return (service.h says what each
// call means).
//
// Thread-safety: plain values, except the clocks (thread-safe).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "mcx/core/mutex.h"

namespace mcx::distributed {

using TaskId = int32_t;
using Incarnation = uint64_t;

// A random non-zero 64-bit id (std::random_device), used for task and service incarnations.
Incarnation random_incarnation();

// The only source of time for the service. Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time now() const = 0;
};

// absl::Now().
class SystemClock final : public Clock {
 public:
  absl::Time now() const override { return absl::Now(); }
  static SystemClock* get();  // process-wide instance
};

// A clock that moves only when told to (tests).
class ManualClock final : public Clock {
 public:
  explicit ManualClock(absl::Time start = absl::FromUnixSeconds(1'000'000)) : now_(start) {}
  absl::Time now() const override;
  void advance(absl::Duration d);

 private:
  mutable Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

enum class TaskState { kDisconnected, kConnected, kError, kShutdown };
std::string_view task_state_name(TaskState s);  // "DISCONNECTED", "CONNECTED", "ERROR", "SHUTDOWN"

// One task as the job sees it (an element of JobState).
struct TaskInfo {
  TaskId id = 0;
  Incarnation incarnation = 0;  // 0 until it first registers
  TaskState state = TaskState::kDisconnected;
  absl::Status error;           // why it failed, when state == kError
  bool operator==(const TaskInfo&) const = default;
};

// What a watch delivers: the whole job state at one version. Versions increase by one per change; a
// watcher may skip versions (it always gets the newest) and may see the same task state twice.
// `job_error` is set once a failure is fate-shared (non-recoverable mode), or an admin ended the job (end_job):
// every task must stop.
struct JobState {
  uint64_t version = 0;
  Incarnation service_incarnation = 0;
  std::vector<TaskInfo> tasks;  // indexed by task id
  absl::Status job_error;       // OK unless the job as a whole failed
};


// One barrier in flight, for status().
struct BarrierStatus {
  std::string name;
  int64_t counter = 0;
  std::vector<TaskId> arrived;
  std::vector<TaskId> missing;
  absl::Duration age;      // since the first arrival
  absl::Duration timeout;  // fixed by the first arrival
};

struct TaskStatus {
  TaskInfo info;
  std::optional<absl::Duration> last_heartbeat_age;  // nullopt before the first registration
  bool watching = false;  // it has a live watch stream (its connection is monitored)
  bool rejoined = false;  // it came back with rejoin_task (its incarnation predates this service)
};

// An operator's snapshot of the whole service.
struct ServiceStatus {
  Incarnation service_incarnation = 0;
  int num_tasks = 0;
  bool recoverable = false;
  absl::Duration heartbeat_timeout;
  uint64_t job_state_version = 0;
  absl::Status job_error;
  std::vector<TaskStatus> tasks;
  std::vector<BarrierStatus> barriers;  // in flight only
  size_t kv_keys = 0;
  size_t kv_bytes = 0;
  // The membership was rebuilt from rejoining tasks: this service replaced a coordinator that was lost.
  bool rebuilt = false;
  uint64_t live_set_generation = 0;  // the newest generation numbered (or the floor the rejoining tasks reported)
};

// A barrier instance a task had passed (rejoin_task).
struct PassedBarrier {
  std::string name;
  int64_t counter = 0;
};

struct RegisterResult {
  Incarnation service_incarnation = 0;
};

struct HeartbeatReply {
  Incarnation service_incarnation = 0;
  // The service host's trace clock (profiler::trace_clock_us) when it answered; -1 when the service did not say.
  int64_t service_clock_us = -1;
};

// What a live-set agreement is asked (get_live_tasks).
struct LiveSetRequest {
  std::vector<TaskId> tasks;  // the set to agree over; empty = all tasks
  // Agreements with different names are independent (each has its own pending call per set), so libraries
  // built on the agreement (live_devices, preemption sync) never meet each other's calls. "" is allowed.
  std::string name;
  // Delivered to every caller of the agreement, in LiveTasks::payloads (at most max_value_bytes).
  std::string payload;
};

struct LiveTasks {
  std::vector<TaskId> tasks;              // sorted
  std::vector<Incarnation> incarnations;  // parallel to tasks
  std::vector<std::string> payloads;      // parallel to tasks: what each caller sent
  // The number of this live set: the same for every caller of one agreement. It is job-wide and grows
  // (by one, across all names and sets) whenever an agreement over a (name, set) yields other members or
  // incarnations than the previous agreement over it; an agreement with the same members keeps the number.
  // So two agreements carry the same generation exactly when they agreed on the same live set, and a later
  // different set always has a larger number. A coordinator restart forgets the previous agreements: the first
  // one after it gets a new, larger number even over the same members (rejoin_task).
  uint64_t generation = 0;
  // How it differs from the previous agreement over the same (name, set), computed once by the service so that a
  // transport can send a caller that holds that one only the difference (N callers would otherwise get N lists of N
  // tasks). Null when there was none. Not part of the value: operator== ignores it.
  struct Change {
    uint64_t from_generation = 0;
    std::vector<TaskId> removed;  // members of the previous one that are not members (with that incarnation) now
    std::vector<TaskId> added;    // members now that were not (with this incarnation) before
    bool payloads_empty = false;  // every payload is empty (a difference carries none)
  };
  std::shared_ptr<const Change> change;
  bool operator==(const LiveTasks& o) const {
    return tasks == o.tasks && incarnations == o.incarnations && payloads == o.payloads && generation == o.generation;
  }
};

struct KeyValue {
  std::string key;
  std::string value;
  bool operator==(const KeyValue&) const = default;
};

template <typename T>
using Callback = std::function<void(T)>;

}  // namespace mcx::distributed
