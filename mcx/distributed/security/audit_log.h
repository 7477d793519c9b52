// The coordination service's audit log: one JSON object per line, appended to a file and flushed per record,
// e.g.
//   {"time":"2026-12-02T21:14:03.512Z","event":"denied","identity":"task/2","rpc":"KvInsert",
//    "detail":"[authz] task/2 may not overwrite 'mcx/task/1/topology': ..."}
// Events (docs/security.md, "Audit log"): "denied" (every call refused by authorization), "admin" (every
// call made with an admin certificate), "register" (every registration or rejoin, with its outcome),
// "error_report" (a task reporting an error), "task_state" (a task's state changing, e.g. to ERROR after a
// missed heartbeat). Strings are escaped as JSON; identities are Principal::to_string().
//
// Errors: open() is Internal naming the file when it cannot be opened for appending. A failed write is
// counted (write_failures()) and never blocks or fails the call being logged.
// Thread-safety: record() may be called from any thread.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "mcx/core/mutex.h"

namespace mcx::distributed {

class AuditLog {
 public:
  static absl::StatusOr<std::shared_ptr<AuditLog>> open(const std::string& path);
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  void record(std::string_view event, std::string_view identity, std::string_view rpc, std::string_view detail);
  int64_t write_failures() const;

 private:
  explicit AuditLog(std::FILE* f) : file_(f) {}
  mutable Mutex mu_;
  std::FILE* file_ ABSL_GUARDED_BY(mu_);
  int64_t failures_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mcx::distributed
