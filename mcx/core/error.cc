#include "mcx/core/error.h"

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"

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

void throw_if_error(const absl::Status& status) {
  if (status.ok()) return;
  const std::string msg(status.message());
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
