#include "mcx/multihost/multihost.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/config.h"
#include "mcx/core/error.h"
#include "mcx/core/hash.h"
#include "mcx/collectives/launch_check.h"
#include "mcx/collectives/peer_collectives.h"
#include "mcx/collectives/peer_group.h"
#include "mcx/distributed/distributed.h"
#include "mcx/runtime/box_copy.h"
#include "mcx/runtime/device.h"
#include "mcx/runtime/stream.h"
#include "mcx/runtime/transfer.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/placement.h"

namespace mcx::multihost {
namespace {

// The process group every utility runs over (all processes), rebuilt after a failure.
struct Peers {
  std::mutex mu;  // serialises the utilities of this process
  std::unique_ptr<PeerGroup> group;
  uint64_t generation = 0;
  uint64_t calls = 0;
};

Peers& peers() {
  static Peers* p = new Peers();  // never destroyed: a utility may run during exit
  return *p;
}

// What one call does over the group: (group, tag base, call check, deadline) -> status.
using Body = std::function<absl::Status(PeerGroup&, uint64_t, const Piggyback*, absl::Time)>;

// Runs body as call `what(name)` of this process: builds the group on first use, checks with the first
// exchange that every process makes the same call, and drops the group after a failure. Throws on error.
void run_call(const std::string& what, const std::string& name, absl::Duration timeout, const Body& body) {
  const int n = process_count();
  if (n == 1) return;  // nothing to exchange (callers handle the single-process result)
  const absl::Time deadline = absl::Now() + timeout;
  Peers& p = peers();
  std::lock_guard<std::mutex> lock(p.mu);
  if (!p.group) {
    std::vector<int> all;
    for (int i = 0; i < n; ++i) all.push_back(i);
    p.group = value_or_throw(make_peer_group(PeerGroupRequest{all, "multihost", p.generation, deadline}));
  }
  const uint64_t seq = p.calls++;
  const std::string call = name.empty() ? what : absl::StrCat(what, "('", name, "')");
  LaunchCheck check(LaunchTag{call, fnv1a64(call), seq}, process_index(), what, p.group->description(),
                    "every process must call the same multihost utilities, with the same names, in the same order");
  absl::Status st = body(*p.group, (seq % (uint64_t{1} << 40)) * kPeerTagSpan * 4, check.piggyback(), deadline);
  if (!st.ok()) {
    p.group.reset();  // poisoned: the next call connects a new generation
    ++p.generation;
    throw_if_error(with_api_prefix(st, what));
  }
}

// Every process's `mine` (any length), in process order: a ring all-gather of the sizes (carrying the call
// check), then of the bytes. Uses tags [tag, tag + 2 * kPeerTagSpan).
absl::Status gather_strings(PeerGroup& g, uint64_t tag, const Piggyback* pb, absl::Time deadline,
                            const std::string& mine, std::vector<std::string>* out) {
  const int n = g.size();
  std::vector<int64_t> size_bytes(n, sizeof(int64_t));
  std::vector<int64_t> sizes(n, 0);
  const int64_t my_size = static_cast<int64_t>(mine.size());
  MCX_RETURN_IF_ERROR(peer_all_gatherv(g, &my_size, size_bytes, sizes.data(), tag, deadline, pb));
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  std::string all(static_cast<size_t>(total), '\0');
  MCX_RETURN_IF_ERROR(peer_all_gatherv(g, mine.data(), sizes, all.data(), tag + kPeerTagSpan, deadline));
  out->clear();
  int64_t at = 0;
  for (int64_t s : sizes) {
    out->push_back(all.substr(static_cast<size_t>(at), static_cast<size_t>(s)));
    at += s;
  }
  return absl::OkStatus();
}

// ---- leaf encoding: "dtype rank dims... | bytes" ----

void leaf_paths(const TreeDef& def, const std::string& prefix, std::vector<std::string>* out) {
  switch (def.kind()) {
    case TreeDef::Kind::kLeaf: out->push_back(prefix.empty() ? "(root)" : prefix); return;
    case TreeDef::Kind::kDict:
      for (size_t i = 0; i < def.children().size(); ++i) {
        leaf_paths(def.children()[i], absl::StrCat(prefix, "['", def.keys()[i], "']"), out);
      }
      return;
    default:
      for (size_t i = 0; i < def.children().size(); ++i) {
        leaf_paths(def.children()[i], absl::StrCat(prefix, "[", i, "]"), out);
      }
  }
}

std::string leaf_name(const std::vector<std::string>& paths, size_t i) {
  return absl::StrCat("leaf ", i, " ", i < paths.size() ? paths[i] : "");
}

// Reads the int64 fields of a message written with `put` (host byte order: every process runs on the same
// kind of host).
struct ByteReader {
  const std::string& s;
  size_t at = 0;
  bool get(int64_t* v) {
    if (at + sizeof(int64_t) > s.size()) return false;
    std::memcpy(v, s.data() + at, sizeof(int64_t));
    at += sizeof(int64_t);
    return true;
  }
};

struct LeafMeta {
  DType dtype;
  std::vector<int64_t> dims;
  std::string to_string() const {
    return absl::StrCat(std::string(dtype_short_name(dtype)), "[", absl::StrJoin(dims, ","), "]");
  }
  bool operator==(const LeafMeta&) const = default;
};

std::string encode_meta(const std::vector<LeafMeta>& metas) {
  std::string s;
  auto put = [&](int64_t v) { s.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(static_cast<int64_t>(metas.size()));
  for (const LeafMeta& m : metas) {
    put(static_cast<int64_t>(m.dtype));
    put(static_cast<int64_t>(m.dims.size()));
    for (int64_t d : m.dims) put(d);
  }
  return s;
}

absl::StatusOr<std::vector<LeafMeta>> decode_meta(const std::string& s, int process) {
  std::vector<LeafMeta> out;
  ByteReader r{s};
  auto get = [&](int64_t* v) { return r.get(v); };
  int64_t n = 0, dtype = 0, rank = 0;
  if (!get(&n) || n < 0) return absl::DataLossError(absl::StrCat("malformed tree description from process ", process));
  for (int64_t i = 0; i < n; ++i) {
    if (!get(&dtype) || !get(&rank) || rank < 0 || rank > 64) {
      return absl::DataLossError(absl::StrCat("malformed tree description from process ", process));
    }
    LeafMeta m{static_cast<DType>(dtype), std::vector<int64_t>(static_cast<size_t>(rank))};
    for (int64_t& d : m.dims) {
      if (!get(&d)) return absl::DataLossError(absl::StrCat("malformed tree description from process ", process));
    }
    out.push_back(std::move(m));
  }
  return out;
}

// A leaf's shards held here as "box, bytes" records, for assembling a global array from every process.
std::string encode_shards(const Array& leaf) {
  std::string s;
  auto put = [&](int64_t v) { s.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  std::vector<ArrayShard> shards = leaf.addressable_shards();
  put(static_cast<int64_t>(shards.size()));
  for (const ArrayShard& sh : shards) {
    Buffer b = sh.data.to_host();
    for (int64_t v : sh.index.start) put(v);
    for (int64_t v : sh.index.limit) put(v);
    put(static_cast<int64_t>(b.nbytes()));
    s.append(static_cast<const char*>(b.data()), b.nbytes());
  }
  return s;
}

absl::Status assemble_shards(const std::string& s, Buffer& global, int process) {
  const size_t rank = global.dims().size();
  ByteReader r{s};
  auto get = [&](int64_t* v) { return r.get(v); };
  size_t& at = r.at;
  int64_t count = 0;
  if (!get(&count)) return absl::DataLossError(absl::StrCat("malformed shards from process ", process));
  const IndexBox whole{std::vector<int64_t>(rank, 0), global.dims()};
  for (int64_t k = 0; k < count; ++k) {
    IndexBox box{std::vector<int64_t>(rank), std::vector<int64_t>(rank)};
    int64_t bytes = 0;
    for (auto& v : box.start) get(&v);
    for (auto& v : box.limit) get(&v);
    if (!get(&bytes) || at + static_cast<size_t>(bytes) > s.size()) {
      return absl::DataLossError(absl::StrCat("malformed shards from process ", process));
    }
    Buffer shard = Buffer::uninitialized(global.dtype(), box.shape());
    if (shard.nbytes() != static_cast<size_t>(bytes) || !whole.contains(box)) {
      return absl::DataLossError(absl::StrCat("shard ", box.to_string(), " from process ", process,
                                              " does not fit the global array"));
    }
    std::memcpy(shard.mutable_data(), s.data() + at, shard.nbytes());
    at += static_cast<size_t>(bytes);
    copy_box(shard, box, global, whole, box);
  }
  return absl::OkStatus();
}

// Checks that every process described the same tree (structure is in the call check; here dtypes and shapes).
absl::Status check_same_leaves(const std::vector<std::string>& metas, const std::vector<std::string>& paths,
                               const char* what, bool ignore_leading_dim, std::vector<std::vector<LeafMeta>>* out) {
  out->clear();
  for (size_t p = 0; p < metas.size(); ++p) {
    MCX_ASSIGN_OR_RETURN(std::vector<LeafMeta> m, decode_meta(metas[p], static_cast<int>(p)));
    out->push_back(std::move(m));
  }
  for (size_t p = 1; p < out->size(); ++p) {
    if ((*out)[p].size() != (*out)[0].size()) {
      return absl::InvalidArgumentError(absl::StrCat("[", what, "] process ", p, " passed ", (*out)[p].size(),
                                                     " leaves, process 0 passed ", (*out)[0].size()));
    }
    for (size_t i = 0; i < (*out)[p].size(); ++i) {
      LeafMeta a = (*out)[0][i], b = (*out)[p][i];
      if (ignore_leading_dim && !a.dims.empty() && !b.dims.empty()) a.dims[0] = b.dims[0] = 0;
      if (!(a == b)) {
        return absl::InvalidArgumentError(absl::StrCat("[", what, "] ", leaf_name(paths, i), " is ",
                                                       (*out)[p][i].to_string(), " on process ", p, " but ",
                                                       (*out)[0][i].to_string(), " on process 0"));
      }
    }
  }
  return absl::OkStatus();
}

// A global array: a NamedSharding whose devices include some of every process. Its gathered value is the
// global value itself (not stacked), also in a single-process job, so the result shape does not depend on the
// number of processes.
bool is_global(const Array& a) {
  const Sharding& s = a.sharding();
  if (s.is_single_device()) return false;
  std::vector<bool> seen(static_cast<size_t>(process_count()), false);
  for (const Device& d : s.device_set()) seen.at(static_cast<size_t>(d.process_index)) = true;
  return std::all_of(seen.begin(), seen.end(), [](bool b) { return b; });
}

}  // namespace

absl::Duration detail::default_timeout() {
  return absl::Seconds(kDeviceTimeoutFlag.value());
}

void sync_global_devices(const std::string& name, std::optional<absl::Duration> timeout) {
  const absl::Duration t = timeout.value_or(detail::default_timeout());
  const absl::Time deadline = absl::Now() + t;
  for (const Device& d : local_devices()) {
    throw_if_error(synchronize_device(d, deadline));
  }
  if (process_count() == 1) return;
  // The control plane's barrier names the processes that did not arrive; the barrier over the data plane
  // that follows checks that everyone called it with the same name (and that the data plane is healthy).
  distributed::CoordinationAgent* agent = distributed::agent();
  uint64_t seq = 0;
  {
    Peers& p = peers();
    std::lock_guard<std::mutex> lock(p.mu);
    seq = p.calls;  // the data-plane call below takes this sequence number
  }
  if (agent != nullptr) {
    absl::Status st = agent->barrier(absl::StrCat("mcx/sync_global_devices/", seq),
                                     std::max(absl::Milliseconds(1), deadline - absl::Now()));
    if (!st.ok()) {
      throw_if_error(with_message(st, absl::StrCat("[sync_global_devices] '", name, "': ", st.message())));
    }
  }
  run_call("sync_global_devices", name, std::max(absl::Milliseconds(1), deadline - absl::Now()),
           [](PeerGroup& g, uint64_t tag, const Piggyback* pb, absl::Time dl) { return peer_barrier(g, tag, dl, pb); });
}

std::vector<Array> detail::broadcast_one_to_all(const std::vector<Array>& leaves, const TreeDef& def, bool is_source,
                                                absl::Duration timeout) {
  if (process_count() == 1) {
    std::vector<Array> out;
    for (const Array& a : leaves) out.emplace_back(device_get(a));
    return out;
  }
  std::vector<std::string> paths;
  leaf_paths(def, "", &paths);
  std::vector<LeafMeta> metas;
  for (const Array& a : leaves) metas.push_back({a.dtype(), a.dims()});
  std::string payload;
  if (is_source) {
    for (const Array& a : leaves) {
      Buffer b = device_get(a);
      payload.append(static_cast<const char*>(b.data()), b.nbytes());
    }
  }
  std::vector<Array> out;
  run_call("broadcast_one_to_all", def.to_string(), timeout,
           [&](PeerGroup& g, uint64_t tag, const Piggyback* pb, absl::Time dl) -> absl::Status {
             std::vector<std::string> all_meta;
             const std::string mine = std::string(1, is_source ? '\1' : '\0') + encode_meta(metas);
             MCX_RETURN_IF_ERROR(gather_strings(g, tag, pb, dl, mine, &all_meta));
             std::vector<int> sources;
             for (size_t p = 0; p < all_meta.size(); ++p) {
               if (!all_meta[p].empty() && all_meta[p][0] == '\1') sources.push_back(static_cast<int>(p));
               all_meta[p] = all_meta[p].substr(1);
             }
             if (sources.size() != 1) {
               return absl::InvalidArgumentError(absl::StrCat(
                   "expected exactly one source process, found ", sources.size(),
                   sources.empty() ? "" : absl::StrCat(" (processes ", absl::StrJoin(sources, ", "), ")")));
             }
             std::vector<std::vector<LeafMeta>> decoded;
             MCX_RETURN_IF_ERROR(check_same_leaves(all_meta, paths, "broadcast_one_to_all", false, &decoded));
             std::vector<std::string> data;
             MCX_RETURN_IF_ERROR(gather_strings(g, tag + 2 * kPeerTagSpan, nullptr, dl, payload, &data));
             const std::string& src = data[sources[0]];
             size_t at = 0;
             for (const LeafMeta& m : decoded[sources[0]]) {
               Buffer b = Buffer::uninitialized(m.dtype, m.dims);
               if (at + b.nbytes() > src.size()) return absl::DataLossError("the source sent fewer bytes than its tree");
               std::memcpy(b.mutable_data(), src.data() + at, b.nbytes());
               at += b.nbytes();
               out.emplace_back(std::move(b));
             }
             return absl::OkStatus();
           });
  return out;
}

std::vector<Array> detail::process_allgather(const std::vector<Array>& leaves, const TreeDef& def, bool tiled,
                                             absl::Duration timeout) {
  const int n = process_count();
  std::vector<std::string> paths;
  leaf_paths(def, "", &paths);
  std::vector<LeafMeta> metas;
  std::string payload;
  auto put = [&](int64_t v) { payload.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  for (const Array& a : leaves) {
    metas.push_back({a.dtype(), a.dims()});
    // Host-local leaves contribute their value; global ones their shards.
    std::string part;
    if (!is_global(a)) {
      Buffer b = device_get(a);
      part.assign(static_cast<const char*>(b.data()), b.nbytes());
    } else {
      part = encode_shards(a);
    }
    put(static_cast<int64_t>(part.size()));
    payload += part;
  }
  std::vector<std::vector<std::string>> parts(leaves.size(), std::vector<std::string>(n));  // leaf -> process
  std::vector<std::vector<LeafMeta>> decoded{metas};
  if (n == 1) {
    size_t at = 0;
    for (size_t i = 0; i < leaves.size(); ++i) {
      int64_t len;
      std::memcpy(&len, payload.data() + at, sizeof(len));
      parts[i][0] = payload.substr(at + sizeof(len), static_cast<size_t>(len));
      at += sizeof(len) + static_cast<size_t>(len);
    }
  }
  run_call("process_allgather", def.to_string(), timeout,
           [&](PeerGroup& g, uint64_t tag, const Piggyback* pb, absl::Time dl) -> absl::Status {
             std::vector<std::string> all_meta, data;
             MCX_RETURN_IF_ERROR(gather_strings(g, tag, pb, dl, encode_meta(metas), &all_meta));
             MCX_RETURN_IF_ERROR(check_same_leaves(all_meta, paths, "process_allgather", tiled, &decoded));
             MCX_RETURN_IF_ERROR(gather_strings(g, tag + 2 * kPeerTagSpan, nullptr, dl, payload, &data));
             for (int p = 0; p < n; ++p) {
               size_t at = 0;
               for (size_t i = 0; i < leaves.size(); ++i) {
                 int64_t len = 0;
                 if (at + sizeof(len) > data[p].size()) return absl::DataLossError("truncated data");
                 std::memcpy(&len, data[p].data() + at, sizeof(len));
                 parts[i][p] = data[p].substr(at + sizeof(len), static_cast<size_t>(len));
                 at += sizeof(len) + static_cast<size_t>(len);
               }
             }
             return absl::OkStatus();
           });
  std::vector<Array> out;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const LeafMeta& m = metas[i];
    if (is_global(leaves[i])) {  // the global value, assembled from every process's shards
      Buffer global = Buffer::zeros(m.dtype, m.dims);
      for (int p = 0; p < n; ++p) throw_if_error(assemble_shards(parts[i][p], global, p));
      out.emplace_back(std::move(global));
      continue;
    }
    std::vector<Array> pieces;
    for (int p = 0; p < n; ++p) {
      const LeafMeta& pm = decoded[n == 1 ? 0 : p][i];
      Buffer b = Buffer::uninitialized(pm.dtype, pm.dims);
      if (parts[i][p].size() != b.nbytes()) {
        throw_if_error(absl::DataLossError(absl::StrCat("[process_allgather] ", leaf_name(paths, i),
                                                        ": process ", p, " sent ", parts[i][p].size(),
                                                        " bytes, expected ", b.nbytes())));
      }
      std::memcpy(b.mutable_data(), parts[i][p].data(), b.nbytes());
      pieces.emplace_back(std::move(b));
    }
    if (tiled && !m.dims.empty()) {
      out.push_back(concatenate(pieces, 0));
    } else {
      out.push_back(stack(pieces, 0));
    }
  }
  return out;
}

void detail::assert_equal(const std::vector<Array>& leaves, const TreeDef& def, const std::string& message,
                          absl::Duration timeout) {
  if (process_count() == 1) return;
  std::vector<std::string> paths;
  leaf_paths(def, "", &paths);
  std::vector<LeafMeta> metas;
  std::string digests;
  for (const Array& a : leaves) {
    metas.push_back({a.dtype(), a.dims()});
    Sha256 h;
    if (a.is_fully_addressable()) {
      Buffer b = device_get(a);
      h.update(std::string_view(static_cast<const char*>(b.data()), b.nbytes()));
    } else {
      h.update(encode_shards(a));  // a global array: compare what each process holds of it
    }
    Sha256Digest d = h.digest();
    digests.append(reinterpret_cast<const char*>(d.data()), d.size());
  }
  std::string problem;
  run_call("assert_equal", message, timeout,
           [&](PeerGroup& g, uint64_t tag, const Piggyback* pb, absl::Time dl) -> absl::Status {
             std::vector<std::string> all_meta, all_digests;
             MCX_RETURN_IF_ERROR(gather_strings(g, tag, pb, dl, encode_meta(metas), &all_meta));
             std::vector<std::vector<LeafMeta>> decoded;
             MCX_RETURN_IF_ERROR(check_same_leaves(all_meta, paths, "assert_equal", false, &decoded));
             MCX_RETURN_IF_ERROR(gather_strings(g, tag + 2 * kPeerTagSpan, nullptr, dl, digests, &all_digests));
             for (size_t i = 0; i < leaves.size() && problem.empty(); ++i) {
               std::vector<int> differ;
               for (size_t p = 1; p < all_digests.size(); ++p) {
                 if (all_digests[p].compare(i * 32, 32, all_digests[0], i * 32, 32) != 0) {
                   differ.push_back(static_cast<int>(p));
                 }
               }
               if (!differ.empty()) {
                 problem = absl::StrCat(leaf_name(paths, i), " differs: process", differ.size() > 1 ? "es " : " ",
                                        absl::StrJoin(differ, ", "), differ.size() > 1 ? " hold" : " holds",
                                        " other values than process 0");
               }
             }
             return absl::OkStatus();
           });
  if (!problem.empty()) {
    throw InvalidArgument(absl::StrCat("[assert_equal] ", message.empty() ? "" : message + ": ", problem));
  }
}

namespace {

// Inside jit, vmap or grad every process traces the same program over global arrays, so a traced value is
// already global. The conversions are then the identity with the layout pinned (a sharding constraint), which is
// the same value exactly when no dimension is split across processes (the local and global arrays coincide).
// When one is, this process's part and the global array differ in shape and a global-view program cannot tell
// the processes' parts apart: refused, naming the dimension.
Array convert_traced(const Array& x, const Mesh& mesh, const PartitionSpec& spec, const char* api) {
  const Sharding sharding = NamedSharding(mesh, spec);
  const std::vector<ProcessShardRange> ranges = value_or_throw(process_shard_ranges(sharding, x.ndim(), api));
  for (int d = 0; d < x.ndim(); ++d) {
    const ProcessShardRange& r = ranges[d];
    if (r.lo == 0 && r.hi == r.shards) continue;
    throw InvalidArgument(absl::StrCat(
        "[", api, "] inside jit, vmap or grad a value is already a global array; here dimension ", d, " of ",
        x.aval().to_string(), " is split across processes by ", sharding.to_string(),
        ", so this process's part and the global array differ: convert outside the transformation (the "
        "converted array is then an argument of the jitted function), as in docs/distributed.md"));
  }
  return with_sharding_constraint(x, sharding);
}

}  // namespace

Array host_local_array_to_global_array(const Array& local, const Mesh& mesh, const PartitionSpec& spec) {
  if (local.is_tracer()) return convert_traced(local, mesh, spec, "host_local_array_to_global_array");
  return make_array_from_process_local_data(NamedSharding(mesh, spec), device_get(local));
}

namespace detail {

std::vector<Array> convert_leaves(const std::vector<Array>& leaves, const std::vector<PartitionSpec>& specs,
                                  const char* api, LeafConversion convert, const Mesh& mesh) {
  if (specs.size() != 1 && specs.size() != leaves.size()) {
    throw InvalidArgument(absl::StrCat("[", api, "] expected one partition spec, or one per leaf (", leaves.size(),
                                       "), found ", specs.size()));
  }
  std::vector<Array> out;
  out.reserve(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) out.push_back(convert(leaves[i], mesh, specs[specs.size() == 1 ? 0 : i]));
  return out;
}

}  // namespace detail

Array global_array_to_host_local_array(const Array& global, const Mesh& mesh, const PartitionSpec& spec) {
  if (global.is_tracer()) return convert_traced(global, mesh, spec, "global_array_to_host_local_array");
  const Sharding sharding = NamedSharding(mesh, spec);
  if (!global.sharding().equivalent(sharding, global.dims())) {
    throw InvalidArgument(absl::StrCat("[global_array_to_host_local_array] the array is sharded as ",
                                       global.sharding().to_string(), ", expected ", sharding.to_string()));
  }
  // This process's part is the bounding box of its shards; every element of it must be held here.
  std::vector<ArrayShard> shards = global.addressable_shards();
  if (shards.empty()) {
    throw InvalidArgument("[global_array_to_host_local_array] this process holds no shard of the array");
  }
  IndexBox part = shards[0].index;
  for (const ArrayShard& s : shards) {
    for (size_t d = 0; d < part.start.size(); ++d) {
      part.start[d] = std::min(part.start[d], s.index.start[d]);
      part.limit[d] = std::max(part.limit[d], s.index.limit[d]);
    }
  }
  Buffer out = Buffer::zeros(global.dtype(), part.shape());
  int64_t covered = 0;
  std::map<std::vector<int64_t>, bool> seen;  // replicated shards are counted once
  for (const ArrayShard& s : shards) {
    if (seen[s.index.start]) continue;
    seen[s.index.start] = true;
    covered += s.index.num_elements();
    copy_box(s.data.to_host(), s.index, out, part, s.index);
  }
  if (covered != part.num_elements()) {
    throw InvalidArgument(absl::StrCat("[global_array_to_host_local_array] this process's shards do not form one box (",
                                       part.to_string(), "); its part is not a host-local array"));
  }
  return Array(std::move(out));
}

}  // namespace mcx::multihost
