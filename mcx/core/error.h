// Errors of the public API and the bridge from absl::Status.
//
// Internally, fallible code returns absl::Status / absl::StatusOr<T>. The public API throws mcx::Error
// (one subclass per status code) through throw_if_error()/value_or_throw(). Messages start with the API
// name in brackets and state what was expected and what was found, e.g.
//   [dot_general] contracting dimensions differ: lhs f32[b,128] dim 1 is 128, rhs f32[64,10] dim 0 is 64
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace mcx {

// The message a public error carries: `message` with a leading "[x] " that repeats the prefix before it
// dropped ("[a] [a] m" -> "[a] m"; "[a] [b] m" is kept: b is the layer under a).
std::string public_message(std::string_view message);

// Base of every exception mcx throws. code() is the absl status code it was made from. The message is
// public_message(message), so no public error starts with the same bracketed API twice, however it was built.
class Error : public std::runtime_error {
 public:
  Error(absl::StatusCode code, const std::string& message) : std::runtime_error(public_message(message)), code_(code) {}
  absl::StatusCode code() const { return code_; }
  absl::Status status() const { return absl::Status(code_, what()); }

 private:
  absl::StatusCode code_;
};

#define MCX_DEFINE_ERROR(Name, Code) \
  class Name : public Error {        \
   public:                           \
    explicit Name(const std::string& message) : Error(absl::StatusCode::Code, message) {} \
  };
MCX_DEFINE_ERROR(InvalidArgument, kInvalidArgument)
MCX_DEFINE_ERROR(NotFound, kNotFound)
MCX_DEFINE_ERROR(AlreadyExists, kAlreadyExists)
MCX_DEFINE_ERROR(DeadlineExceeded, kDeadlineExceeded)
MCX_DEFINE_ERROR(FailedPrecondition, kFailedPrecondition)
MCX_DEFINE_ERROR(OutOfRange, kOutOfRange)
MCX_DEFINE_ERROR(Unimplemented, kUnimplemented)
MCX_DEFINE_ERROR(Internal, kInternal)
MCX_DEFINE_ERROR(Unavailable, kUnavailable)
MCX_DEFINE_ERROR(Cancelled, kCancelled)
MCX_DEFINE_ERROR(Aborted, kAborted)
MCX_DEFINE_ERROR(PermissionDenied, kPermissionDenied)
MCX_DEFINE_ERROR(Unauthenticated, kUnauthenticated)
MCX_DEFINE_ERROR(ResourceExhausted, kResourceExhausted)
MCX_DEFINE_ERROR(DataLoss, kDataLoss)
#undef MCX_DEFINE_ERROR

// A process of a multi-process job failed (died, stopped heartbeating, reported an error) and an operation
// that needed it failed. Thrown (by throw_if_error) for every status marked with mark_process_failure,
// whatever its code (usually kUnavailable or kAborted); a distinct type so that programs can catch process
// failures specifically and carry on with the survivors.
class ProcessFailure : public Error {
 public:
  // failed_device_ids is filled from the process's devices (the resolver the runtime installs) when the process
  // is known.
  ProcessFailure(absl::StatusCode code, const std::string& message, int process = -1);
  // The job-wide index of the failed process; -1 when unknown.
  int process() const { return process_; }
  // The global ids of the failed process's devices (JAX's failed_devices; mcx::failed_devices(e) in
  // runtime/device.h gives the Device objects), ascending; empty when the process or its devices are unknown.
  const std::vector<int>& failed_device_ids() const { return failed_device_ids_; }

 private:
  int process_;
  std::vector<int> failed_device_ids_;
};

// Installs how ProcessFailure finds a process's devices (the runtime does, with the job's topology; core knows no
// devices). Thread-safe; the resolver must be.
void set_process_devices_resolver(std::function<std::vector<int>(int process)> resolver);

// Marks `status` as caused by the failure of process `process` (a payload, so the mark survives copies and
// with_message). OK stays OK.
absl::Status mark_process_failure(absl::Status status, int process);

// The process a status is marked with, or -1.
int failed_process(const absl::Status& status);

// `status` with the payloads of `from` added (e.g. an "unusable after an earlier error" status keeps the earlier
// error's process-failure mark).
absl::Status with_payloads_of(absl::Status status, const absl::Status& from);

// `status` with a new message, keeping its code and payloads (use it instead of absl::Status(code, msg) when
// adding context to an error that came from elsewhere).
absl::Status with_message(const absl::Status& status, absl::string_view message);

// `status` with its message prefixed by "[api] ", unless it already starts with that prefix (an error from a
// lower layer of the same API), keeping code and payloads. OK stays OK.
absl::Status with_api_prefix(const absl::Status& status, std::string_view api);

// Throws the Error subclass matching status.code(); does nothing for OK.
void throw_if_error(const absl::Status& status);

// Returns the value or throws the matching Error.
template <typename T>
T value_or_throw(absl::StatusOr<T> v) {
  if (!v.ok()) throw_if_error(v.status());
  return *std::move(v);
}

// Converts a caught exception (mcx::Error or anything else) back to a Status; used at the boundaries
// where user callbacks or third-party libraries may throw.
absl::Status status_from_exception(const std::exception& e);

}  // namespace mcx

// Early-return helpers for absl::Status code.
#define MCX_RETURN_IF_ERROR(expr)                  \
  do {                                             \
    ::absl::Status mcx_status_ = (expr);           \
    if (!mcx_status_.ok()) return mcx_status_;     \
  } while (0)

#define MCX_CONCAT_INNER_(a, b) a##b
#define MCX_CONCAT_(a, b) MCX_CONCAT_INNER_(a, b)
#define MCX_ASSIGN_OR_RETURN(lhs, expr) MCX_ASSIGN_OR_RETURN_IMPL_(MCX_CONCAT_(mcx_sor_, __LINE__), lhs, expr)
#define MCX_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
