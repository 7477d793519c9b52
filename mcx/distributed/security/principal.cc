#include "mcx/distributed/security/principal.h"

#include "mcx/core/job_key_value.h"
#include "mcx/distributed/security/job_secret.h"


#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/distributed/security/mtls.h"

namespace mcx::distributed {
namespace {

std::string_view action_name(KeyAction a) {
  switch (a) {
    case KeyAction::kInsert: return "insert";
    case KeyAction::kOverwrite: return "overwrite";
    case KeyAction::kIncrement: return "increment";
    case KeyAction::kDelete: return "delete";
  }
  return "?";
}

}  // namespace

std::string_view role_name(Role role) {
  switch (role) {
    case Role::kNone: return "none";
    case Role::kTask: return "task";
    case Role::kOperator: return "operator";
    case Role::kAdmin: return "admin";
  }
  return "?";
}

std::string Principal::to_string() const {
  switch (role) {
    case Role::kTask: return absl::StrCat("task/", task);
    case Role::kOperator:
    case Role::kAdmin: return absl::StrCat(std::string(role_name(role)), "/", name);
    case Role::kNone: break;
  }
  return absl::StrCat("a certificate with no role (URI SANs: ", uris.empty() ? "none" : absl::StrJoin(uris, ", "),
                      ")");
}

Principal principal_from_uri_sans(const std::vector<std::string>& uris, std::string_view prefix) {
  Principal p;
  p.uris = uris;
  for (const std::string& uri : uris) {
    if (!std::string_view(uri).starts_with(prefix)) continue;
    if (std::optional<int> id = task_id_from_uri(uri)) {
      p.role = Role::kTask;
      p.task = *id;
      return p;
    }
    for (const Role role : {Role::kOperator, Role::kAdmin}) {
      const std::string marker = absl::StrCat("/", std::string(role_name(role)), "/");
      const size_t at = uri.rfind(marker);
      if (at == std::string::npos) continue;
      const std::string_view name = std::string_view(uri).substr(at + marker.size());
      if (name.empty() || name.find('/') != std::string_view::npos) continue;
      p.role = role;
      p.name = std::string(name);
      return p;
    }
  }
  return p;
}

std::optional<int32_t> key_task_prefix(std::string_view key) { return task_of_key(key); }

absl::Status authorize_key(const Principal& who, KeyAction action, std::string_view key,
                           std::optional<int32_t> owner) {
  auto deny = [&](std::string_view rule) {
    return absl::PermissionDeniedError(absl::StrCat("[authz] ", who.to_string(), " may not ",
                                                    std::string(action_name(action)), " '", std::string(key), "': ",
                                                    std::string(rule)));
  };
  if (is_secret_key(key)) return deny("the job's secrets are written by the coordination service only");
  if (is_service_key(key)) return deny("the service's own keys are written by the coordination service only");
  if (who.role == Role::kAdmin) {
    if (action == KeyAction::kDelete) return absl::OkStatus();
    return deny("an admin may delete keys but not write them");
  }
  if (who.role != Role::kTask) return deny("only tasks write keys (an operator reads only)");
  if (std::optional<int32_t> holder = key_task_prefix(key)) {
    const bool inbox = key.starts_with(task_key(*holder, "inbox/"));
    if (*holder == who.task) return absl::OkStatus();
    if (inbox && action != KeyAction::kDelete) return absl::OkStatus();
    return deny(absl::StrCat("keys under '", task_key(*holder, ""), "' belong to task ", *holder,
                             inbox ? " (others may only write its inbox)" : ""));
  }
  switch (action) {
    case KeyAction::kInsert:
    case KeyAction::kIncrement: return absl::OkStatus();
    case KeyAction::kOverwrite:
    case KeyAction::kDelete:
      if (!owner.has_value() || *owner == who.task) return absl::OkStatus();
      return deny(absl::StrCat("a job-wide key may be overwritten or deleted only by the task that wrote it first (task ",
                               *owner, ")"));
  }
  return absl::OkStatus();
}

absl::Status authorize_read(const Principal& who, std::string_view key) {
  if (!is_secret_key(key) || who.role == Role::kTask) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("[authz] ", who.to_string(), " may not read '", std::string(key),
                                                  "': the job's secrets are readable by its tasks only"));
}

}  // namespace mcx::distributed
