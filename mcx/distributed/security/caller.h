// Caller: who makes a call that the coordination service authorizes (the key-value writes, cancel_barrier,
// end_job; the reads are filtered by the transports with authorize_read, principal.h).
//
// Either the identity a transport bound to the call (a Principal derived from the client certificate under
// identity binding, principal.h), checked with authorize_key against the key's owner; or trusted: code of the
// service's own process, or any caller of a transport that binds no identity (without mTLS identity binding every
// caller is trusted: docs/security.md). Every authorized call takes a Caller and none has a default, so a new call
// site states which one it is: trust is never implied by a forgotten argument.
//
// Thread-safety: a plain value.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "mcx/distributed/security/principal.h"

namespace mcx::distributed {

class Caller {
 public:
  // Trusted code: not checked, owns nothing it writes.
  static Caller trusted() { return Caller(std::nullopt); }
  // The identity a transport bound to the call (implicit: a Principal is a caller).
  Caller(Principal who) : who_(std::move(who)) {}  // NOLINT(google-explicit-constructor)

  // The bound identity; nullptr for a trusted caller.
  const Principal* principal() const { return who_ ? &*who_ : nullptr; }
  // "trusted", or the principal ("task/3", "admin/bob", ...).
  std::string to_string() const { return who_ ? who_->to_string() : "trusted"; }

 private:
  explicit Caller(std::optional<Principal> who) : who_(std::move(who)) {}
  std::optional<Principal> who_;
};

}  // namespace mcx::distributed
