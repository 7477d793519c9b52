#include "mcx/core/error.h"

namespace mcx {

void throw_if_error(const absl::Status& status) {
  if (status.ok()) return;
  const std::string msg(status.message());
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
  if (auto* err = dynamic_cast<const Error*>(&e)) return err->status();
  return absl::InternalError(absl::StrCat("unexpected exception: ", e.what()));
}

}  // namespace mcx
