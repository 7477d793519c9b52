#include "mcx/checkpoint/save_sync.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "mcx/core/error.h"
#include "mcx/distributed/coordination/agent.h"
#include "mcx/distributed/distributed.h"
#include "mcx/collectives/kv_wait.h"
#include "mcx/runtime/device.h"

namespace mcx::checkpoint {
namespace {

// "ok:<value>" or "error:<code>:<message>".
std::string encode(const absl::StatusOr<std::string>& v) {
  if (v.ok()) return absl::StrCat("ok:", *v);
  return absl::StrCat("error:", static_cast<int>(v.status().code()), ":", v.status().message());
}

absl::StatusOr<std::string> decode(const std::string& s, int from) {
  if (s.rfind("ok:", 0) == 0) return s.substr(3);
  std::vector<std::string> parts = absl::StrSplit(s, absl::MaxSplits(':', 2));
  int code = static_cast<int>(absl::StatusCode::kInternal);
  if (parts.size() == 3 && parts[0] == "error" && absl::SimpleAtoi(parts[1], &code)) {
    return absl::Status(static_cast<absl::StatusCode>(code), absl::StrCat(parts[2], " (on process ", from, ")"));
  }
  return absl::InternalError(absl::StrCat("[checkpoint] unreadable outcome from process ", from, ": '", s, "'"));
}

}  // namespace

SaveSync::SaveSync(std::string prefix, absl::Duration timeout, const std::vector<int>& processes)
    : prefix_(std::move(prefix)), timeout_(timeout) {
  if (distributed::is_initialized() && mcx::process_count() > 1) {
    process_ = mcx::process_index();
    if (processes.empty()) {
      participants_.clear();
      for (int p = 0; p < mcx::process_count(); ++p) participants_.push_back(p);
    } else {
      participants_ = processes;
    }
    if (participants_.size() > 1) agent_ = distributed::agent();
  }
}

absl::StatusOr<std::string> SaveSync::share_from_leader(const std::string& name,
                                                        const absl::StatusOr<std::string>& value) {
  if (agent_ == nullptr) return value;
  const std::string key = absl::StrCat(prefix_, "/", name);
  if (is_leader()) {
    absl::Status s = agent_->kv_insert(key, encode(value));
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("[checkpoint] cannot publish '", name, "' to the other processes: ",
                                                 s.message()));
    }
    return value;
  }
  // A leader the coordination service declares dead ends the wait at once instead of at the timeout (the
  // barriers of all_ok fail at once by themselves).
  std::shared_ptr<JobKeyValue> kv = job_key_value();
  if (kv == nullptr) return absl::FailedPreconditionError("[checkpoint] the distributed runtime was shut down");
  absl::StatusOr<std::string> got = kv_get_while_writers_live(*kv, key, absl::Now() + timeout_, {leader()});
  if (failed_process(got.status()) == leader()) {
    return with_message(got.status(), absl::StrCat("[checkpoint] process ", leader(), ", the save's leader, failed "
                                                   "before sharing '", name, "': ", got.status().message()));
  }
  if (!got.ok()) {
    return absl::Status(got.status().code(),
                        absl::StrCat("[checkpoint] waited ", absl::FormatDuration(timeout_), " for process ",
                                     leader(), "'s '", name, "': ", got.status().message()));
  }
  return decode(*got, leader());
}

absl::Status SaveSync::all_ok(const std::string& name, const absl::Status& mine) {
  if (agent_ == nullptr) return mine;
  const std::string dir = absl::StrCat(prefix_, "/", name);
  absl::StatusOr<std::string> mine_or = mine.ok() ? absl::StatusOr<std::string>("") : mine;
  absl::Status s = agent_->kv_insert(absl::StrCat(dir, "/", process_), encode(mine_or));
  if (!s.ok()) return s;
  s = agent_->barrier(dir, timeout_, std::vector<distributed::TaskId>(participants_.begin(), participants_.end()));
  if (!s.ok()) {
    const std::string when = s.code() == absl::StatusCode::kDeadlineExceeded
                                 ? absl::StrCat(" within ", absl::FormatDuration(timeout_))
                                 : std::string();
    return with_message(s, absl::StrCat("[checkpoint] not every process reached '", name, "'", when, ": ", s.message()));
  }
  for (int p : participants_) {
    absl::StatusOr<std::string> v = agent_->kv_get(absl::StrCat(dir, "/", p), timeout_);
    if (!v.ok()) return v.status();
    absl::StatusOr<std::string> outcome = decode(*v, p);
    if (!outcome.ok()) return outcome.status();
  }
  return absl::OkStatus();
}

void SaveSync::forget(const std::string& prefix, const std::vector<std::string>& names,
                      const std::vector<std::string>& leader_names) {
  if (agent_ == nullptr) return;
  for (const std::string& name : names) (void)agent_->kv_delete(absl::StrCat(prefix, "/", name, "/", process_));
  if (!is_leader()) return;
  for (const std::string& name : leader_names) (void)agent_->kv_delete(absl::StrCat(prefix, "/", name));
}

}  // namespace mcx::checkpoint
