#include "mcx/core/error.h"

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "mcx/core/mutex.h"

namespace mcx {

namespace {

constexpr char kProcessFailureUrl[] = "type.mcx/process_failure";

}  // namespace

absl::Status mark_process_failure(absl::Status status, int process) {
  if (!status.ok()) status.SetPayload(kProcessFailureUrl, absl::Cord(std::to_string(process)));
  return status;
}

int failed_process(const absl::Status& status) {
  auto p = status.GetPayload(kProcessFailureUrl);  // absl::optional (not std:: in Debian's absl)
  if (!p) return -1;
  int process = -1;
  return absl::SimpleAtoi(std::string(*p), &process) ? process : -1;
}

absl::Status with_payloads_of(absl::Status status, const absl::Status& from) {
  if (status.ok()) return status;
  from.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) { status.SetPayload(url, payload); });
  return status;
}

absl::Status with_message(const absl::Status& status, absl::string_view message) {
  absl::Status out(status.code(), std::string(message));
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

absl::Status with_api_prefix(const absl::Status& status, std::string_view api) {
  if (status.ok()) return status;
  const std::string prefix = absl::StrCat("[", std::string(api), "]");
  const absl::string_view message = status.message();
  if (absl::StartsWith(message, prefix)) return status;
  return with_message(status, absl::StrCat(prefix, " ", message));
}

std::string public_message(std::string_view message) {
  std::string out(message);
  for (;;) {
    if (out.empty() || out[0] != '[') return out;
    const size_t close = out.find(']');
    if (close == std::string::npos) return out;
    const std::string_view first(out.data(), close + 1);
    const size_t rest = out.find_first_not_of(' ', close + 1);
    if (rest == std::string::npos || out.compare(rest, first.size(), first) != 0) return out;
    out.erase(0, rest);  // "[a] [a] m" -> "[a] m"
  }
}

namespace {

struct Resolver {
  Mutex mu;
  std::function<std::vector<int>(int)> fn ABSL_GUARDED_BY(mu);
};
Resolver& resolver() {
  static Resolver* r = new Resolver();  // never destroyed: errors may be thrown during exit
  return *r;
}

}  // namespace

void set_process_devices_resolver(std::function<std::vector<int>(int process)> fn) {
  Resolver& r = resolver();
  MutexLock lock(&r.mu);
  r.fn = std::move(fn);
}

ProcessFailure::ProcessFailure(absl::StatusCode code, const std::string& message, int process)
    : Error(code, message), process_(process) {
  if (process < 0) return;
  std::function<std::vector<int>(int)> fn;
  {
    Resolver& r = resolver();
    MutexLock lock(&r.mu);
    fn = r.fn;
  }
  if (fn) failed_device_ids_ = fn(process);
}

void throw_if_error(const absl::Status& status) {
  if (status.ok()) return;
  const std::string msg(status.message());  // (Error's constructor drops a repeated prefix)
  if (status.GetPayload(kProcessFailureUrl)) {
    throw ProcessFailure(status.code(), msg, failed_process(status));
  }
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument: throw InvalidArgument(msg);
    case absl::StatusCode::kNotFound: throw NotFound(msg);
    case absl::StatusCode::kAlreadyExists: throw AlreadyExists(msg);
    case absl::StatusCode::kDeadlineExceeded: throw DeadlineExceeded(msg);
    case absl::StatusCode::kFailedPrecondition: throw FailedPrecondition(msg);
    case absl::StatusCode::kOutOfRange: throw OutOfRange(msg);
    case absl::StatusCode::kUnimplemented: throw Unimplemented(msg);
    case absl::StatusCode::kUnavailable: throw Unavailable(msg);
    case absl::StatusCode::kCancelled: throw Cancelled(msg);
    case absl::StatusCode::kAborted: throw Aborted(msg);
    case absl::StatusCode::kPermissionDenied: throw PermissionDenied(msg);
    case absl::StatusCode::kUnauthenticated: throw Unauthenticated(msg);
    case absl::StatusCode::kResourceExhausted: throw ResourceExhausted(msg);
    case absl::StatusCode::kDataLoss: throw DataLoss(msg);
    default: throw Internal(msg);
  }
}

absl::Status status_from_exception(const std::exception& e) {
  if (auto* pf = dynamic_cast<const ProcessFailure*>(&e)) return mark_process_failure(pf->status(), pf->process());
  if (auto* err = dynamic_cast<const Error*>(&e)) return err->status();
  return absl::InternalError(absl::StrCat("unexpected exception: ", e.what()));
}

}  // namespace mcx
