#include "mcx/collectives/live_set.h"

#include <algorithm>
#include <atomic>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/error.h"
#include "mcx/core/mutex.h"
#include "mcx/core/profiler.h"

namespace mcx {
namespace {

struct Failure {
  uint64_t incarnation;
  absl::Status why;
};

struct Recorded {
  Mutex mu;
  std::map<std::vector<int>, LiveSet> by_requested ABSL_GUARDED_BY(mu);
  std::map<int, Failure> failures ABSL_GUARDED_BY(mu);  // by process
};

std::atomic<uint64_t> g_changes{0};

Recorded& recorded() {
  static Recorded* r = new Recorded();  // never destroyed: streams read it until exit
  return *r;
}

}  // namespace

bool LiveSet::excludes(int process) const {
  return std::binary_search(requested.begin(), requested.end(), process) &&
         !std::binary_search(processes.begin(), processes.end(), process);
}

std::string LiveSet::to_string() const {
  return absl::StrCat("generation ", generation, " (processes {", absl::StrJoin(processes, ","), "} of {",
                      absl::StrJoin(requested, ","), "})");
}

void record_process_failure(int process, uint64_t incarnation, const absl::Status& why) {
  profiler::instant("fault_tolerance", absl::StrCat("process ", process, " failed"),
                    {{"incarnation", static_cast<int64_t>(incarnation)}, {"why", std::string(why.message())}});
  Recorded& r = recorded();
  MutexLock lock(&r.mu);
  r.failures.insert_or_assign(process, Failure{incarnation, mark_process_failure(why, process)});
}

void record_process_alive(int process, uint64_t incarnation) {
  Recorded& r = recorded();
  MutexLock lock(&r.mu);
  auto it = r.failures.find(process);
  if (it != r.failures.end() && it->second.incarnation != incarnation) r.failures.erase(it);
}

absl::Status reported_process_failure(const std::vector<int>& processes) {
  Recorded& r = recorded();
  MutexLock lock(&r.mu);
  for (int p : processes) {
    auto it = r.failures.find(p);
    if (it != r.failures.end()) return it->second.why;
  }
  return absl::OkStatus();
}

void record_live_set(const LiveSet& live) {
  for (size_t i = 0; i < live.processes.size(); ++i) record_process_alive(live.processes[i], live.incarnations[i]);
  Recorded& r = recorded();
  MutexLock lock(&r.mu);
  LiveSet& slot = r.by_requested[live.requested];
  if (slot.generation < live.generation) {
    slot = live;
    g_changes.fetch_add(1, std::memory_order_release);
  }
}

uint64_t live_set_changes() { return g_changes.load(std::memory_order_acquire); }

std::optional<LiveSet> live_set_for(const std::vector<int>& processes) {
  Recorded& r = recorded();
  MutexLock lock(&r.mu);
  const LiveSet* best = nullptr;
  for (const auto& [requested, live] : r.by_requested) {
    if (!std::includes(requested.begin(), requested.end(), processes.begin(), processes.end())) continue;
    if (best == nullptr || live.generation > best->generation) best = &live;
  }
  if (best == nullptr) return std::nullopt;
  return *best;
}

bool excludes_any(const std::vector<int>& processes) {
  const std::optional<LiveSet> live = live_set_for(processes);
  return live && std::any_of(processes.begin(), processes.end(), [&](int p) { return live->excludes(p); });
}

}  // namespace mcx
