#include "mcx/data/shard_plan.h"

#include <algorithm>
#include <map>
#include <set>

namespace mcx::data {

ShardPlan make_shard_plan(const Sharding& sharding, const std::vector<int64_t>& dims) {
  ShardPlan plan;
  std::vector<RowRange> mine;
  for (const auto& [device, box] : sharding.addressable_devices_indices_map(dims)) mine.push_back({box.start[0], box.limit[0]});
  std::sort(mine.begin(), mine.end());
  mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
  for (const RowRange& r : mine) {  // merge overlapping or touching ranges
    if (!plan.local.empty() && r.start <= plan.local.back().limit) {
      plan.local.back().limit = std::max(plan.local.back().limit, r.limit);
    } else {
      plan.local.push_back(r);
    }
  }
  for (const RowRange& r : plan.local) plan.local_rows += r.limit - r.start;
  std::map<RowRange, std::set<int>> holders;
  for (const auto& [device, box] : sharding.devices_indices_map(dims)) {
    holders[{box.start[0], box.limit[0]}].insert(device.process_index);
  }
  for (const RowRange& r : mine) plan.replicas.push_back({r, std::vector<int>(holders[r].begin(), holders[r].end())});
  return plan;
}

}  // namespace mcx::data
