// Who is calling the coordination service, and what each caller may do with the key-value store.
//
// With mTLS and task identity binding on (mtls.h), the gRPC edge derives a Principal from the client
// certificate's URI SANs (under MtlsOptions::peer_uri_prefix when one is set): a SAN whose last two path
// segments are "task/<id>", "operator/<name>" or "admin/<name>" gives that role; a certificate with none of
// them has Role::kNone and may call nothing. Without binding there is no Principal: every caller is
// Caller::trusted() (caller.h) and nothing below applies.
//
// Key rules (docs/security.md, "Authorization"):
//   - task_key(<id>, ...) ("mcx/task/<id>/...", core/job_key_value.h) belongs to task <id>: only it may insert,
//     overwrite, increment or delete there, except task_key(<id>, "inbox/..."), which any task may write (to
//     wake <id>) and only <id> may delete;
//   - every other key is job-wide: any task may insert it (and becomes its owner) and increment it (counters
//     are shared by design); only its owner may overwrite or delete it;
//   - an admin may delete any key and write none; an operator writes and deletes nothing;
//   - keys under "mcx/secret/" (job_secret.h) are written by the service only, and only tasks may read them;
//   - every other read (get, dir) is open to every role.
// A refusal is PERMISSION_DENIED "[authz] <caller> may not <action> '<key>': <rule>".
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace mcx::distributed {

enum class Role { kNone, kTask, kOperator, kAdmin };
std::string_view role_name(Role role);

struct Principal {
  Role role = Role::kNone;
  int32_t task = -1;              // kTask: the task's id (coordination/types.h: TaskId)
  std::string name;               // kOperator / kAdmin
  std::vector<std::string> uris;  // the certificate's URI SANs, for messages

  // "task/3", "operator/alice", "admin/bob", or "a certificate with no role (URI SANs: ...)".
  std::string to_string() const;
};

// The role named by the first URI SAN (in order) under `prefix` (empty: any) that ends in task/<decimal id>
// (task_id_from_uri, mtls.h), operator/<name> or admin/<name>.
Principal principal_from_uri_sans(const std::vector<std::string>& uris, std::string_view prefix);

// The task whose prefix (core/job_key_value.h: task_key) holds key, if any.
std::optional<int32_t> key_task_prefix(std::string_view key);

enum class KeyAction { kInsert, kOverwrite, kIncrement, kDelete };

// Whether `who` may apply `action` to `key`, whose current owner is `owner` (nullopt: the key does not exist
// or was written by a trusted in-process caller).
absl::Status authorize_key(const Principal& who, KeyAction action, std::string_view key,
                           std::optional<int32_t> owner);

// Whether `who` may read `key` (get, or an entry of a dir listing): PERMISSION_DENIED for a secret key read by
// anything but a task.
absl::Status authorize_read(const Principal& who, std::string_view key);

}  // namespace mcx::distributed
