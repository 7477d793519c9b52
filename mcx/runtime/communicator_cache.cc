#include "mcx/runtime/communicator_cache.h"

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mcx/core/local_communicator.h"

namespace mcx {

absl::StatusOr<Communicator*> local_communicator(std::span<const Device> group, const Device& member) {
  static std::mutex* mu = new std::mutex();
  static auto* groups = new std::map<std::vector<int>, std::unique_ptr<LocalGroup>>();  // never destroyed
  std::vector<int> key;
  std::vector<std::string> names;
  int rank = -1;
  for (const Device& d : group) {
    if (!d.is_addressable()) {
      return absl::UnimplementedError(absl::StrCat(
          "[collective] device ", d.to_string(), " of process ", d.process_index,
          " is in the group; collectives across processes need the multi-process communicator"));
    }
    if (d == member) rank = static_cast<int>(key.size());
    key.push_back(d.global_id);
    names.push_back(d.to_string());
  }
  if (rank < 0) {
    return absl::InternalError(absl::StrCat("[collective] ", member.to_string(), " is not in its group"));
  }
  std::lock_guard<std::mutex> lock(*mu);
  auto& g = (*groups)[key];
  if (!g) g = std::make_unique<LocalGroup>(static_cast<int>(key.size()), std::move(names));
  return &g->member(rank);
}

}  // namespace mcx
