#include "mcx/distributed/security/audit_log.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mcx/core/json_text.h"

namespace mcx::distributed {

absl::StatusOr<std::shared_ptr<AuditLog>> AuditLog::open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    return absl::InternalError(
        absl::StrCat("[audit] cannot open the audit log '", path, "' for appending: ", std::strerror(errno)));
  }
  return std::shared_ptr<AuditLog>(new AuditLog(f));
}

AuditLog::~AuditLog() {
  MutexLock lock(&mu_);
  std::fclose(file_);
}

void AuditLog::record(std::string_view event, std::string_view identity, std::string_view rpc,
                      std::string_view detail) {
  const std::string line = absl::StrCat(
      "{\"time\":", json_string(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone())),
      ",\"event\":", json_string(event), ",\"identity\":", json_string(identity), ",\"rpc\":", json_string(rpc),
      ",\"detail\":", json_string(detail), "}\n");
  MutexLock lock(&mu_);
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) ++failures_;
}

int64_t AuditLog::write_failures() const {
  MutexLock lock(&mu_);
  return failures_;
}

}  // namespace mcx::distributed
