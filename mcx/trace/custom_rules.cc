#include "mcx/trace/custom_rules.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/ir/control_flow.h"

namespace mcx::detail {
namespace {

// The operands of a custom call: the args, then each region's captured arrays in region order.
std::vector<Array> custom_operands(const std::vector<Array>& args, std::initializer_list<const TracedRegion*> regions,
                                   std::vector<int64_t>& region_consts) {
  std::vector<Array> operands = args;
  for (const TracedRegion* r : regions) {
    operands.insert(operands.end(), r->captured.begin(), r->captured.end());
    region_consts.push_back(static_cast<int64_t>(r->captured.size()));
  }
  return operands;
}

}  // namespace

void check_per_argument_structure(const char* api, const char* role, const char* what, const TreeDef& found,
                                  const TreeDef& args_def) {
  if (found == args_def) return;
  if (args_def.children().size() == 1 && found == args_def.children()[0]) return;
  throw InvalidArgument(absl::StrCat("[", api, "] ", role, " returns ", what, " of structure ", found.to_string(),
                                     ", expected one per argument: ", args_def.to_string(),
                                     args_def.children().size() == 1
                                         ? absl::StrCat(" or ", args_def.children()[0].to_string())
                                         : std::string()));
}

std::vector<Array> custom_vjp_flat(const std::vector<Array>& args, const TracedRegion& fun, const TracedRegion& fwd,
                                   const TracedRegion& bwd) {
  ir::CustomVjpConfig config;
  config.fun = std::make_shared<const ir::Program>(fun.program);
  config.fwd = std::make_shared<const ir::Program>(fwd.program);
  config.bwd = std::make_shared<const ir::Program>(bwd.program);
  config.num_args = static_cast<int>(args.size());
  std::vector<Array> operands = custom_operands(args, {&fun, &fwd, &bwd}, config.region_consts);
  return bind_control_flow("custom_vjp", ir::OpKind::kCustomVjpCall, ir::custom_vjp_attrs(config), operands,
                           config.num_outs(), mesh_of_regions("custom_vjp", {&fun, &fwd, &bwd}));
}

std::vector<Array> custom_jvp_flat(const std::vector<Array>& args, const TracedRegion& fun, const TracedRegion& jvp) {
  ir::CustomJvpConfig config;
  config.fun = std::make_shared<const ir::Program>(fun.program);
  config.jvp = std::make_shared<const ir::Program>(jvp.program);
  config.num_args = static_cast<int>(args.size());
  std::vector<Array> operands = custom_operands(args, {&fun, &jvp}, config.region_consts);
  return bind_control_flow("custom_jvp", ir::OpKind::kCustomJvpCall, ir::custom_jvp_attrs(config), operands,
                           config.num_outs(), mesh_of_regions("custom_jvp", {&fun, &jvp}));
}

}  // namespace mcx::detail
