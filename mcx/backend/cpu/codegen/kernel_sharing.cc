#include "mcx/backend/cpu/codegen/kernel_sharing.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mcx/core/config.h"
#include "mcx/core/hash.h"
#include "mcx/core/job_key_value.h"
#include "mcx/core/logging.h"

namespace mcx::cpu::codegen {
namespace {

const Flag<bool> kShareFlag("MCX_SHARE_COMPILED", false,
                            "in a multi-process job, the first process that needs a generated kernel compiles "
                            "it and the others link its object code (coordination service) instead of compiling");
const Flag<double> kShareTimeoutFlag(
    "MCX_SHARE_COMPILED_TIMEOUT_S", 30.0,
    "seconds a process waits for another process's shared kernel before compiling it itself",
    [](const double& v) -> std::optional<std::string> {
      if (v >= 0 && v <= 3600) return std::nullopt;
      return "is out of range: expected seconds in [0, 3600]";
    });

constexpr size_t kMaxSharedObjectBytes = size_t{4} << 20;

std::string digest_of(const KernelKey& key) {
  return to_hex(sha256(absl::StrCat(key.signature, "\n", key.target))).substr(0, 32);
}

std::string owner_key(const std::string& digest) { return absl::StrCat("mcx/compiled_kernels/", digest, "/owner"); }
std::string object_key(int process, const std::string& digest) {
  return task_key(process, absl::StrCat("compiled_kernels/", digest));
}

}  // namespace

std::string shared_kernel_owner_key(const KernelKey& key) { return owner_key(digest_of(key)); }

bool sharing_enabled() {
  absl::StatusOr<bool> on = kShareFlag.get();
  if (!on.ok() || !*on) return false;
  std::shared_ptr<JobKeyValue> kv = job_key_value();
  return kv != nullptr && kv->process_count() > 1;
}

ShareOutcome share_or_claim(const KernelKey& key) {
  ShareOutcome out;
  std::shared_ptr<JobKeyValue> kv = job_key_value();
  if (kv == nullptr) return out;
  const std::string digest = digest_of(key);
  const std::string me = std::to_string(kv->process_index());
  absl::StatusOr<bool> claimed = kv->insert(owner_key(digest), me, /*allow_overwrite=*/false);
  if (!claimed.ok()) {
    out.why = absl::StrCat("claiming it failed: ", claimed.status().message());
    return out;
  }
  if (*claimed) {
    out.kind = ShareOutcome::kOwner;
    return out;
  }
  const double timeout_s = kShareTimeoutFlag.get().value_or(30.0);
  const absl::Time deadline = absl::Now() + absl::Seconds(timeout_s);
  absl::StatusOr<std::string> owner = kv->get(owner_key(digest), absl::Seconds(timeout_s));
  int owner_index = -1;
  if (!owner.ok() || !absl::SimpleAtoi(*owner, &owner_index)) {
    out.why = absl::StrCat("its claim is unreadable: ", owner.ok() ? *owner : std::string(owner.status().message()));
    return out;
  }
  if (owner_index == kv->process_index()) {  // claimed by an earlier incarnation of this process
    out.kind = ShareOutcome::kOwner;
    return out;
  }
  absl::StatusOr<std::string> object =
      kv->get(object_key(owner_index, digest), std::max(absl::ZeroDuration(), deadline - absl::Now()));
  if (!object.ok()) {
    out.why = absl::StrCat("process ", owner_index, " claimed it but its object did not arrive within ", timeout_s,
                           " s (MCX_SHARE_COMPILED_TIMEOUT_S): ", object.status().message());
    return out;
  }
  if (object->empty()) {
    out.why = absl::StrCat("process ", owner_index, " could not share it");
    return out;
  }
  out.kind = ShareOutcome::kFromPeer;
  out.object = *std::move(object);
  return out;
}

void publish_shared(const KernelKey& key, std::string_view object) {
  std::shared_ptr<JobKeyValue> kv = job_key_value();
  if (kv == nullptr) return;
  if (object.size() > kMaxSharedObjectBytes) object = std::string_view();
  absl::Status s = kv->insert(object_key(kv->process_index(), digest_of(key)), object, /*allow_overwrite=*/true).status();
  if (!s.ok()) log_warn("[codegen] could not share a kernel with the job: {}", std::string(s.message()));
}

}  // namespace mcx::cpu::codegen
