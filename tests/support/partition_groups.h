// The communicators of partitions run on threads of one test process: one LocalGroup per distinct group of
// partition ids, made on first use, as the runtime's communicator cache does. A test's ExecutionContext asks it
// for partition p's member: ctx.communicator = [&groups, p](auto g) { return groups.member(g, p); }.
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/collectives/local_communicator.h"

namespace mcx::test {

class PartitionGroups {
 public:
  // Partition `partition`'s communicator in `group` (partition ids in group order); InvalidArgument when the
  // partition is not in the group.
  absl::StatusOr<Communicator*> member(std::span<const int64_t> group, int partition) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<int64_t> key(group.begin(), group.end());
    auto it = groups_.find(key);
    if (it == groups_.end()) {
      std::vector<std::string> names;
      for (int64_t p : key) names.push_back("p" + std::to_string(p));
      it = groups_.emplace(key, std::make_unique<LocalGroup>(static_cast<int>(key.size()), names)).first;
    }
    for (size_t r = 0; r < key.size(); ++r) {
      if (key[r] == partition) return &it->second->member(static_cast<int>(r));
    }
    return absl::InvalidArgumentError("partition not in its group");
  }
  // How many distinct groups were made.
  size_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return groups_.size();
  }

 private:
  std::mutex mu_;
  std::map<std::vector<int64_t>, std::unique_ptr<LocalGroup>> groups_;
};

}  // namespace mcx::test
