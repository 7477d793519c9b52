// Serialised CPU executables (executable.h serialize/deserialize).
//
// Format (version 3), little-endian, ByteWriter primitives (core/byte_io.h):
//   magic "MCXCPUEX", u64 version, [the body below], SHA-256 of everything before it (32 bytes).
// Body:
//   str target (codegen::target_description() when a kernel is generated, else ""),
//   str program name, str canonical encoding of the plan's program,
//   u64 has_collectives,
//   groups:  count, each: ints dims, ints leaf dtypes, nodes (count; u64 kind, u64 dtype, u64 operand dtype,
//            ints args), ints group outputs, ints leaves, ints output values, ints in-place leaves,
//            i64 kernel object index (-1: interpreter)
//   regions: count, each: i64 rows, i64 max block rows, steps, local (pairs), escape slots (pairs),
//            ints escaping, steps post views, ints reads, i64 local row bytes,
//            i64 row kernel object index (-1: none; its RowProgram is derived again from the region at load)
//   steps
//   objects: count, each str (a relocatable object; shared by groups with one signature)
// A step: u64 kind, i64 value, i64 group, i64 region, ints sibling values, ints release, and for a
// control-flow step the serialised executables of its regions (count, str each). An op step's attributes are
// not written: they are the attributes of its instruction in the program, parsed at load (parse_step_attrs),
// so the program stays their one source.
//
// The loader verifies the checksum first, so damaged bytes (a torn write, a flipped bit, wherever the bytes
// were kept) are an error, never a plan that runs wrong. It then checks every index against the program
// (values, groups, regions, slots, objects) and that each fused group's leaves and outputs have the dtypes and
// dims its nodes say. It does not re-derive the schedule: bytes crafted to pass the checksum with a plan that
// does not fit its program are outside what it defends against (the cache directory is trusted input,
// docs/security.md).
#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/backend/cpu/codegen/row_kernel.h"
#include "mcx/backend/cpu/executable_plan.h"
#include "mcx/core/byte_io.h"
#include "mcx/core/error.h"
#include "mcx/core/hash.h"
#include "mcx/ir/fingerprint.h"

namespace mcx::cpu {
namespace {

using Plan = CpuExecutable::Plan;
using ir::ValueId;

constexpr std::string_view kMagic = "MCXCPUEX";
constexpr uint64_t kFormatVersion = 3;
constexpr size_t kChecksumBytes = 32;  // SHA-256

class PlanWriter : public ByteWriter {
 public:
  explicit PlanWriter(std::string& out) : ByteWriter(out) {}

  absl::Status steps(const std::vector<Plan::Step>& steps) {
    u64(steps.size());
    for (const Plan::Step& st : steps) MCX_RETURN_IF_ERROR(step(st));
    return absl::OkStatus();
  }
  void pairs(const std::map<ValueId, int>& m) {
    u64(m.size());
    for (const auto& [k, v] : m) {
      i64(k);
      i64(v);
    }
  }
  // Index of k's object in the table, adding it the first time.
  int64_t object(const codegen::GeneratedKernel& k) {
    auto [it, inserted] = object_index_.emplace(k.symbol, static_cast<int64_t>(objects_.size()));
    if (inserted) objects_.push_back(&k.object);
    return it->second;
  }
  void objects() {
    u64(objects_.size());
    for (const std::string* o : objects_) str(*o);
  }

 private:
  absl::Status step(const Plan::Step& st) {
    u64(static_cast<uint64_t>(st.kind));
    i64(st.value);
    i64(st.group);
    i64(st.region);
    ints(std::span<const ValueId>(st.sibling_values));
    ints(std::span<const ValueId>(st.release));
    if (st.kind != Plan::StepKind::kControlFlow) return absl::OkStatus();
    const auto& regions = st.control_flow->regions();
    u64(regions.size());
    for (const auto& r : regions) {
      MCX_ASSIGN_OR_RETURN(std::string bytes, r->serialize());
      str(bytes);
    }
    return absl::OkStatus();
  }

  std::map<std::string, int64_t> object_index_;
  std::vector<const std::string*> objects_;
};

class PlanReader : public ByteReader {
 public:
  PlanReader(std::string_view in, Plan& plan) : ByteReader(in, "load_executable"), plan_(plan) {}

  absl::StatusOr<ValueId> value() {
    MCX_ASSIGN_OR_RETURN(int64_t v, i64());
    if (v < 0 || v >= plan_.program.num_values()) {
      return error(absl::StrCat("a value of the program (", plan_.program.num_values(), " values), found ", v));
    }
    return static_cast<ValueId>(v);
  }
  absl::StatusOr<std::vector<ValueId>> values(int64_t lo = 0) {
    MCX_ASSIGN_OR_RETURN(std::vector<int64_t> v, ints(lo, plan_.program.num_values() - 1));
    return std::vector<ValueId>(v.begin(), v.end());
  }
  absl::StatusOr<int64_t> index(int64_t size, std::string_view what, int64_t lo = 0) {
    MCX_ASSIGN_OR_RETURN(int64_t i, i64());
    if (i < lo || i >= size) {
      return error(absl::StrCat("a ", std::string(what), " index in [", lo, ", ", size, "), found ", i));
    }
    return i;
  }
  absl::StatusOr<DType> dtype() {
    MCX_ASSIGN_OR_RETURN(int64_t t, index(kNumDTypes, "dtype"));
    return static_cast<DType>(t);
  }
  // (value, slot) pairs; the caller bounds the slots.
  absl::StatusOr<std::map<ValueId, int>> pairs() {
    MCX_ASSIGN_OR_RETURN(uint64_t n, count(16));
    std::map<ValueId, int> m;
    for (uint64_t i = 0; i < n; ++i) {
      MCX_ASSIGN_OR_RETURN(ValueId k, value());
      MCX_ASSIGN_OR_RETURN(int64_t v, index(INT32_MAX, "slot"));
      m[k] = static_cast<int>(v);
    }
    return m;
  }

  absl::StatusOr<std::vector<Plan::Step>> steps() {
    MCX_ASSIGN_OR_RETURN(uint64_t n, count(48));
    std::vector<Plan::Step> out(n);
    for (Plan::Step& st : out) MCX_RETURN_IF_ERROR(step(st));
    return out;
  }

 private:
  absl::Status step(Plan::Step& st) {
    const ir::Program& p = plan_.program;
    MCX_ASSIGN_OR_RETURN(int64_t kind, index(Plan::kNumStepKinds, "step kind"));
    st.kind = static_cast<Plan::StepKind>(kind);
    MCX_ASSIGN_OR_RETURN(int64_t v, i64());
    MCX_ASSIGN_OR_RETURN(st.group, index(static_cast<int64_t>(plan_.groups.size()), "group", -1));
    MCX_ASSIGN_OR_RETURN(st.region, index(static_cast<int64_t>(plan_.regions.size()), "row region", -1));
    MCX_ASSIGN_OR_RETURN(st.sibling_values, values(-1));
    MCX_ASSIGN_OR_RETURN(st.release, values());
    const bool needs_value = st.kind == Plan::StepKind::kView || st.kind == Plan::StepKind::kOp ||
                             st.kind == Plan::StepKind::kControlFlow;
    if (needs_value && (v < p.num_params() || v >= p.num_values())) {
      return error(absl::StrCat("an instruction's value for a step of kind ", kind, ", found ", v));
    }
    if ((st.kind == Plan::StepKind::kFused) != (st.group >= 0)) return error("a group exactly on fused steps");
    if ((st.kind == Plan::StepKind::kRowRegion) != (st.region >= 0)) return error("a region exactly on region steps");
    st.value = static_cast<ValueId>(v);
    if (st.kind == Plan::StepKind::kView || st.kind == Plan::StepKind::kOp) {
      absl::StatusOr<StepAttrs> attrs = parse_step_attrs(p.defining_instr(st.value));
      if (!attrs.ok()) return error(absl::StrCat("a step its instruction fits (", std::string(attrs.status().message()), ")"));
      st.attrs = *std::move(attrs);
    }
    if (st.kind != Plan::StepKind::kControlFlow) return absl::OkStatus();
    const ir::Instr& in = p.defining_instr(st.value);
    if (!ir::has_regions(in.kind)) return error("a control-flow instruction for a control-flow step");
    MCX_ASSIGN_OR_RETURN(uint64_t num_regions, count(8));
    std::vector<std::string_view> region_bytes;
    for (uint64_t i = 0; i < num_regions; ++i) {
      MCX_ASSIGN_OR_RETURN(std::string_view b, str());
      region_bytes.push_back(b);
    }
    std::vector<AbstractValue> operand_types;
    for (ValueId o : in.operands) operand_types.push_back(p.type(o));
    auto load_region = [&](int i, const ir::Program&) -> absl::StatusOr<std::shared_ptr<const CpuExecutable>> {
      if (i >= static_cast<int>(region_bytes.size())) {
        return absl::InvalidArgumentError(absl::StrCat("[load_executable] region ", i, " was not stored"));
      }
      return CpuExecutable::deserialize(region_bytes[i]);
    };
    absl::StatusOr<std::shared_ptr<const ControlFlowRunner>> runner =
        ControlFlowRunner::compile(in, operand_types, load_region);
    if (!runner.ok()) return runner.status();
    st.control_flow = *std::move(runner);
    if (st.sibling_values.size() != static_cast<size_t>(st.control_flow->num_results())) {
      return error(absl::StrCat(st.control_flow->num_results(), " sibling values, found ", st.sibling_values.size()));
    }
    return absl::OkStatus();
  }

  Plan& plan_;
};

// The group's own consistency and its fit with the program: slots, dtypes and dims.
absl::Status check_group(const Plan& plan, const Plan::GroupPlan& gp, size_t num_objects, int64_t object) {
  const ir::Program& p = plan.program;
  const FusedGroup& g = gp.group;
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("[load_executable] a fused group does not fit its program: ", what));
  };
  if (gp.leaves.size() != g.leaf_dtypes.size()) return bad("leaf count");
  // In-place decisions are made for the groups of top-level steps only (row regions write into blocks).
  if (g.outputs.size() != gp.outputs.size() || (!gp.inplace_leaf.empty() && gp.inplace_leaf.size() != gp.outputs.size())) {
    return bad("output count");
  }
  if (object < -1 || object >= static_cast<int64_t>(num_objects)) return bad("kernel object index");
  for (size_t l = 0; l < gp.leaves.size(); ++l) {
    if (p.type(gp.leaves[l]).dtype != g.leaf_dtypes[l]) return bad(absl::StrCat("dtype of leaf ", l));
  }
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    for (int a : g.nodes[k].args) {
      if (a < 0 || a >= static_cast<int>(gp.leaves.size() + k)) return bad(absl::StrCat("argument of node ", k));
    }
    if (!elementwise_supported(g.nodes[k].kind, g.nodes[k].dtype, g.nodes[k].operand_dtype)) {
      return bad(absl::StrCat("op of node ", k));
    }
  }
  for (size_t j = 0; j < gp.outputs.size(); ++j) {
    const int node = g.outputs[j];
    if (node < 0 || node >= static_cast<int>(g.nodes.size())) return bad(absl::StrCat("node of output ", j));
    const ValueId v = gp.outputs[j];
    if (p.type(v).dtype != g.nodes[node].dtype || plan.dims[v] != g.dims) return bad(absl::StrCat("type of output ", j));
    const int l = gp.inplace_leaf.empty() ? -1 : gp.inplace_leaf[j];
    if (l < -1 || l >= static_cast<int>(gp.leaves.size())) return bad(absl::StrCat("in-place leaf of output ", j));
  }
  return absl::OkStatus();
}

}  // namespace

#ifndef MCX_PLANNER_SOURCE_DIGEST
#define MCX_PLANNER_SOURCE_DIGEST "unknown"
#endif

std::string CpuExecutable::format_description() {
  return absl::StrCat("cpu executable format ", kFormatVersion, "; planner ", MCX_PLANNER_SOURCE_DIGEST);
}

absl::StatusOr<std::string> CpuExecutable::serialize() const {
  const Plan& plan = *plan_;
  std::string out;
  PlanWriter w(out);
  w.bytes(kMagic.data(), kMagic.size());
  w.u64(kFormatVersion);
  const bool any_kernel =
      std::any_of(plan.groups.begin(), plan.groups.end(),
                  [](const Plan::GroupPlan& g) { return g.group.kernel != nullptr; }) ||
      std::any_of(plan.regions.begin(), plan.regions.end(), [](const Plan::RowRegion& rg) { return rg.row_kernel != nullptr; });
  w.str(any_kernel ? codegen::target_description() : "");
  w.str(plan.program.name);
  w.str(ir::canonical_encoding(plan.program));
  w.u64(plan.has_collectives ? 1 : 0);
  w.u64(plan.groups.size());
  for (const Plan::GroupPlan& gp : plan.groups) {
    const FusedGroup& g = gp.group;
    w.ints(std::span<const int64_t>(g.dims));
    w.u64(g.leaf_dtypes.size());
    for (DType t : g.leaf_dtypes) w.u64(static_cast<uint64_t>(t));
    w.u64(g.nodes.size());
    for (const FusedNode& n : g.nodes) {
      w.u64(static_cast<uint64_t>(n.kind));
      w.u64(static_cast<uint64_t>(n.dtype));
      w.u64(static_cast<uint64_t>(n.operand_dtype));
      w.ints(std::span<const int>(n.args));
    }
    w.ints(std::span<const int>(g.outputs));
    w.ints(std::span<const ValueId>(gp.leaves));
    w.ints(std::span<const ValueId>(gp.outputs));
    w.ints(std::span<const int>(gp.inplace_leaf));
    w.i64(g.kernel ? w.object(*g.kernel) : -1);
  }
  w.u64(plan.regions.size());
  for (const Plan::RowRegion& rg : plan.regions) {
    w.i64(rg.rows);
    w.i64(rg.max_block_rows);
    MCX_RETURN_IF_ERROR(w.steps(rg.steps));
    w.pairs(rg.local);
    w.pairs(rg.escape_slot);
    w.ints(std::span<const ValueId>(rg.escaping));
    MCX_RETURN_IF_ERROR(w.steps(rg.post_views));
    w.ints(std::span<const ValueId>(rg.reads));
    w.i64(rg.local_row_bytes);
    w.i64(rg.row_kernel ? w.object(*rg.row_kernel) : -1);
  }
  MCX_RETURN_IF_ERROR(w.steps(plan.steps));
  w.objects();
  const Sha256Digest checksum = sha256(out);
  w.bytes(checksum.data(), checksum.size());
  return out;
}

absl::StatusOr<std::shared_ptr<const CpuExecutable>> CpuExecutable::deserialize(std::string_view bytes) {
  {
    ByteReader header(bytes, "load_executable");
    MCX_ASSIGN_OR_RETURN(std::string_view magic, header.bytes(kMagic.size()));
    if (magic != kMagic) return header.error("a serialised CPU executable (magic \"MCXCPUEX\")");
    MCX_ASSIGN_OR_RETURN(uint64_t version, header.u64());
    if (version != kFormatVersion) {
      return absl::FailedPreconditionError(absl::StrCat("[load_executable] format version ", version,
                                                        "; this build reads version ", kFormatVersion));
    }
    if (header.remaining() < kChecksumBytes) return header.error("a body and its checksum (the input is truncated)");
  }
  const std::string_view body = bytes.substr(0, bytes.size() - kChecksumBytes);
  const Sha256Digest checksum = sha256(body);
  if (std::memcmp(checksum.data(), bytes.data() + body.size(), kChecksumBytes) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("[load_executable] the checksum of the ", bytes.size(),
                                                   " bytes does not match: they are damaged"));
  }
  auto plan = std::make_unique<Plan>();
  PlanReader r(body, *plan);
  MCX_RETURN_IF_ERROR(r.bytes(kMagic.size() + 8).status());  // magic and version, checked above
  MCX_ASSIGN_OR_RETURN(std::string_view target, r.str());
  if (!target.empty() && codegen::enabled() && target != codegen::target_description()) {
    return absl::FailedPreconditionError(absl::StrCat("[load_executable] kernels generated for \"", std::string(target),
                                                      "\"; this process generates for \"",
                                                      codegen::target_description(), "\""));
  }
  MCX_ASSIGN_OR_RETURN(std::string_view name, r.str());
  MCX_ASSIGN_OR_RETURN(std::string_view encoding, r.str());
  MCX_ASSIGN_OR_RETURN(plan->program, ir::decode_canonical_encoding(encoding, std::string(name)));
  MCX_RETURN_IF_ERROR(fill_program_facts(*plan));
  MCX_ASSIGN_OR_RETURN(uint64_t has_collectives, r.u64());
  plan->has_collectives = has_collectives != 0;

  MCX_ASSIGN_OR_RETURN(uint64_t num_groups, r.count(80));
  plan->groups.resize(num_groups);
  std::vector<int64_t> group_object(num_groups, -1);
  for (uint64_t gi = 0; gi < num_groups; ++gi) {
    Plan::GroupPlan& gp = plan->groups[gi];
    FusedGroup& g = gp.group;
    MCX_ASSIGN_OR_RETURN(g.dims, r.ints(0));
    MCX_ASSIGN_OR_RETURN(uint64_t num_leaves, r.count(8));
    for (uint64_t l = 0; l < num_leaves; ++l) {
      MCX_ASSIGN_OR_RETURN(DType t, r.dtype());
      g.leaf_dtypes.push_back(t);
    }
    MCX_ASSIGN_OR_RETURN(uint64_t num_nodes, r.count(32));
    for (uint64_t k = 0; k < num_nodes; ++k) {
      FusedNode n{};
      MCX_ASSIGN_OR_RETURN(int64_t kind, r.index(ir::kNumOpKinds, "op kind"));
      n.kind = static_cast<ir::OpKind>(kind);
      MCX_ASSIGN_OR_RETURN(n.dtype, r.dtype());
      MCX_ASSIGN_OR_RETURN(n.operand_dtype, r.dtype());
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> args, r.ints(0, INT32_MAX));
      n.args.assign(args.begin(), args.end());
      g.nodes.push_back(std::move(n));
    }
    MCX_ASSIGN_OR_RETURN(std::vector<int64_t> outputs, r.ints(0, INT32_MAX));
    g.outputs.assign(outputs.begin(), outputs.end());
    MCX_ASSIGN_OR_RETURN(gp.leaves, r.values());
    MCX_ASSIGN_OR_RETURN(gp.outputs, r.values());
    MCX_ASSIGN_OR_RETURN(std::vector<int64_t> inplace, r.ints(-1, INT32_MAX));
    gp.inplace_leaf.assign(inplace.begin(), inplace.end());
    MCX_ASSIGN_OR_RETURN(group_object[gi], r.i64());
  }
  MCX_ASSIGN_OR_RETURN(uint64_t num_regions, r.count(64));
  plan->regions.resize(num_regions);
  std::vector<int64_t> region_object(num_regions, -1);
  for (uint64_t ri = 0; ri < num_regions; ++ri) {
    Plan::RowRegion& rg = plan->regions[ri];
    MCX_ASSIGN_OR_RETURN(rg.rows, r.i64());
    MCX_ASSIGN_OR_RETURN(rg.max_block_rows, r.i64());
    if (rg.rows < 0 || rg.max_block_rows < 1) return r.error("a row count >= 0 and a block of >= 1 rows");
    MCX_ASSIGN_OR_RETURN(rg.steps, r.steps());
    MCX_ASSIGN_OR_RETURN(rg.local, r.pairs());
    MCX_ASSIGN_OR_RETURN(rg.escape_slot, r.pairs());
    MCX_ASSIGN_OR_RETURN(rg.escaping, r.values());
    MCX_ASSIGN_OR_RETURN(rg.post_views, r.steps());
    MCX_ASSIGN_OR_RETURN(rg.reads, r.values());
    MCX_ASSIGN_OR_RETURN(rg.local_row_bytes, r.i64());
    for (const auto& [v, slot] : rg.local)
      if (slot >= static_cast<int>(rg.local.size())) return r.error("row-region slots below the local count");
    for (const auto& [v, slot] : rg.escape_slot)
      if (slot >= static_cast<int>(rg.escaping.size())) return r.error("escape slots below the escaping count");
    if (rg.local_row_bytes < 0) return r.error("local row bytes >= 0");
    MCX_ASSIGN_OR_RETURN(region_object[ri], r.i64());
  }
  MCX_ASSIGN_OR_RETURN(plan->steps, r.steps());
  for (const Plan::Step& st : plan->steps) {
    if (st.kind == Plan::StepKind::kFused && plan->groups[st.group].inplace_leaf.size() != plan->groups[st.group].outputs.size()) {
      return r.error("in-place decisions for every output of a top-level fused group");
    }
  }
  MCX_ASSIGN_OR_RETURN(uint64_t num_objects, r.count(8));
  std::vector<std::string_view> objects;
  for (uint64_t i = 0; i < num_objects; ++i) {
    MCX_ASSIGN_OR_RETURN(std::string_view o, r.str());
    objects.push_back(o);
  }
  if (!r.at_end()) return r.error("the end of the executable");
  for (uint64_t gi = 0; gi < num_groups; ++gi) {
    Plan::GroupPlan& gp = plan->groups[gi];
    MCX_RETURN_IF_ERROR(check_group(*plan, gp, objects.size(), group_object[gi]));
    if (group_object[gi] < 0 || !codegen::enabled()) continue;
    absl::StatusOr<std::shared_ptr<const codegen::GeneratedKernel>> k = codegen::load_fused(gp.group, objects[group_object[gi]]);
    if (k.ok()) gp.group.kernel = *std::move(k);  // else (a group this build does not generate) the interpreter
  }
  for (uint64_t ri = 0; ri < num_regions; ++ri) {
    Plan::RowRegion& rg = plan->regions[ri];
    if (region_object[ri] < -1 || region_object[ri] >= static_cast<int64_t>(objects.size())) {
      return r.error("a row kernel object index");
    }
    if (region_object[ri] < 0 || !codegen::enabled()) continue;
    // The program is derived again (it follows from the region); a region that no longer is one was
    // written by another planner, which the format description in the cache key rules out.
    absl::StatusOr<RowProgram> rp = plan_row_program(*plan, rg);
    if (!rp.ok()) return r.error("a row region that is a row program, as its kernel says");
    rg.row_program = std::make_shared<const RowProgram>(*std::move(rp));
    absl::StatusOr<std::shared_ptr<const codegen::GeneratedKernel>> k =
        codegen::load_rows(*rg.row_program, objects[region_object[ri]]);
    if (k.ok()) rg.row_kernel = *std::move(k);  // else the region runs step by step
  }
  return std::shared_ptr<const CpuExecutable>(new CpuExecutable(std::move(plan)));
}

}  // namespace mcx::cpu
