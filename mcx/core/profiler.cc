// The profiler's sessions and event buffers (profiler.h); the file format is written by trace_json.cc.

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mcx/core/config.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"
#include "mcx/core/mutex.h"
#include "mcx/core/process_exit.h"
#include "mcx/core/profiler.h"
#include "mcx/core/trace_json.h"

namespace mcx::profiler {
namespace {

int64_t monotonic_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

std::string host_name() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string();
}

// The running kernel's boot id (empty where /proc does not have it): one CLOCK_MONOTONIC per boot id.
std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

int64_t realtime_ns() {
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

// One thread's events. The thread appends; stop_session takes them. The registry keeps the buffer after its
// thread exits, so a short-lived thread's events still reach the file.
struct ThreadBuffer {
  Mutex mu;
  std::vector<TraceEvent> events ABSL_GUARDED_BY(mu);
  std::string name ABSL_GUARDED_BY(mu);
  int tid = 0;
};

enum State : int { kUnknown = 0, kOff = 1, kOn = 2 };

// The process's profiler: whether a session runs, its settings, and every thread's buffer.
class Profiler {
 public:
  bool active() {
    const int s = state_.load(std::memory_order_relaxed);
    if (s != kUnknown) return s == kOn;
    std::call_once(env_once_, [this] { start_from_environment(); });
    return state_.load(std::memory_order_relaxed) == kOn;
  }

  absl::Status start(const std::string& dir) {
    {
      MutexLock lock(&mu_);
      if (running_) {
        return absl::FailedPreconditionError(
            absl::StrCat("[profiler] a session is already running (writing to ", dir_, "); stop it first"));
      }
      MCX_RETURN_IF_ERROR(make_directory(dir));
      dir_ = dir;
      running_ = true;
      start_monotonic_ns_ = monotonic_ns();
      start_realtime_ns_ = realtime_ns();
      events_.store(0, std::memory_order_relaxed);
      dropped_.store(0, std::memory_order_relaxed);
    }
    for (const std::shared_ptr<ThreadBuffer>& b : buffers()) {
      MutexLock lock(&b->mu);
      b->events.clear();
    }
    state_.store(kOn, std::memory_order_release);
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> stop() {
    TraceFile file;
    {
      MutexLock lock(&mu_);
      if (!running_) return absl::FailedPreconditionError("[profiler] no session is running");
      running_ = false;
      state_.store(kOff, std::memory_order_release);
      file.dir = dir_;
      file.process_index = process_index_;
      file.process_label = process_label_;
      file.start_monotonic_us = start_monotonic_ns_ / 1000;
      file.start_realtime_us = start_realtime_ns_ / 1000;
      file.reference_offset_us = reference_offset_us_;
      file.reference_error_us = reference_error_us_;
    }
    file.os_pid = getpid();
    file.host = host_name();
    file.boot_id = boot_id();
    file.dropped_events = dropped_.load(std::memory_order_relaxed);
    for (const std::shared_ptr<ThreadBuffer>& b : buffers()) {
      MutexLock lock(&b->mu);
      file.threads.push_back({b->tid, b->name});
      for (TraceEvent& e : b->events) {
        e.tid = b->tid;
        file.events.push_back(std::move(e));
      }
      b->events.clear();
    }
    return write_trace_file(file);
  }

  void set_reference_clock(int64_t offset_us, int64_t error_us) {
    MutexLock lock(&mu_);
    reference_offset_us_ = offset_us;
    reference_error_us_ = error_us;
  }

  void set_process(int index, std::string label) {
    MutexLock lock(&mu_);
    process_index_ = index;
    process_label_ = std::move(label);
  }

  void set_thread_name(std::string name) {
    ThreadBuffer& b = this_thread();
    MutexLock lock(&b.mu);
    b.name = std::move(name);
  }

  void record(TraceEvent e) {
    if (events_.fetch_add(1, std::memory_order_relaxed) >= kMaxEvents) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    ThreadBuffer& b = this_thread();
    MutexLock lock(&b.mu);
    b.events.push_back(std::move(e));
  }

 private:
  void start_from_environment() {
    absl::StatusOr<std::string> dir = kProfileDirFlag.get();
    if (!dir.ok() || dir->empty()) {
      if (!dir.ok()) log_warn("{}", std::string(dir.status().message()));
      int expected = kUnknown;
      state_.compare_exchange_strong(expected, kOff);
      return;
    }
    if (absl::Status s = start(*dir); !s.ok()) {
      log_warn("[profiler] MCX_PROFILE_DIR={}: {}; not profiling", *dir, std::string(s.message()));
      int expected = kUnknown;
      state_.compare_exchange_strong(expected, kOff);
      return;
    }
    // Written after the device streams have drained, so their last launches are in it.
    run_at_exit(ExitStage::kProfiler, [this] {
      absl::StatusOr<std::string> path = stop();
      if (path.ok()) log_info("[profiler] wrote {}", *path);
      else if (!absl::IsFailedPrecondition(path.status())) log_warn("{}", std::string(path.status().message()));
    });
  }

  ThreadBuffer& this_thread() {
    thread_local std::shared_ptr<ThreadBuffer> mine;
    if (!mine) {
      mine = std::make_shared<ThreadBuffer>();
      if (gettid() == getpid()) {  // the process's first thread, where main() runs
        MutexLock lock(&mine->mu);
        mine->name = "main";
      }
      MutexLock lock(&registry_mu_);
      mine->tid = static_cast<int>(registry_.size()) + 1;
      registry_.push_back(mine);
    }
    return *mine;
  }

  std::vector<std::shared_ptr<ThreadBuffer>> buffers() {
    MutexLock lock(&registry_mu_);
    return registry_;
  }

  std::atomic<int> state_{kUnknown};
  std::once_flag env_once_;
  std::atomic<int64_t> events_{0}, dropped_{0};

  Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  std::string dir_ ABSL_GUARDED_BY(mu_);
  int64_t start_monotonic_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t start_realtime_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int process_index_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t reference_offset_us_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reference_error_us_ ABSL_GUARDED_BY(mu_) = -1;  // -1: no estimate
  std::string process_label_ ABSL_GUARDED_BY(mu_);

  Mutex registry_mu_;
  std::vector<std::shared_ptr<ThreadBuffer>> registry_ ABSL_GUARDED_BY(registry_mu_);
};

Profiler& profiler() {
  static Profiler* p = new Profiler();  // never destroyed: threads may record until the process ends
  return *p;
}

}  // namespace

bool active() { return profiler().active(); }
int64_t trace_clock_us() { return monotonic_ns() / 1000; }
void set_reference_clock(int64_t offset_us, int64_t error_us) { profiler().set_reference_clock(offset_us, error_us); }
absl::Status start_session(const std::string& dir) { return profiler().start(dir); }
absl::StatusOr<std::string> stop_session() { return profiler().stop(); }
void set_process(int index, std::string label) { profiler().set_process(index, std::move(label)); }
void set_thread_name(std::string name) { profiler().set_thread_name(std::move(name)); }

Scope::Scope(const char* category, std::string_view name) : Scope(category, name, std::string_view()) {}

Scope::Scope(const char* category, std::string_view first, std::string_view second) : category_(category) {
  if (!active()) return;
  name_.reserve(first.size() + second.size());
  name_.append(first).append(second);
  start_ns_ = monotonic_ns();
}

Scope::~Scope() {
  if (start_ns_ < 0 || !active()) return;  // a session that ended meanwhile takes no half-recorded event
  const int64_t end = monotonic_ns();
  profiler().record({.phase = 'X', .category = category_, .name = std::move(name_), .ts_us = start_ns_ / 1e3,
                     .dur_us = (end - start_ns_) / 1e3, .args = std::move(args_)});
}

Scope& Scope::arg(std::string_view key, int64_t value) {
  if (recording()) args_.push_back({std::string(key), value});
  return *this;
}
Scope& Scope::arg(std::string_view key, double value) {
  if (recording()) args_.push_back({std::string(key), value});
  return *this;
}
Scope& Scope::arg(std::string_view key, std::string_view value) {
  if (recording()) args_.push_back({std::string(key), std::string(value)});
  return *this;
}

void instant(const char* category, std::string_view name, std::vector<Arg> args) {
  if (!active()) return;
  profiler().record({.phase = 'i', .category = category, .name = std::string(name), .ts_us = monotonic_ns() / 1e3,
                     .args = std::move(args)});
}

void counter(const char* category, std::string_view name, double value) {
  if (!active()) return;
  profiler().record({.phase = 'C', .category = category, .name = std::string(name), .ts_us = monotonic_ns() / 1e3,
                     .args = {{"value", value}}});
}

Session::Session(const std::string& dir) { throw_if_error(start_session(dir)); }
Session::~Session() {
  if (!running_) return;
  absl::StatusOr<std::string> path = stop_session();
  if (!path.ok()) log_warn("{}", std::string(path.status().message()));
}
std::string Session::stop() {
  running_ = false;
  return value_or_throw(stop_session());
}

void start(const std::string& dir) { throw_if_error(start_session(dir)); }
std::string stop() { return value_or_throw(stop_session()); }

}  // namespace mcx::profiler
