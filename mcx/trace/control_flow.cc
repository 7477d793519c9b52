#include "mcx/trace/control_flow.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/control_flow.h"
#include "mcx/trace/dispatch.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/trace_state.h"

namespace mcx::detail {
namespace {

std::string path_of(const TreeDef& def, size_t leaf) {
  const std::vector<std::string> paths = def.leaf_paths();
  const std::string out = leaf < paths.size() ? paths[leaf] : std::string();
  return out.empty() ? std::string("(the whole value)") : out;
}

}  // namespace

std::vector<AbstractValue> avals_of(std::span<const Array> leaves) {
  std::vector<AbstractValue> out;
  out.reserve(leaves.size());
  for (const Array& a : leaves) {
    if (!a.valid()) throw InvalidArgument("[control flow] an operand or carry leaf is an empty Array");
    out.push_back(a.aval());
  }
  return out;
}

std::vector<bool> weak_of(std::span<const Array> leaves) {
  std::vector<bool> out;
  out.reserve(leaves.size());
  for (const Array& a : leaves) out.push_back(a.weak_type());
  return out;
}

std::vector<Array> with_weak(std::vector<Array> leaves, std::span<const Array> like) {
  for (size_t i = 0; i < leaves.size() && i < like.size(); ++i) leaves[i] = with_weak_type(leaves[i], like[i].weak_type());
  return leaves;
}

TracedRegion trace_region(const char* api, const char* role, const std::vector<AbstractValue>& avals,
                          const std::vector<bool>& weak,
                          const std::function<std::vector<Array>(std::span<const Array>)>& fn) {
  TracedFunction t = trace_flat(absl::StrCat(api, " ", role), role, avals, weak, current_scope(), fn);
  return TracedRegion{std::move(t.program), std::move(t.captured), std::move(t.mesh)};
}

namespace {

std::optional<Mesh> one_mesh(const char* api, std::span<const TracedRegion* const> regions) {
  std::optional<Mesh> mesh;
  for (const TracedRegion* r : regions) {
    if (!r->mesh) continue;
    if (mesh && !(*mesh == *r->mesh)) {
      throw InvalidArgument(absl::StrCat("[", api, "] one traced computation uses two meshes: ", mesh->to_string(),
                                         " and ", r->mesh->to_string()));
    }
    mesh = r->mesh;
  }
  return mesh;
}

}  // namespace

std::optional<Mesh> mesh_of_regions(const char* api, std::initializer_list<const TracedRegion*> regions) {
  return one_mesh(api, std::span<const TracedRegion* const>(regions.begin(), regions.size()));
}

std::optional<Mesh> mesh_of_regions(const char* api, const std::vector<TracedRegion>& regions) {
  std::vector<const TracedRegion*> pointers;
  for (const TracedRegion& r : regions) pointers.push_back(&r);
  return one_mesh(api, pointers);
}

void check_same_structure(const char* api, const char* role, const char* what, const TreeDef& found,
                          const TreeDef& expected) {
  if (found == expected) return;
  throw InvalidArgument(absl::StrCat("[", api, "] ", role, " returns a ", what, " of structure ", found.to_string(),
                                     ", expected ", expected.to_string()));
}

void check_leaf_types(const char* api, const char* role, const char* what, const char* expected_from,
                      const TreeDef& def, std::span<const AbstractValue> found,
                      std::span<const AbstractValue> expected) {
  for (size_t i = 0; i < found.size() && i < expected.size(); ++i) {
    if (found[i] == expected[i]) continue;
    throw InvalidArgument(absl::StrCat("[", api, "] ", role, " returns ", what, " leaf ", path_of(def, i), " as ",
                                       found[i].to_string(), ", ", expected_from, " has ", expected[i].to_string(),
                                       " (the types must stay the same; use astype to keep a dtype)"));
  }
}

std::vector<Array> bind_control_flow(const char* api, ir::OpKind kind, const ir::Attrs& attrs,
                                     const std::vector<Array>& operands, int num_results,
                                     const std::optional<Mesh>& mesh) {
  ir::ProgramBuilder b(api, current_scope());
  std::vector<ir::ValueId> params;
  for (const Array& a : operands) params.push_back(b.add_parameter(a.aval()));
  std::vector<ir::ValueId> results;
  for (int k = 0; k < num_results; ++k) {
    auto v = b.emit(kind, params, ir::with_result_index(attrs, k));
    if (!v.ok()) throw InvalidArgument(absl::StrCat("[", api, "] ", std::string(v.status().message())));
    results.push_back(*v);
  }
  return call_program(std::move(b).build(std::move(results)), operands, api, mesh);
}

std::vector<Array> while_loop_flat(const std::vector<Array>& init, const TreeDef& def,
                                   const std::function<Array(std::span<const Array>)>& cond_fun,
                                   const std::function<std::vector<Array>(std::span<const Array>)>& body_fun) {
  const std::vector<AbstractValue> carry = avals_of(init);
  const std::vector<bool> weak = weak_of(init);
  TracedRegion cond = trace_region("while_loop", "cond_fun", carry, weak, [&](std::span<const Array> c) {
    Array pred = cond_fun(c);
    if (!pred.valid() || pred.aval() != AbstractValue{DType::kBool, {}})
      throw InvalidArgument(absl::StrCat("[while_loop] cond_fun must return a bool[] Array, found ",
                                         pred.valid() ? pred.aval().to_string() : std::string("an empty Array")));
    return std::vector<Array>{pred};
  });
  TracedRegion body = trace_region("while_loop", "body_fun", carry, weak, [&](std::span<const Array> c) {
    std::vector<Array> out = body_fun(c);
    check_leaf_types("while_loop", "body_fun", "carry", "the initial carry", def, avals_of(out), carry);
    return out;
  });
  ir::WhileConfig config;
  config.cond = std::make_shared<const ir::Program>(std::move(cond.program));
  config.body = std::make_shared<const ir::Program>(std::move(body.program));
  config.num_carry = static_cast<int>(init.size());
  config.num_cond_consts = static_cast<int>(cond.captured.size());
  std::vector<Array> operands = init;
  operands.insert(operands.end(), cond.captured.begin(), cond.captured.end());
  operands.insert(operands.end(), body.captured.begin(), body.captured.end());
  if (init.empty()) throw InvalidArgument("[while_loop] the carry has no arrays (init_val is an empty pytree)");
  return with_weak(bind_control_flow("while_loop", ir::OpKind::kWhile, ir::while_attrs(config), operands,
                                     config.num_carry, mesh_of_regions("while_loop", {&cond, &body})),
                   init);
}

int64_t scan_length(const std::vector<Array>& xs, const TreeDef& def, std::optional<int64_t> length) {
  std::optional<int64_t> found;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].valid()) throw InvalidArgument("[scan] an xs leaf is an empty Array");
    if (xs[i].ndim() < 1)
      throw InvalidArgument(absl::StrCat("[scan] xs leaf ", path_of(def, i), " is ", xs[i].aval().to_string(),
                                         ", expected an array with a leading dimension to scan over"));
    const auto d = xs[i].shape()[0].constant_value();
    if (!d)
      throw InvalidArgument(absl::StrCat("[scan] xs leaf ", path_of(def, i), " is ", xs[i].aval().to_string(),
                                         "; scanning over a symbolic leading dimension is not supported"));
    if (found && *d != *found)
      throw InvalidArgument(absl::StrCat("[scan] xs leaf ", path_of(def, i), " has leading dimension ", *d,
                                         ", expected ", *found, " as the leaves before it"));
    found = *d;
  }
  if (length && found && *length != *found)
    throw InvalidArgument(absl::StrCat("[scan] length is ", *length, " but the xs have leading dimension ", *found));
  if (!length && !found) throw InvalidArgument("[scan] xs has no arrays, so the length must be given (ScanOptions::length)");
  if (length && *length < 0) throw InvalidArgument(absl::StrCat("[scan] length is ", *length, ", expected >= 0"));
  return length ? *length : *found;
}

std::vector<Array> scan_flat(const std::vector<Array>& init, const std::vector<Array>& xs, int64_t length,
                             bool reverse, const TracedRegion& body, int num_ys) {
  ir::ScanConfig config;
  config.body = std::make_shared<const ir::Program>(body.program);
  config.num_carry = static_cast<int>(init.size());
  config.num_xs = static_cast<int>(xs.size());
  config.length = length;
  config.reverse = reverse;
  std::vector<Array> operands = init;
  operands.insert(operands.end(), xs.begin(), xs.end());
  operands.insert(operands.end(), body.captured.begin(), body.captured.end());
  std::vector<Array> out = bind_control_flow("scan", ir::OpKind::kScan, ir::scan_attrs(config), operands,
                                             config.num_carry + num_ys, body.mesh);
  return with_weak(std::move(out), init);
}

Array branch_index(const char* api, const Array& index) {
  if (!index.valid()) throw InvalidArgument(absl::StrCat("[", api, "] the ", std::string(api) == "cond" ? "predicate" : "index", " is an empty Array"));
  const AbstractValue& t = index.aval();
  if (std::string(api) == "cond") {
    if (t != AbstractValue{DType::kBool, {}})
      throw InvalidArgument(absl::StrCat("[cond] the predicate must be a bool[] Array, found ", t.to_string()));
  } else if (t.rank() != 0 || !is_integer(t.dtype)) {
    throw InvalidArgument(absl::StrCat("[switch] the index must be an integer scalar Array, found ", t.to_string()));
  }
  if (t.dtype == DType::kInt32) return index;
  if (t.dtype == DType::kInt64 || t.dtype == DType::kUInt32)  // clamp before narrowing, as the op clamps
    return astype(clip(index, Array(0), Array(std::numeric_limits<int32_t>::max())), DType::kInt32);
  return astype(index, DType::kInt32);
}

std::vector<Array> switch_flat(const char* api, const Array& index, const std::vector<Array>& operands,
                               const std::vector<TracedRegion>& branches, const TreeDef& out_def, int num_results) {
  if (branches.empty()) throw InvalidArgument(absl::StrCat("[", api, "] needs at least one branch"));
  ir::CondConfig config;
  std::vector<Array> all = {index};
  all.insert(all.end(), operands.begin(), operands.end());
  const std::vector<AbstractValue> expected = branches[0].program.result_types();
  for (size_t b = 0; b < branches.size(); ++b) {
    const std::vector<AbstractValue> found = branches[b].program.result_types();
    check_leaf_types(api, absl::StrCat("branch ", b).c_str(), "result", "branch 0", out_def, found, expected);
    config.branches.push_back(std::make_shared<const ir::Program>(branches[b].program));
    config.branch_consts.push_back(static_cast<int64_t>(branches[b].captured.size()));
    all.insert(all.end(), branches[b].captured.begin(), branches[b].captured.end());
  }
  if (num_results == 0) return {};
  return bind_control_flow(api, ir::OpKind::kCond, ir::cond_attrs(config), all, num_results,
                           mesh_of_regions(api, branches));
}

Array fori_start(int64_t lower, int64_t upper) {
  constexpr int64_t lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
  if (lower < lo || lower > hi || upper < lo || upper > hi)
    throw InvalidArgument(absl::StrCat("[fori_loop] the bounds [", lower, ", ", upper,
                                       ") do not fit the i32 loop counter"));
  return Array(Buffer::scalar<int32_t>(static_cast<int32_t>(lower)));
}

}  // namespace mcx::detail
