#include "mcx/checkpoint/save.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/checkpoint/files.h"
#include "mcx/checkpoint/format.h"
#include "mcx/checkpoint/save_sync.h"
#include "mcx/checkpoint/shard_io.h"
#include "mcx/core/error.h"
#include "mcx/core/hash.h"
#include "mcx/core/npy.h"
#include "mcx/core/profiler.h"

namespace mcx::checkpoint {
namespace {

std::string nonce() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                      static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())));
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(gen()));
  return buf;
}

// fsync_dir when the save is durable.
absl::Status sync_dir(const SaveJob& job, const std::string& path) {
  return job.durable ? fsync_dir(path) : absl::OkStatus();
}

std::string kv_prefix(const SaveJob& job, int64_t seq) {
  char tag[17];
  std::snprintf(tag, sizeof(tag), "%016llx", static_cast<unsigned long long>(fnv1a64(job.root)));
  return absl::StrCat("mcx/checkpoint/", tag, "/", seq);
}

// Leader, before anyone writes: removes what earlier saves left uncommitted, refuses a committed step, and
// makes the temporary directory. Returns its name.
absl::StatusOr<std::string> make_tmp_dir(const SaveJob& job) {
  std::error_code ec;
  std::filesystem::create_directories(job.root, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("[checkpoint] cannot create the directory '", job.root, "': ", ec.message()));
  }
  MCX_ASSIGN_OR_RETURN(std::vector<std::string> partial, partial_dirs(job.root));
  for (const std::string& p : partial) MCX_RETURN_IF_ERROR(remove_tree(p));
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> steps, committed_steps(job.root));
  for (int64_t s : steps) {
    if (s == job.step) {
      return absl::AlreadyExistsError(absl::StrCat("[checkpoint] step ", job.step, " is already committed in '",
                                                   job.root, "'; expected a new step"));
    }
  }
  const std::string name = absl::StrCat(step_dir_name(job.step), ".tmp-", nonce());
  const std::string path = job.root + "/" + name;
  if (::mkdir(path.c_str(), 0755) != 0) return io_error("create the directory", path);
  MCX_RETURN_IF_ERROR(sync_dir(job, job.root));
  return name;
}

// Every process: its shard files (written, hashed and fsynced on job.threads threads) and its fragment.
absl::Status write_owned(const SaveJob& job, const std::string& dir, int process) {
  // Shards still on a device (an asynchronous save) are copied to the host here, off the training step.
  std::vector<Buffer> host(job.owned.size());
  const absl::Time deadline = absl::Now() + job.timeout;
  for (size_t k = 0; k < job.owned.size(); ++k) {
    MCX_ASSIGN_OR_RETURN(host[k], job.owned[k].host_data(deadline));
  }
  std::vector<ShardFile> files;
  files.reserve(job.owned.size());
  for (size_t k = 0; k < job.owned.size(); ++k) {
    files.push_back({dir + "/" + shard_file_name(job.owned[k].leaf, job.owned[k].shard), &host[k]});
  }
  MCX_ASSIGN_OR_RETURN(std::vector<FragmentEntry> entries,
                       write_shards(files, job.threads, job.durable, job.checksum));
  for (size_t k = 0; k < entries.size(); ++k) {
    entries[k].leaf = job.owned[k].leaf;
    entries[k].shard = job.owned[k].shard;
  }
  MCX_RETURN_IF_ERROR(
      write_new_file(dir + "/" + fragment_file_name(process), fragment_to_json(process, entries), job.durable));
  return sync_dir(job, dir);
}

// Leader, after every participant wrote: the manifest from their fragments, the commit marker, the rename.
absl::Status commit(const SaveJob& job, const std::string& tmp_name, const std::vector<int>& writers) {
  const std::string dir = job.root + "/" + tmp_name;
  Manifest m;
  m.step = job.step;
  m.process_count = process_count();
  m.checksum = job.checksum;
  m.metadata_json = job.metadata_json;
  m.tree = job.tree;
  for (size_t i = 0; i < job.plan.size(); ++i) {
    const PlannedLeaf& p = job.plan[i];
    LeafRecord l{p.path, p.dtype, p.dims, {}};
    for (size_t j = 0; j < p.shards.size(); ++j) {
      ShardRecord r;
      r.box = p.shards[j].box;
      r.file = shard_file_name(static_cast<int>(i), static_cast<int>(j));
      r.process = p.shards[j].owner.process_index;
      r.device = p.shards[j].owner.global_id;
      r.bytes = -1;  // filled from the writer's fragment
      l.shards.push_back(std::move(r));
    }
    m.leaves.push_back(std::move(l));
  }
  for (int p : writers) {
    const std::string path = dir + "/" + fragment_file_name(p);
    MCX_ASSIGN_OR_RETURN(std::string text, read_file(path));
    MCX_ASSIGN_OR_RETURN(std::vector<FragmentEntry> entries, fragment_from_json(text, path));
    for (FragmentEntry& e : entries) {
      if (e.leaf < 0 || e.leaf >= static_cast<int>(m.leaves.size()) || e.shard < 0 ||
          e.shard >= static_cast<int>(m.leaves[e.leaf].shards.size()) ||
          m.leaves[e.leaf].shards[e.shard].process != p) {
        return absl::FailedPreconditionError(absl::StrCat(
            "[checkpoint] process ", p, " wrote shard ", e.shard, " of leaf ", e.leaf,
            ", which the leader's plan does not give it: did the processes save different trees or shardings?"));
      }
      ShardRecord& r = m.leaves[e.leaf].shards[e.shard];
      r.bytes = e.bytes;
      r.digest = std::move(e.digest);
      r.chunk_digests = std::move(e.chunk_digests);
    }
  }
  for (const LeafRecord& l : m.leaves) {
    for (const ShardRecord& r : l.shards) {
      if (r.bytes < 0) {
        return absl::FailedPreconditionError(absl::StrCat("[checkpoint] leaf '", l.path, "': process ", r.process,
                                                          " did not write '", r.file, "'"));
      }
    }
  }
  const std::string manifest = manifest_to_json(m);
  MCX_RETURN_IF_ERROR(write_new_file(dir + "/" + std::string(kManifestFile), manifest, job.durable));
  for (int p : writers) {
    const std::string path = dir + "/" + fragment_file_name(p);
    if (std::remove(path.c_str()) != 0) return io_error("remove", path);
  }
  MCX_RETURN_IF_ERROR(write_new_file(dir + "/" + std::string(kCommitFile),
                                     commit_to_json(job.step, to_hex(sha256(manifest))), job.durable));
  MCX_RETURN_IF_ERROR(sync_dir(job, dir));
  const std::string final_dir = job.root + "/" + step_dir_name(job.step);
  if (std::rename(dir.c_str(), final_dir.c_str()) != 0) return io_error("rename into place", dir);
  return sync_dir(job, job.root);
}

// Leader, after the commit: keeps the newest max_to_keep steps by removing the commit markers of the older
// ones (which retires them: no listing or restore sees them) and returns their directories, which run_save's
// caller removes. A crash before that leaves partial directories, which the next save removes.
absl::StatusOr<std::vector<std::string>> retire_old_steps(const SaveJob& job) {
  std::vector<std::string> retired;
  if (job.max_to_keep <= 0) return retired;
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> steps, committed_steps(job.root));
  for (size_t i = 0; i + job.max_to_keep < steps.size(); ++i) {
    const std::string dir = job.root + "/" + step_dir_name(steps[i]);
    const std::string marker = dir + "/" + std::string(kCommitFile);
    if (std::remove(marker.c_str()) != 0) return io_error("remove", marker);
    MCX_RETURN_IF_ERROR(sync_dir(job, dir));
    retired.push_back(dir);
  }
  return retired;
}

}  // namespace

absl::StatusOr<SaveJob> prepare_save(const std::string& root, int64_t step, const TreeDef& def,
                                     const std::vector<Array>& leaves, std::string_view metadata_json, bool copy) {
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("[checkpoint] expected a step >= 0, found ", step));
  MCX_RETURN_IF_ERROR(validate_metadata(metadata_json));
  SaveJob job;
  job.root = root;
  job.step = step;
  job.tree = def;
  job.metadata_json = std::string(metadata_json);
  MCX_ASSIGN_OR_RETURN(job.plan, plan_save(def, leaves));
  MCX_ASSIGN_OR_RETURN(job.owned, owned_shards(job.plan, leaves, copy));
  return job;
}

absl::StatusOr<std::vector<std::string>> run_save(const SaveJob& job, const absl::Status& prepared) {
  profiler::Scope traced("checkpoint", "save step ", std::to_string(job.step));
  SaveSync sync(kv_prefix(job, job.seq), job.timeout, job.processes);
  const std::string who = absl::StrCat("[checkpoint] save of step ", job.step, ": ");
  absl::StatusOr<std::string> tmp = sync.share_from_leader(
      "dir", !sync.is_leader() ? absl::StatusOr<std::string>("")
                               : (prepared.ok() ? make_tmp_dir(job) : absl::StatusOr<std::string>(prepared)));
  if (!tmp.ok()) return prepared.ok() ? tmp.status() : prepared;
  const std::string expected_prefix = step_dir_name(job.step) + ".tmp-";
  absl::Status written = prepared;  // a failure before writing is published as this process's outcome
  if (written.ok() && tmp->rfind(expected_prefix, 0) != 0) {
    written = absl::FailedPreconditionError(absl::StrCat(who, "process ", sync.leader(), " saves into '", *tmp,
                                                         "'; expected a directory for this step: every process "
                                                         "must save the same steps in the same order"));
  } else if (written.ok()) {
    profiler::Scope writing("checkpoint", "write shards");
    written = write_owned(job, job.root + "/" + *tmp, sync.process());
  }
  if (!prepared.ok()) {
    (void)sync.all_ok("written", written);  // the others learn of it now; this process fails with its own error
    return prepared;
  }
  {
    profiler::Scope agreeing("checkpoint", "wait for every process's shards");
    MCX_RETURN_IF_ERROR(sync.all_ok("written", written));
  }
  // Every participant is past the previous save: its entries can go.
  if (job.seq > 0) sync.forget(kv_prefix(job, job.seq - 1), {"written"}, {"dir", "commit"});
  absl::StatusOr<std::string> committed("");
  absl::StatusOr<std::vector<std::string>> retired = std::vector<std::string>();
  if (sync.is_leader()) {
    profiler::Scope committing("checkpoint", "commit");
    absl::Status s = commit(job, *tmp, sync.participants());
    if (s.ok()) {
      retired = retire_old_steps(job);
      s = retired.status();
    }
    committed = s.ok() ? absl::StatusOr<std::string>("") : s;
  }
  MCX_RETURN_IF_ERROR(sync.share_from_leader("commit", committed).status());
  profiler::instant("checkpoint", absl::StrCat("step ", job.step, " committed"));
  return retired;
}

}  // namespace mcx::checkpoint
