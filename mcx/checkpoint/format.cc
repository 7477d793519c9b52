#include "mcx/checkpoint/format.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/error.h"
#include "mcx/export/artifact.h"
#include "nlohmann/json.hpp"

namespace mcx::checkpoint {
namespace {

using json = nlohmann::json;

absl::Status corrupt(const std::string& where, const std::string& what) {
  return absl::DataLossError(absl::StrCat("[checkpoint] ", where, ": ", what));
}

json tree_to_json(const TreeDef& def) {
  json j;
  switch (def.kind()) {
    case TreeDef::Kind::kLeaf: j["kind"] = "leaf"; return j;
    case TreeDef::Kind::kList: j["kind"] = "list"; break;
    case TreeDef::Kind::kTuple: j["kind"] = "tuple"; break;
    case TreeDef::Kind::kDict: j["kind"] = "dict"; j["keys"] = def.keys(); break;
    case TreeDef::Kind::kCustom:
      j["kind"] = "custom";
      j["name"] = def.custom_name();
      j["aux"] = absl::Base64Escape(def.aux());
      break;
  }
  json children = json::array();
  for (const TreeDef& c : def.children()) children.push_back(tree_to_json(c));
  j["children"] = std::move(children);
  return j;
}

absl::StatusOr<TreeDef> tree_from_json(const json& j, const std::string& where, int depth) {
  if (depth > 256) return corrupt(where, "\"tree\" is nested deeper than 256 levels");
  if (!j.is_object() || !j.contains("kind") || !j["kind"].is_string()) {
    return corrupt(where, absl::StrCat("expected a tree node {\"kind\": ...}, found ", j.dump()));
  }
  const std::string kind = j["kind"];
  if (kind == "leaf") return TreeDef::leaf();
  if (!j.contains("children") || !j["children"].is_array()) {
    return corrupt(where, absl::StrCat("tree node of kind '", kind, "' lacks a \"children\" array"));
  }
  std::vector<TreeDef> children;
  for (const json& c : j["children"]) {
    MCX_ASSIGN_OR_RETURN(TreeDef d, tree_from_json(c, where, depth + 1));
    children.push_back(std::move(d));
  }
  if (kind == "list") return TreeDef::list(std::move(children));
  if (kind == "tuple") return TreeDef::tuple(std::move(children));
  if (kind == "dict") {
    if (!j.contains("keys") || !j["keys"].is_array() || j["keys"].size() != children.size()) {
      return corrupt(where, "dict tree node needs one key per child");
    }
    std::vector<std::string> keys;
    for (const json& k : j["keys"]) {
      if (!k.is_string()) return corrupt(where, "dict tree node has a key that is not a string");
      keys.push_back(k);
    }
    return TreeDef::dict(std::move(keys), std::move(children));
  }
  if (kind == "custom") {
    std::string aux;
    if (!j.contains("name") || !j["name"].is_string() || !exporting::is_custom_node_name(j["name"].get<std::string>()) ||
        !j.contains("aux") || !j["aux"].is_string() || !absl::Base64Unescape(j["aux"].get<std::string>(), &aux)) {
      return corrupt(where, "custom tree node needs a \"name\" (letters, digits and '._:-') and base64 \"aux\"");
    }
    return TreeDef::custom(j["name"].get<std::string>(), std::move(aux), std::move(children));
  }
  return corrupt(where, absl::StrCat("unknown tree node kind '", kind,
                                     "' (expected leaf, list, tuple, dict or custom)"));
}

void collect_paths(const TreeDef& def, const std::string& prefix, std::vector<std::string>& out) {
  if (def.kind() == TreeDef::Kind::kLeaf) {
    out.push_back(prefix);
    return;
  }
  for (size_t i = 0; i < def.children().size(); ++i) {
    const std::string part = def.kind() == TreeDef::Kind::kDict ? def.keys()[i] : std::to_string(i);
    collect_paths(def.children()[i], prefix.empty() ? part : prefix + "/" + part, out);
  }
}

// Typed field access with errors naming the field.
template <typename T>
absl::StatusOr<T> field(const json& j, const char* name, const std::string& where, const std::string& context) {
  if (!j.is_object() || !j.contains(name)) {
    return corrupt(where, absl::StrCat(context, "lacks the field \"", name, "\""));
  }
  try {
    return j.at(name).get<T>();
  } catch (const json::exception& e) {
    return corrupt(where, absl::StrCat(context, "field \"", name, "\" has the wrong type: ", e.what()));
  }
}

json hashes_to_json(const std::vector<std::string>& chunks) { return json(chunks); }

}  // namespace

std::string shard_file_name(int leaf, int shard) { return absl::StrCat("leaf", leaf, ".shard", shard, ".npy"); }
std::string step_dir_name(int64_t step) { return std::to_string(step); }
std::string fragment_file_name(int process) { return absl::StrCat("fragment.p", process, ".json"); }

std::vector<std::string> leaf_paths(const TreeDef& def) {
  std::vector<std::string> out;
  collect_paths(def, "", out);
  return out;
}

absl::Status validate_metadata(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("[checkpoint] metadata must be a JSON object; found '",
                                                   std::string(text.substr(0, 200)), "'"));
  }
  return absl::OkStatus();
}

std::string manifest_to_json(const Manifest& m) {
  json j;
  j["format"] = kFormatName;
  j["version"] = m.version;
  j["step"] = m.step;
  j["process_count"] = m.process_count;
  j["chunk_bytes"] = kChunkBytes;
  j["checksum"] = std::string(checksum_name(m.checksum));
  j["metadata"] = json::parse(m.metadata_json);
  j["tree"] = tree_to_json(m.tree);
  json leaves = json::array();
  for (const LeafRecord& l : m.leaves) {
    json lj;
    lj["path"] = l.path;
    lj["dtype"] = std::string(dtype_name(l.dtype));
    lj["shape"] = l.dims;
    json shards = json::array();
    for (const ShardRecord& s : l.shards) {
      json sj;
      sj["start"] = s.box.start;
      sj["stop"] = s.box.limit;
      sj["file"] = s.file;
      sj["bytes"] = s.bytes;
      sj["digest"] = s.digest;
      sj["chunk_digests"] = hashes_to_json(s.chunk_digests);
      sj["process"] = s.process;
      sj["device"] = s.device;
      shards.push_back(std::move(sj));
    }
    lj["shards"] = std::move(shards);
    leaves.push_back(std::move(lj));
  }
  j["leaves"] = std::move(leaves);
  return j.dump(1) + "\n";
}

absl::StatusOr<Manifest> manifest_from_json(std::string_view text, const std::string& where) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return corrupt(where, "not a JSON object");
  Manifest m;
  MCX_ASSIGN_OR_RETURN(std::string format, field<std::string>(j, "format", where, ""));
  if (format != kFormatName) {
    return corrupt(where, absl::StrCat("expected format '", kFormatName, "', found '", format, "'"));
  }
  MCX_ASSIGN_OR_RETURN(m.version, field<int>(j, "version", where, ""));
  if (m.version < kOldestReadableVersion || m.version > kFormatVersion) {
    return absl::UnimplementedError(absl::StrCat("[checkpoint] ", where, ": expected format version ",
                                                 kOldestReadableVersion, " to ", kFormatVersion, ", found ",
                                                 m.version));
  }
  // Version 2 had SHA-256 only, under other names.
  const bool v2 = m.version == 2;
  const char* const digest_key = v2 ? "chunk_list_sha256" : "digest";
  const char* const chunks_key = v2 ? "chunk_sha256" : "chunk_digests";
  m.checksum = Checksum::kSha256;
  if (!v2) {
    MCX_ASSIGN_OR_RETURN(std::string checksum, field<std::string>(j, "checksum", where, ""));
    absl::StatusOr<Checksum> c = parse_checksum(checksum);
    if (!c.ok()) return corrupt(where, std::string(c.status().message()));
    m.checksum = *c;
  }
  MCX_ASSIGN_OR_RETURN(int64_t chunk, field<int64_t>(j, "chunk_bytes", where, ""));
  if (chunk != kChunkBytes) {
    return corrupt(where, absl::StrCat("expected chunk_bytes ", kChunkBytes, ", found ", chunk));
  }
  MCX_ASSIGN_OR_RETURN(m.step, field<int64_t>(j, "step", where, ""));
  MCX_ASSIGN_OR_RETURN(m.process_count, field<int>(j, "process_count", where, ""));
  if (!j.contains("metadata") || !j["metadata"].is_object()) return corrupt(where, "\"metadata\" is not an object");
  m.metadata_json = j["metadata"].dump();
  if (!j.contains("tree")) return corrupt(where, "lacks the field \"tree\"");
  MCX_ASSIGN_OR_RETURN(m.tree, tree_from_json(j["tree"], where, 0));
  if (!j.contains("leaves") || !j["leaves"].is_array()) return corrupt(where, "lacks the array \"leaves\"");
  const std::vector<std::string> paths = leaf_paths(m.tree);
  if (j["leaves"].size() != paths.size()) {
    return corrupt(where, absl::StrCat("the tree has ", paths.size(), " leaves but \"leaves\" lists ",
                                       j["leaves"].size()));
  }
  for (size_t i = 0; i < paths.size(); ++i) {
    const json& lj = j["leaves"][i];
    const std::string ctx = absl::StrCat("leaf ", i, " ('", paths[i], "') ");
    LeafRecord l;
    MCX_ASSIGN_OR_RETURN(l.path, field<std::string>(lj, "path", where, ctx));
    if (l.path != paths[i]) {
      return corrupt(where, absl::StrCat(ctx, "expected path '", paths[i], "' from the tree, found '", l.path, "'"));
    }
    MCX_ASSIGN_OR_RETURN(std::string dtype, field<std::string>(lj, "dtype", where, ctx));
    auto dt = parse_dtype(dtype);
    if (!dt.ok()) return corrupt(where, absl::StrCat(ctx, "has an unknown dtype '", dtype, "'"));
    l.dtype = *dt;
    MCX_ASSIGN_OR_RETURN(l.dims, field<std::vector<int64_t>>(lj, "shape", where, ctx));
    for (int64_t d : l.dims) {
      if (d < 0) return corrupt(where, absl::StrCat(ctx, "has a negative dimension in its shape"));
    }
    if (!lj.contains("shards") || !lj["shards"].is_array()) return corrupt(where, ctx + "lacks the array \"shards\"");
    for (const json& sj : lj["shards"]) {
      ShardRecord s;
      MCX_ASSIGN_OR_RETURN(s.box.start, field<std::vector<int64_t>>(sj, "start", where, ctx));
      MCX_ASSIGN_OR_RETURN(s.box.limit, field<std::vector<int64_t>>(sj, "stop", where, ctx));
      MCX_ASSIGN_OR_RETURN(s.file, field<std::string>(sj, "file", where, ctx));
      MCX_ASSIGN_OR_RETURN(s.bytes, field<int64_t>(sj, "bytes", where, ctx));
      MCX_ASSIGN_OR_RETURN(s.digest, field<std::string>(sj, digest_key, where, ctx));
      MCX_ASSIGN_OR_RETURN(s.chunk_digests, field<std::vector<std::string>>(sj, chunks_key, where, ctx));
      MCX_ASSIGN_OR_RETURN(s.process, field<int>(sj, "process", where, ctx));
      MCX_ASSIGN_OR_RETURN(s.device, field<int>(sj, "device", where, ctx));
      if (s.box.start.size() != l.dims.size() || s.box.limit.size() != l.dims.size()) {
        return corrupt(where, absl::StrCat(ctx, "shard '", s.file, "' has a box of rank ", s.box.start.size(),
                                           " for a leaf of rank ", l.dims.size()));
      }
      for (size_t d = 0; d < l.dims.size(); ++d) {
        if (s.box.start[d] < 0 || s.box.start[d] > s.box.limit[d] || s.box.limit[d] > l.dims[d]) {
          return corrupt(where, absl::StrCat(ctx, "shard '", s.file, "' has the box ", s.box.to_string(),
                                             " outside the shape"));
        }
      }
      if (s.file.empty() || s.file.find('/') != std::string::npos || s.file.find("..") != std::string::npos) {
        return corrupt(where, absl::StrCat(ctx, "has a shard file name '", s.file, "' that is not a plain name"));
      }
      const int64_t expected_chunks = (s.bytes + kChunkBytes - 1) / kChunkBytes;
      if (static_cast<int64_t>(s.chunk_digests.size()) != expected_chunks) {
        return corrupt(where, absl::StrCat(ctx, "shard '", s.file, "' of ", s.bytes, " bytes expects ",
                                           expected_chunks, " chunk hashes, found ", s.chunk_digests.size()));
      }
      l.shards.push_back(std::move(s));
    }
    // The shards must cover the global box exactly once: their sizes add up and no two overlap.
    int64_t covered = 0;
    const int64_t total = full_box(l.dims).num_elements();
    for (size_t a = 0; a < l.shards.size(); ++a) {
      covered += l.shards[a].box.num_elements();
      for (size_t b = a + 1; b < l.shards.size(); ++b) {
        if (intersect(l.shards[a].box, l.shards[b].box).num_elements() > 0 && l.shards[a].box.num_elements() > 0) {
          return corrupt(where, absl::StrCat(ctx, "shards '", l.shards[a].file, "' and '", l.shards[b].file,
                                             "' overlap"));
        }
      }
    }
    if (covered != total && !(total == 0)) {
      return corrupt(where, absl::StrCat(ctx, "shards cover ", covered, " elements; expected ", total));
    }
    m.leaves.push_back(std::move(l));
  }
  return m;
}

std::string fragment_to_json(int process, const std::vector<FragmentEntry>& entries) {
  json j;
  j["format"] = kFormatName;
  j["process"] = process;
  json files = json::array();
  for (const FragmentEntry& e : entries) {
    files.push_back({{"leaf", e.leaf}, {"shard", e.shard}, {"bytes", e.bytes}, {"digest", e.digest},
                     {"chunk_digests", e.chunk_digests}});
  }
  j["files"] = std::move(files);
  return j.dump() + "\n";
}

absl::StatusOr<std::vector<FragmentEntry>> fragment_from_json(std::string_view text, const std::string& where) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("files") || !j["files"].is_array()) {
    return corrupt(where, "not a fragment (a JSON object with a \"files\" array)");
  }
  std::vector<FragmentEntry> out;
  for (const json& f : j["files"]) {
    FragmentEntry e;
    MCX_ASSIGN_OR_RETURN(e.leaf, field<int>(f, "leaf", where, ""));
    MCX_ASSIGN_OR_RETURN(e.shard, field<int>(f, "shard", where, ""));
    MCX_ASSIGN_OR_RETURN(e.bytes, field<int64_t>(f, "bytes", where, ""));
    MCX_ASSIGN_OR_RETURN(e.digest, field<std::string>(f, "digest", where, ""));
    MCX_ASSIGN_OR_RETURN(e.chunk_digests, field<std::vector<std::string>>(f, "chunk_digests", where, ""));
    out.push_back(std::move(e));
  }
  return out;
}

std::string commit_to_json(int64_t step, const std::string& manifest_sha256) {
  json j;
  j["format"] = kFormatName;
  j["step"] = step;
  j["manifest_sha256"] = manifest_sha256;
  return j.dump() + "\n";
}

absl::StatusOr<std::string> manifest_sha_from_commit(std::string_view text, const std::string& where) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return corrupt(where, "the commit marker is not a JSON object");
  return field<std::string>(j, "manifest_sha256", where, "the commit marker ");
}

}  // namespace mcx::checkpoint
