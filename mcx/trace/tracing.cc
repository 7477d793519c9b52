#include "mcx/trace/tracing.h"

#include <typeinfo>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/trace/trace_state.h"

namespace mcx {

TracedFunction trace_flat(const std::string& what, const std::string& program_name,
                          const std::vector<AbstractValue>& in_avals, const std::vector<bool>& in_weak,
                          const SymbolicScope& scope,
                          const std::function<std::vector<Array>(std::span<const Array>)>& body,
                          const std::vector<std::string>& arg_names) {
  detail::TraceMeshCollector meshes;
  detail::TraceScope trace(what, scope);
  std::vector<Array> tracers;
  tracers.reserve(in_avals.size());
  for (size_t i = 0; i < in_avals.size(); ++i) {
    tracers.push_back(trace.context().new_param(in_avals[i], i < in_weak.size() && in_weak[i]));
  }
  std::vector<Array> outs;
  try {
    outs = body(tracers);
  } catch (const InvalidArgument& e) {
    // Shape and type errors name the traced function (the innermost trace only, as ConcretizationError does).
    // Subclasses (ConcretizationError, TransferGuardError) keep their type and say where already.
    const std::string message = e.what();
    if (typeid(e) != typeid(InvalidArgument) || absl::StrContains(message, " (traced in ")) throw;
    std::string on;
    constexpr size_t kListed = 8;  // arguments named in the note; more are counted
    for (size_t i = 0; i < arg_names.size() && i < in_avals.size() && i < kListed; ++i)
      absl::StrAppend(&on, i ? ", " : " on ", arg_names[i], ": ", in_avals[i].to_string());
    if (arg_names.size() > kListed) absl::StrAppend(&on, " and ", arg_names.size() - kListed, " more");
    throw InvalidArgument(absl::StrCat(message, " (traced in ", what, on, ")"));
  }
  TracedFunction traced = trace.context().finish(outs, program_name);
  traced.mesh = meshes.mesh();
  return traced;
}

namespace detail {

std::string static_arg_key(const std::type_info& type, const std::string& value) {
  return absl::StrCat(type.name(), "=", value);
}

void append_leaf_key(FlatArgs& flat) {
  flat.key += "|";
  for (size_t i = 0; i < flat.avals.size(); ++i) {
    absl::StrAppend(&flat.key, flat.avals[i].to_string(), flat.weak[i] ? "w" : "", ";");
  }
}

std::vector<std::string> argument_leaf_names(const FlatArgs& flat) {
  std::vector<std::string> names;
  names.reserve(flat.leaves.size());
  for (size_t a = 0; a < flat.ranges.size(); ++a) {
    if (flat.ranges[a].first == flat.ranges[a].second) continue;  // a static argument
    for (const std::string& path : flat.defs[a].leaf_paths()) names.push_back(absl::StrCat("args[", a, "]", path));
  }
  return names;
}

size_t arg_of_leaf(const FlatArgs& flat, size_t leaf) {
  for (size_t a = 0; a < flat.ranges.size(); ++a) {
    if (leaf >= flat.ranges[a].first && leaf < flat.ranges[a].second) return a;
  }
  return 0;
}

}  // namespace detail
}  // namespace mcx
