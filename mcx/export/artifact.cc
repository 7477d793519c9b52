#include "mcx/export/artifact.h"


#include <algorithm>
#include <cctype>
#include <set>

#include "absl/strings/escaping.h"

#include "mcx/core/error.h"
#include "mcx/export/program_codec.h"
#include "mcx/ir/fingerprint.h"
#include "mcx/ir/passes.h"
#include "mcx/ir/shape_rules.h"
#include "mcx/ir/str_util.h"
#include "mcx/ir/text.h"

namespace mcx::exporting {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;
using ir::internal::cat;
using ir::internal::join;

// ---- TreeSpec / ShardingSpec ----------------------------------------------------------------------

size_t TreeSpec::num_leaves() const {
  if (kind == Kind::kLeaf) return 1;
  size_t n = 0;
  for (const TreeSpec& c : children) n += c.num_leaves();
  return n;
}

std::string TreeSpec::to_string() const {
  std::vector<std::string> parts;
  for (size_t i = 0; i < children.size(); ++i) {
    parts.push_back(kind == Kind::kDict ? cat(i < keys.size() ? keys[i] : "?", ": ", children[i].to_string())
                                        : children[i].to_string());
  }
  switch (kind) {
    case Kind::kLeaf: return "*";
    case Kind::kList: return cat("list[", join(parts, ", "), "]");
    case Kind::kTuple: return cat("tuple(", join(parts, ", "), ")");
    case Kind::kDict: return cat("dict{", join(parts, ", "), "}");
    case Kind::kCustom: return cat(custom_name, "[\"", absl::CHexEscape(aux), "\"](", join(parts, ", "), ")");
  }
  return "?";
}

bool is_custom_node_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' || c == '-';
  });
}

bool TreeSpec::has_custom_node() const {
  return kind == Kind::kCustom ||
         std::any_of(children.begin(), children.end(), [](const TreeSpec& c) { return c.has_custom_node(); });
}

bool operator==(const TreeSpec& a, const TreeSpec& b) {
  return a.kind == b.kind && a.keys == b.keys && a.custom_name == b.custom_name && a.aux == b.aux &&
         a.children == b.children;
}

std::string ShardingSpec::to_string() const {
  if (unspecified) return "unspecified";
  std::vector<std::string> mesh, dims;
  for (size_t i = 0; i < mesh_axis_names.size(); ++i) {
    mesh.push_back(cat(mesh_axis_names[i], ": ", i < mesh_axis_sizes.size() ? mesh_axis_sizes[i] : -1));
  }
  for (const auto& axes : spec) {
    if (axes.empty()) {
      dims.push_back("None");
    } else if (axes.size() == 1) {
      dims.push_back(cat("'", axes[0], "'"));
    } else {
      std::vector<std::string> q;
      for (const auto& a : axes) q.push_back(cat("'", a, "'"));
      dims.push_back(cat("(", join(q, ", "), ")"));
    }
  }
  return cat("{", join(mesh, ", "), "} P(", join(dims, ", "), ")");
}

std::vector<std::string> Artifact::dim_vars() const {
  std::set<std::string> vars;
  for (const AbstractValue& v : in_avals) {
    for (const std::string& n : shape_variables(v.shape)) vars.insert(n);
  }
  return {vars.begin(), vars.end()};
}

bool Artifact::has_safety_check_disabled(const std::string& check) const {
  return std::find(disabled_safety_checks.begin(), disabled_safety_checks.end(), check) !=
         disabled_safety_checks.end();
}

std::vector<std::string> program_effects(const ir::Program& program) {
  // debug_print is the one op with a side effect (ir/op.h has_side_effects), so any effect is a print.
  return ir::EffectScan().has_effects(program) ? std::vector<std::string>{"debug_print"} : std::vector<std::string>{};
}

std::string producer_string() { return "mcx 0.1.0"; }

Artifact make_artifact(ir::Program program, std::string fun_name, int64_t creation_time_unix_ms) {
  Artifact a;
  a.opset_version = ir::kOpsetVersion;
  a.producer = producer_string();
  a.creation_time_unix_ms = creation_time_unix_ms;
  a.fun_name = std::move(fun_name);
  a.in_tree.kind = TreeSpec::Kind::kTuple;
  a.in_tree.children.resize(program.params.size());
  for (size_t i = 0; i < program.params.size(); ++i) a.in_names.push_back(cat("args[", i, "]"));
  a.in_avals = program.params;
  a.out_avals = program.result_types();
  a.out_tree.kind = TreeSpec::Kind::kTuple;
  a.out_tree.children.resize(a.out_avals.size());
  a.in_shardings.resize(a.in_avals.size());
  a.out_shardings.resize(a.out_avals.size());
  a.constraints = program.scope.constraints();
  a.ordered_effects = program_effects(program);
  a.program = std::move(program);
  return a;
}

// ---- validation -----------------------------------------------------------------------------------

namespace {
absl::Status validate_impl(const Artifact& a, bool verify_program);
}

absl::Status validate(const Artifact& a) { return validate_impl(a, true); }

namespace {
absl::Status validate_impl(const Artifact& a, bool verify_program) {
  auto fail = [&](const auto&... x) { return absl::InvalidArgumentError(cat("[export] '", a.fun_name, "': ", x...)); };
  if (a.opset_version < kMinOpsetVersion || a.opset_version > static_cast<uint32_t>(ir::kOpsetVersion)) {
    return fail("opset version ", a.opset_version, " is not supported (this build implements opsets ",
                kMinOpsetVersion, "..", ir::kOpsetVersion, ")");
  }
  if (a.calling_convention_version < kMinCallingConventionVersion ||
      a.calling_convention_version > kCallingConventionVersion) {
    return fail("calling convention version ", a.calling_convention_version, " is not supported (this build ",
                "implements ", kMinCallingConventionVersion, "..", kCallingConventionVersion, ")");
  }
  const ir::Program& p = a.program;
  if (const int need = ir::required_opset(p); need > static_cast<int>(a.opset_version)) {
    std::string_view newest;
    for (const ir::Instr& in : p.instrs)
      if (ir::op_info(in.kind).opset == need) {
        newest = ir::op_name(in.kind);
        break;
      }
    return fail("the program uses ops of opset ", need, " (", newest, ") but the artifact declares opset ",
                a.opset_version);
  }
  if (a.in_avals.size() != static_cast<size_t>(p.num_params())) {
    return fail(a.in_avals.size(), " input types for a program with ", p.num_params(), " parameters");
  }
  for (size_t i = 0; i < a.in_avals.size(); ++i) {
    if (a.in_avals[i] != p.params[i]) {
      return fail("input ", i, " type ", a.in_avals[i].to_string(), " differs from parameter ", p.params[i].to_string());
    }
  }
  std::vector<AbstractValue> results = p.result_types();
  if (a.out_avals != results) return fail("output types differ from the program's result types");
  if (a.in_names.size() != a.in_avals.size()) return fail(a.in_names.size(), " input names for ", a.in_avals.size(), " inputs");
  if (a.in_tree.num_leaves() != a.in_avals.size()) {
    return fail("input tree ", a.in_tree.to_string(), " has ", a.in_tree.num_leaves(), " leaves for ", a.in_avals.size(), " inputs");
  }
  if (a.out_tree.num_leaves() != a.out_avals.size()) {
    return fail("output tree ", a.out_tree.to_string(), " has ", a.out_tree.num_leaves(), " leaves for ", a.out_avals.size(), " outputs");
  }
  if (a.in_shardings.size() != a.in_avals.size() || a.out_shardings.size() != a.out_avals.size()) {
    return fail("expected one sharding per input and output, found ", a.in_shardings.size(), " and ", a.out_shardings.size());
  }
  for (const auto* shardings : {&a.in_shardings, &a.out_shardings}) {
    for (size_t i = 0; i < shardings->size(); ++i) {
      const ShardingSpec& s = (*shardings)[i];
      const auto& avals = shardings == &a.in_shardings ? a.in_avals : a.out_avals;
      if (s.unspecified) continue;
      if (s.mesh_axis_sizes.size() != s.mesh_axis_names.size()) return fail("sharding ", i, ": mesh names and sizes differ in count");
      if (s.spec.size() > static_cast<size_t>(avals[i].rank())) {
        return fail("sharding ", i, " ", s.to_string(), " has more entries than the rank of ", avals[i].to_string());
      }
      int64_t devices = 1;
      for (int64_t n : s.mesh_axis_sizes) {
        if (n < 1 || n > static_cast<int64_t>(Limits{}.max_devices)) return fail("sharding ", i, ": mesh axis size ", n, " out of range");
        devices *= n;
        if (devices > static_cast<int64_t>(Limits{}.max_devices)) return fail("sharding ", i, ": mesh too large");
      }
      for (const auto& axes : s.spec) {
        for (const auto& ax : axes) {
          if (std::find(s.mesh_axis_names.begin(), s.mesh_axis_names.end(), ax) == s.mesh_axis_names.end()) {
            return fail("sharding ", i, " ", s.to_string(), " names mesh axis '", ax, "' that the mesh lacks");
          }
        }
      }
      if (devices != a.nr_devices) {
        return fail("sharding ", i, " ", s.to_string(), " spans ", devices, " devices, but nr_devices is ", a.nr_devices);
      }
    }
  }
  if (a.nr_devices < 1) return fail("nr_devices must be >= 1, found ", a.nr_devices);
  if (a.platforms.empty()) return fail("no platforms");
  if (a.constraints != p.scope.constraints()) return fail("constraints differ from the program's scope");
  std::set<std::string> in_vars;
  for (const auto& v : a.dim_vars()) in_vars.insert(v);
  for (const AbstractValue& v : a.out_avals) {
    for (const std::string& n : shape_variables(v.shape)) {
      if (!in_vars.count(n)) return fail("output ", v.to_string(), " uses dimension variable '", n, "' that no input has");
    }
  }
  for (int w : a.vjp_wrt) {
    if (w < 0 || w >= static_cast<int>(a.in_avals.size())) return fail("vjp_wrt index ", w, " out of range");
  }
  if (a.ordered_effects != program_effects(p)) {
    return fail("ordered effects [", join(a.ordered_effects, ", "), "] differ from the program's [",
                join(program_effects(p), ", "), "]");
  }
  if (!a.unordered_effects.empty()) return fail("unknown unordered effects [", join(a.unordered_effects, ", "), "]");
  for (size_t i = 0; i < a.donated_inputs.size(); ++i) {
    const int d = a.donated_inputs[i];
    if (d < 0 || d >= static_cast<int>(a.in_avals.size())) return fail("donated input ", d, " out of range");
    if (i > 0 && d <= a.donated_inputs[i - 1]) return fail("donated inputs are not ascending");
  }
  if (verify_program) {
    if (absl::Status s = ir::verify(p); !s.ok()) return fail("program does not verify: ", s.message());
  }
  if (a.vjp) MCX_RETURN_IF_ERROR(validate_impl(*a.vjp, verify_program));
  return absl::OkStatus();
}
}  // namespace

// ---- serialization --------------------------------------------------------------------------------

namespace {

Offset<fb::TreeDef> encode_tree(FlatBufferBuilder& fbb, const TreeSpec& t) {
  std::vector<Offset<fb::TreeNode>> nodes;
  auto visit = [&](auto& self, const TreeSpec& n) -> void {
    auto keys = n.kind == TreeSpec::Kind::kDict ? fbb.CreateVectorOfStrings(n.keys) : 0;
    const bool custom = n.kind == TreeSpec::Kind::kCustom;
    auto name = custom ? fbb.CreateString(n.custom_name) : 0;
    auto aux = custom ? fbb.CreateVector(reinterpret_cast<const uint8_t*>(n.aux.data()), n.aux.size()) : 0;
    nodes.push_back(fb::CreateTreeNode(fbb, static_cast<fb::TreeKind>(n.kind),
                                       static_cast<uint32_t>(n.children.size()), keys, name, aux));
    for (const TreeSpec& c : n.children) self(self, c);
  };
  visit(visit, t);
  return fb::CreateTreeDef(fbb, fbb.CreateVector(nodes));
}

Offset<fb::Sharding> encode_sharding(FlatBufferBuilder& fbb, const ShardingSpec& s) {
  std::vector<Offset<fb::PartitionDim>> dims;
  for (const auto& axes : s.spec) dims.push_back(fb::CreatePartitionDim(fbb, fbb.CreateVectorOfStrings(axes)));
  return fb::CreateSharding(fbb, s.unspecified, fbb.CreateVectorOfStrings(s.mesh_axis_names),
                            fbb.CreateVector(s.mesh_axis_sizes), fbb.CreateVector(dims));
}

Offset<fb::Exported> encode(FlatBufferBuilder& fbb, const Artifact& a) {
  Offset<fb::Exported> vjp = a.vjp ? encode(fbb, *a.vjp) : 0;
  std::vector<Offset<fb::AbstractValue>> in_avals, out_avals;
  for (const auto& v : a.in_avals) in_avals.push_back(codec::encode_aval(fbb, v));
  for (const auto& v : a.out_avals) out_avals.push_back(codec::encode_aval(fbb, v));
  std::vector<Offset<fb::Sharding>> in_sh, out_sh;
  for (const auto& s : a.in_shardings) in_sh.push_back(encode_sharding(fbb, s));
  for (const auto& s : a.out_shardings) out_sh.push_back(encode_sharding(fbb, s));
  auto producer = fbb.CreateString(a.producer);
  auto fun_name = fbb.CreateString(a.fun_name);
  auto in_tree = encode_tree(fbb, a.in_tree);
  auto out_tree = encode_tree(fbb, a.out_tree);
  auto in_names = fbb.CreateVectorOfStrings(a.in_names);
  auto in_avals_off = fbb.CreateVector(in_avals);
  auto out_avals_off = fbb.CreateVector(out_avals);
  auto in_sh_off = fbb.CreateVector(in_sh);
  auto out_sh_off = fbb.CreateVector(out_sh);
  auto platforms = fbb.CreateVectorOfStrings(a.platforms);
  auto constraints = fbb.CreateVectorOfStrings(a.constraints);
  auto disabled = fbb.CreateVectorOfStrings(a.disabled_safety_checks);
  auto program = codec::encode_program(fbb, a.program);
  auto wrt = fbb.CreateVector(a.vjp_wrt);
  // Absent when empty, so artifacts without donation are byte for byte what earlier builds wrote.
  Offset<flatbuffers::Vector<int32_t>> donated = a.donated_inputs.empty() ? 0 : fbb.CreateVector(a.donated_inputs);
  auto ordered = a.ordered_effects.empty() ? 0 : fbb.CreateVectorOfStrings(a.ordered_effects);
  auto unordered = a.unordered_effects.empty() ? 0 : fbb.CreateVectorOfStrings(a.unordered_effects);
  // A reader that does not know custom tree nodes must refuse the artifact rather than misread its signature.
  const uint32_t min_reader_version =
      a.in_tree.has_custom_node() || a.out_tree.has_custom_node()
          ? std::max(a.min_reader_version, kCustomTreeNodesVersion) : a.min_reader_version;
  return fb::CreateExported(fbb, a.format_version, min_reader_version, a.opset_version,
                            a.calling_convention_version, producer, a.creation_time_unix_ms, fun_name, in_tree,
                            out_tree, in_names, in_avals_off, out_avals_off, in_sh_off, out_sh_off, a.nr_devices,
                            platforms, constraints, disabled, program, vjp, wrt, donated, ordered, unordered);
}

absl::Status fail(const auto&... x) { return absl::InvalidArgumentError(cat("[deserialize] ", x...)); }

absl::StatusOr<TreeSpec> decode_tree(const fb::TreeDef* t, const Limits& limits, const char* what) {
  if (t == nullptr || t->nodes() == nullptr || t->nodes()->size() == 0) return fail(what, " is missing");
  const auto& nodes = *t->nodes();
  if (nodes.size() > static_cast<uint32_t>(limits.max_tree_nodes)) return fail(what, " has too many nodes");
  size_t pos = 0;
  // Iterative pre-order decoding (no recursion on attacker-controlled depth).
  struct Frame { TreeSpec* node; uint32_t remaining; };
  TreeSpec root;
  std::vector<Frame> stack;
  auto read = [&](TreeSpec& into) -> absl::Status {
    if (pos >= nodes.size()) return fail(what, " ends early (", nodes.size(), " nodes)");
    const fb::TreeNode* n = nodes.Get(static_cast<uint32_t>(pos++));
    auto k = static_cast<uint8_t>(n->kind());
    if (k > 4) return fail(what, ": unknown node kind ", static_cast<int>(k));
    into.kind = static_cast<TreeSpec::Kind>(k);
    uint32_t nc = n->num_children();
    if (into.kind == TreeSpec::Kind::kLeaf && nc != 0) return fail(what, ": a leaf with children");
    if (nc > nodes.size() - pos) return fail(what, ": node claims ", nc, " children, only ", nodes.size() - pos, " nodes left");
    if (into.kind == TreeSpec::Kind::kDict) {
      if (n->keys() == nullptr || n->keys()->size() != nc) return fail(what, ": dict keys do not match its children");
      for (const auto* key : *n->keys()) into.keys.push_back(key->str());
    }
    if (into.kind == TreeSpec::Kind::kCustom) {
      if (n->custom_name() == nullptr || n->custom_name()->size() > limits.max_custom_node_name ||
          !is_custom_node_name(std::string_view(n->custom_name()->c_str(), n->custom_name()->size()))) {
        return fail(what, ": a custom node's name must be 1 to ", limits.max_custom_node_name,
                    " letters, digits and '._:-'");
      }
      if (n->aux() != nullptr && n->aux()->size() > limits.max_custom_node_aux) {
        return fail(what, ": custom node ", n->custom_name()->str(), " has ", n->aux()->size(),
                    " bytes of auxiliary data (limit ", limits.max_custom_node_aux, ")");
      }
      into.custom_name = n->custom_name()->str();
      if (n->aux() != nullptr) into.aux.assign(reinterpret_cast<const char*>(n->aux()->data()), n->aux()->size());
    }
    into.children.resize(nc);
    if (nc > 0) stack.push_back({&into, nc});
    return absl::OkStatus();
  };
  MCX_RETURN_IF_ERROR(read(root));
  while (!stack.empty()) {
    Frame& f = stack.back();
    TreeSpec* parent = f.node;
    uint32_t index = static_cast<uint32_t>(parent->children.size()) - f.remaining;
    if (--f.remaining == 0) stack.pop_back();
    MCX_RETURN_IF_ERROR(read(parent->children[index]));
  }
  if (pos != nodes.size()) return fail(what, " has ", nodes.size() - pos, " unused nodes");
  return root;
}

absl::StatusOr<ShardingSpec> decode_sharding(const fb::Sharding* s) {
  ShardingSpec out;
  if (s == nullptr) return out;
  out.unspecified = s->unspecified();
  if (s->mesh_axis_names()) for (const auto* n : *s->mesh_axis_names()) out.mesh_axis_names.push_back(n->str());
  out.mesh_axis_sizes = codec::read_int64s(s->mesh_axis_sizes());
  if (s->spec()) {
    for (const fb::PartitionDim* d : *s->spec()) {
      std::vector<std::string> axes;
      if (d->axes()) for (const auto* n : *d->axes()) axes.push_back(n->str());
      out.spec.push_back(std::move(axes));
    }
  }
  return out;
}

std::vector<std::string> strings(const flatbuffers::Vector<Offset<flatbuffers::String>>* v) {
  std::vector<std::string> out;
  if (v != nullptr) for (const auto* s : *v) out.push_back(s->str());
  return out;
}

absl::StatusOr<Artifact> decode(const fb::Exported* e, const Limits& limits, int depth) {
  if (depth > limits.max_vjp_depth) return fail("VJP nesting deeper than the limit ", limits.max_vjp_depth);
  Artifact a;
  a.format_version = e->format_version();
  a.min_reader_version = e->min_reader_version();
  if (a.min_reader_version > kFormatVersion) {
    return fail("the artifact needs a reader of format version >= ", a.min_reader_version,
                "; this reader implements format version ", kFormatVersion, " (written by ",
                e->producer() ? e->producer()->str() : "an unknown producer", " with format version ",
                a.format_version, ")");
  }
  if (a.min_reader_version == 0 || a.format_version < a.min_reader_version) {
    return fail("inconsistent versions: format version ", a.format_version, ", min_reader_version ",
                a.min_reader_version);
  }
  a.opset_version = e->opset_version();
  a.calling_convention_version = e->calling_convention_version();
  if (a.opset_version < kMinOpsetVersion || a.opset_version > static_cast<uint32_t>(ir::kOpsetVersion)) {
    return fail("the artifact uses opset version ", a.opset_version, "; this reader implements opsets ",
                kMinOpsetVersion, "..", ir::kOpsetVersion);
  }
  if (a.calling_convention_version < kMinCallingConventionVersion ||
      a.calling_convention_version > kCallingConventionVersion) {
    return fail("the artifact uses calling convention version ", a.calling_convention_version,
                "; this reader implements ", kMinCallingConventionVersion, "..", kCallingConventionVersion);
  }
  if (e->producer()) a.producer = e->producer()->str();
  a.creation_time_unix_ms = e->creation_time_unix_ms();
  if (e->fun_name()) a.fun_name = e->fun_name()->str();
  MCX_ASSIGN_OR_RETURN(a.in_tree, decode_tree(e->in_tree(), limits, "input tree"));
  MCX_ASSIGN_OR_RETURN(a.out_tree, decode_tree(e->out_tree(), limits, "output tree"));
  a.in_names = strings(e->in_names());
  if (e->in_avals()) {
    for (uint32_t i = 0; i < e->in_avals()->size(); ++i) {
      MCX_ASSIGN_OR_RETURN(AbstractValue v, codec::decode_aval(e->in_avals()->Get(i), limits, cat("input ", i)));
      a.in_avals.push_back(std::move(v));
    }
  }
  if (e->out_avals()) {
    for (uint32_t i = 0; i < e->out_avals()->size(); ++i) {
      MCX_ASSIGN_OR_RETURN(AbstractValue v, codec::decode_aval(e->out_avals()->Get(i), limits, cat("output ", i)));
      a.out_avals.push_back(std::move(v));
    }
  }
  if (e->in_shardings()) {
    for (const auto* s : *e->in_shardings()) {
      MCX_ASSIGN_OR_RETURN(ShardingSpec sh, decode_sharding(s));
      a.in_shardings.push_back(std::move(sh));
    }
  }
  if (e->out_shardings()) {
    for (const auto* s : *e->out_shardings()) {
      MCX_ASSIGN_OR_RETURN(ShardingSpec sh, decode_sharding(s));
      a.out_shardings.push_back(std::move(sh));
    }
  }
  a.nr_devices = e->nr_devices();
  if (a.nr_devices > limits.max_devices) return fail("nr_devices ", a.nr_devices, " exceeds the limit ", limits.max_devices);
  a.platforms = strings(e->platforms());
  a.constraints = strings(e->constraints());
  for (const auto& c : a.constraints) MCX_RETURN_IF_ERROR(codec::check_dim_text(c, limits, "constraint"));
  a.disabled_safety_checks = strings(e->disabled_safety_checks());
  MCX_ASSIGN_OR_RETURN(a.program, codec::decode_program(e->program(), limits));
  if (e->vjp_wrt()) a.vjp_wrt.assign(e->vjp_wrt()->begin(), e->vjp_wrt()->end());
  if (e->donated_inputs()) a.donated_inputs.assign(e->donated_inputs()->begin(), e->donated_inputs()->end());
  // Written by builds that record effects; derived from the program for artifacts of earlier ones.
  a.ordered_effects = e->ordered_effects() ? strings(e->ordered_effects()) : program_effects(a.program);
  a.unordered_effects = strings(e->unordered_effects());
  if (e->vjp() != nullptr) {
    MCX_ASSIGN_OR_RETURN(Artifact vjp, decode(e->vjp(), limits, depth + 1));
    a.vjp = std::make_shared<const Artifact>(std::move(vjp));
  }
  // decode_program already ran ir::verify on every program.
  if (absl::Status s = validate_impl(a, /*verify_program=*/false); !s.ok()) {
    return fail("inconsistent artifact: ", s.message());
  }
  return a;
}

}  // namespace

absl::StatusOr<std::string> serialize(const Artifact& artifact) {
  MCX_RETURN_IF_ERROR(validate(artifact));
  FlatBufferBuilder fbb(1024);
  fb::FinishSizePrefixedExportedBuffer(fbb, encode(fbb, artifact));
  return std::string(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

absl::StatusOr<Artifact> deserialize(std::span<const uint8_t> bytes, const Limits& limits) {
  if (bytes.size() > limits.max_bytes) return fail("artifact of ", bytes.size(), " bytes exceeds the limit ", limits.max_bytes);
  // Layout: 4-byte little-endian size of the rest, root offset, identifier "MCXE", then the tables.
  if (bytes.size() < 12 || !fb::SizePrefixedExportedBufferHasIdentifier(bytes.data())) {
    return fail("not an mcx export artifact (", bytes.size(), " bytes, expected the identifier '",
                fb::ExportedIdentifier(), "' at offset 8)");
  }
  const uint64_t declared = flatbuffers::ReadScalar<flatbuffers::uoffset_t>(bytes.data());
  if (declared + sizeof(flatbuffers::uoffset_t) != bytes.size()) {
    return fail("the artifact is truncated or has trailing bytes: its header declares ",
                declared + sizeof(flatbuffers::uoffset_t), " bytes, found ", bytes.size());
  }
  // FlatBuffers requires the root offset to be aligned; copy when the caller's bytes are not.
  std::vector<uint8_t> aligned;
  const uint8_t* data = bytes.data();
  if (reinterpret_cast<uintptr_t>(data) % 8 != 0) {
    aligned.assign(bytes.begin(), bytes.end());
    data = aligned.data();
  }
  // Depth: each nested VJP adds a few table levels; tables bounded by the byte count.
  flatbuffers::Verifier verifier(data, bytes.size(), /*max_depth=*/16 + 8 * limits.max_vjp_depth,
                                 /*max_tables=*/static_cast<flatbuffers::uoffset_t>(std::min<size_t>(bytes.size(), 1u << 30)));
  if (!fb::VerifySizePrefixedExportedBuffer(verifier)) {
    return fail("the artifact is corrupt or truncated (", bytes.size(), " bytes fail the FlatBuffers verifier)");
  }
  return decode(fb::GetSizePrefixedExported(data), limits, 0);
}

absl::StatusOr<Artifact> deserialize(std::string_view bytes, const Limits& limits) {
  return deserialize(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), limits);
}

// ---- describe -------------------------------------------------------------------------------------

std::string describe(const Artifact& a) {
  std::string out;
  auto line = [&](const auto&... x) { out += cat(x..., "\n"); };
  line("function: ", a.fun_name);
  line("signature: ", a.in_tree.to_string(), " -> ", a.out_tree.to_string());
  // Robust to unvalidated artifacts: missing names/shardings print as "?".
  auto at = [](const auto& v, size_t i) { return i < v.size() ? v[i].to_string() : std::string("?"); };
  for (size_t i = 0; i < a.in_avals.size(); ++i) {
    line("  in  ", i, " ", i < a.in_names.size() ? a.in_names[i] : "?", ": ", a.in_avals[i].to_string(),
         "  sharding ", at(a.in_shardings, i));
  }
  for (size_t i = 0; i < a.out_avals.size(); ++i) {
    line("  out ", i, ": ", a.out_avals[i].to_string(), "  sharding ", at(a.out_shardings, i));
  }
  line("dimension variables: ", a.dim_vars().empty() ? "(none)" : join(a.dim_vars(), ", "));
  line("constraints: ", a.constraints.empty() ? "(none)" : join(a.constraints, "; "));
  line("platforms: ", join(a.platforms, ", "), "   devices: ", a.nr_devices);
  line("disabled safety checks: ", a.disabled_safety_checks.empty() ? "(none)" : join(a.disabled_safety_checks, ", "));
  line("format version: ", a.format_version, " (min reader ", a.min_reader_version, ")   opset: ", a.opset_version,
       "   calling convention: ", a.calling_convention_version);
  line("producer: ", a.producer, "   created (unix ms): ", a.creation_time_unix_ms);
  line("program: ", a.program.instrs.size(), " instructions, fingerprint ", ir::fingerprint_hex(a.program));
  line("vjp: ", a.vjp ? cat("yes (cotangents for inputs ", join(a.vjp_wrt, ", "), ")") : std::string("no"));
  line("donated inputs: ", a.donated_inputs.empty() ? std::string("(none)") : join(a.donated_inputs, ", "));
  line("effects: ", a.ordered_effects.empty() ? std::string("(none)") : cat("ordered ", join(a.ordered_effects, ", ")));
  return out;
}

}  // namespace mcx::exporting
