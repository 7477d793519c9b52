#include "mcx/data/verify.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "mcx/core/config.h"
#include "mcx/distributed/distributed.h"
#include "mcx/runtime/device.h"

namespace mcx::data {
namespace {

const Flag<bool> kVerify("MCX_DATA_VERIFY", false,
                         "compare a digest of each batch across the processes that hold the same rows (mcx/data)");

std::string key(const std::string& loader, int64_t epoch, int64_t position, const RowRange& rows, int process) {
  return absl::StrCat("mcx/data/verify/", loader, "/", epoch, ".", position, "/", rows.start, "-", rows.limit, "/", process);
}

}  // namespace

bool verify_enabled() { return kVerify.value(); }

absl::Status verify_replicas(const std::string& loader, int64_t epoch, int64_t position, const RowRange& rows,
                             const std::vector<int>& holders, const Sha256Digest& digest, absl::Time deadline) {
  distributed::CoordinationAgent* agent = distributed::agent();
  if (holders.size() < 2 || agent == nullptr) return absl::OkStatus();
  const int me = process_index();
  const std::string mine(reinterpret_cast<const char*>(digest.data()), digest.size());
  if (absl::Status s = agent->kv_insert(key(loader, epoch, position, rows, me), mine, /*allow_overwrite=*/true); !s.ok()) {
    return s;
  }
  const std::string where = absl::StrCat("[data] MCX_DATA_VERIFY: loader '", loader, "' epoch ", epoch, " position ",
                                         position, " rows [", rows.start, ", ", rows.limit, ")");
  for (int p : holders) {
    if (p == me) continue;
    absl::StatusOr<std::string> theirs = agent->kv_get(key(loader, epoch, position, rows, p),
                                                       std::max(deadline - absl::Now(), absl::ZeroDuration()));
    if (!theirs.ok()) {
      return absl::DeadlineExceededError(absl::StrCat(where, ": no digest from process ", p, " (", theirs.status().message(), ")"));
    }
    if (*theirs != mine) {
      const int lo = std::min(me, p), hi = std::max(me, p);
      const std::string a = absl::BytesToHexString(me == lo ? mine : *theirs).substr(0, 12);
      const std::string b = absl::BytesToHexString(me == lo ? *theirs : mine).substr(0, 12);
      return absl::DataLossError(absl::StrCat(where, ": processes ", lo, " and ", hi, " loaded different data (digest ", a,
                                              ".. vs ", b, "..)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace mcx::data
