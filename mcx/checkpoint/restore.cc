#include "mcx/checkpoint/restore.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/checkpoint/files.h"
#include "mcx/checkpoint/parallel.h"
#include "mcx/checkpoint/shard_io.h"
#include "mcx/core/error.h"
#include "mcx/core/hash.h"
#include "mcx/core/profiler.h"
#include "mcx/trace/placement.h"

namespace mcx::checkpoint {
namespace {

std::string dims_string(const std::vector<int64_t>& dims) { return "[" + absl::StrJoin(dims, ",") + "]"; }

// The first leaf path where two structures differ, for the error message.
std::string first_difference(const TreeDef& expected, const TreeDef& found) {
  const std::vector<std::string> a = leaf_paths(expected), b = leaf_paths(found);
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] != b[i]) return absl::StrCat("leaf ", i, " is '", a[i], "' in the target and '", b[i], "' in the checkpoint");
  }
  if (a.size() != b.size()) return absl::StrCat("the target has ", a.size(), " leaves, the checkpoint ", b.size());
  return "the node kinds differ";
}

}  // namespace

absl::StatusOr<Manifest> load_manifest(const std::string& root, int64_t step) {
  const std::string dir = root + "/" + step_dir_name(step);
  const std::string marker = dir + "/" + std::string(kCommitFile);
  absl::StatusOr<std::string> commit = read_file(marker);
  if (!commit.ok()) {
    if (!absl::IsNotFound(commit.status())) return commit.status();
    MCX_ASSIGN_OR_RETURN(std::vector<int64_t> steps, committed_steps(root));
    return absl::NotFoundError(absl::StrCat("[checkpoint] step ", step, " is not a committed checkpoint in '", root,
                                            "' (committed steps: [", absl::StrJoin(steps, ", "), "])"));
  }
  MCX_ASSIGN_OR_RETURN(std::string expected_sha, manifest_sha_from_commit(*commit, marker));
  const std::string manifest_path = dir + "/" + std::string(kManifestFile);
  absl::StatusOr<std::string> text = read_file(manifest_path);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) {
      return absl::DataLossError(absl::StrCat("[checkpoint] '", manifest_path, "' is missing (step ", step,
                                              " has a commit marker)"));
    }
    return text.status();
  }
  const std::string found_sha = to_hex(sha256(*text));
  if (found_sha != expected_sha) {
    return absl::DataLossError(absl::StrCat("[checkpoint] '", manifest_path,
                                            "' was modified after the commit: SHA-256 expected ", expected_sha,
                                            " (COMMIT), found ", found_sha));
  }
  MCX_ASSIGN_OR_RETURN(Manifest m, manifest_from_json(*text, manifest_path));
  if (m.step != step) {
    return absl::DataLossError(absl::StrCat("[checkpoint] '", manifest_path, "': expected step ", step, ", found ",
                                            m.step));
  }
  return m;
}

absl::StatusOr<std::vector<Array>> restore_arrays(const std::string& root, int64_t step, const TreeDef& def,
                                                  std::span<const LeafTarget> targets, int threads) {
  profiler::Scope traced("checkpoint", "restore step ", std::to_string(step));
  MCX_ASSIGN_OR_RETURN(Manifest m, load_manifest(root, step));
  const std::string dir = root + "/" + step_dir_name(step);
  const std::string manifest_path = dir + "/" + std::string(kManifestFile);
  if (def != m.tree) {
    return absl::InvalidArgumentError(absl::StrCat("[checkpoint] step ", step, " ('", manifest_path,
                                                   "'): tree structure expected ", def.to_string(),
                                                   " (target), found ", m.tree.to_string(), " (checkpoint): ",
                                                   first_difference(def, m.tree)));
  }
  if (targets.size() != m.leaves.size()) {
    return absl::InvalidArgumentError(absl::StrCat("[checkpoint] expected one target per leaf (", m.leaves.size(),
                                                   "), found ", targets.size()));
  }
  auto who = [&](const LeafRecord& leaf) {
    return absl::StrCat("[checkpoint] leaf '", leaf.path, "' ('", manifest_path, "')");
  };
  // Per leaf, one host buffer per distinct addressable box; every (box, stored shard) intersection is one read.
  struct Read {
    size_t leaf, box, shard;
    IndexBox region;
  };
  std::vector<std::vector<std::pair<IndexBox, Buffer>>> boxes(targets.size());
  std::vector<Read> reads;
  for (size_t i = 0; i < targets.size(); ++i) {
    const LeafRecord& leaf = m.leaves[i];
    const LeafTarget& t = targets[i];
    if (t.dtype != leaf.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(who(leaf), ": dtype expected ", std::string(dtype_name(t.dtype)),
                                                     " (target), found ", std::string(dtype_name(leaf.dtype)),
                                                     " (checkpoint)"));
    }
    if (t.dims != leaf.dims) {
      return absl::InvalidArgumentError(absl::StrCat(who(leaf), ": global shape expected ", dims_string(t.dims),
                                                     " (target), found ", dims_string(leaf.dims), " (checkpoint)"));
    }
    MCX_RETURN_IF_ERROR(t.sharding.validate(t.dims, "checkpoint"));
    for (const auto& [device, box] : t.sharding.addressable_devices_indices_map(t.dims)) {
      bool seen = false;
      for (const auto& [b, unused] : boxes[i]) seen = seen || b == box;
      if (seen) continue;
      for (size_t k = 0; k < leaf.shards.size(); ++k) {
        IndexBox region = intersect(box, leaf.shards[k].box);
        if (region.num_elements() > 0) reads.push_back({i, boxes[i].size(), k, std::move(region)});
      }
      boxes[i].emplace_back(box, Buffer::uninitialized(t.dtype, box.shape()));
    }
  }
  // The reads write disjoint regions (the stored boxes of a leaf do not overlap), so they run in parallel.
  MCX_RETURN_IF_ERROR(parallel_for_status(static_cast<int64_t>(reads.size()), threads, [&](int64_t r) {
    const Read& rd = reads[static_cast<size_t>(r)];
    auto& [box, buf] = boxes[rd.leaf][rd.box];
    return read_region(dir, m.checksum, m.leaves[rd.leaf], m.leaves[rd.leaf].shards[rd.shard], rd.region, buf, box);
  }));
  std::vector<Array> out;
  out.reserve(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    const LeafTarget& t = targets[i];
    // Each device gets its own copy of a box several of its devices hold (a donated buffer is reused in place).
    std::vector<int> uses(boxes[i].size(), 0);
    try {
      out.push_back(make_array_from_callback(t.dims, t.dtype, t.sharding, [&](const IndexBox& box) -> Buffer {
        for (size_t k = 0; k < boxes[i].size(); ++k) {
          if (boxes[i][k].first == box) return uses[k]++ == 0 ? boxes[i][k].second : boxes[i][k].second.copy();
        }
        return Buffer();  // not reached: every addressable box was read above
      }));
    } catch (const Error& e) {
      return absl::Status(e.code(), absl::StrCat(who(m.leaves[i]), ": ", e.what()));
    }
  }
  return out;
}

}  // namespace mcx::checkpoint
