// plan_row_program (executable_plan.h): a row region's steps as a RowProgram.
#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "mcx/backend/cpu/executable_plan.h"
#include "mcx/core/error.h"

namespace mcx::cpu {
namespace {

using ir::OpKind;
using ir::ValueId;
using Plan = CpuExecutable::Plan;
using Storage = RowProgram::Storage;

bool is_float_reduction(OpKind k, DType t) {
  const bool kind_ok = k == OpKind::kReduceSum || k == OpKind::kReduceProd || k == OpKind::kReduceMax ||
                       k == OpKind::kReduceMin;
  return kind_ok && is_floating(t);
}

class Builder {
 public:
  Builder(const Plan& plan, const Plan::RowRegion& rg) : plan_(plan), rg_(rg) {}

  absl::StatusOr<RowProgram> build() {
    if (rg_.rows == 0) return not_one("the region has no rows");
    MCX_RETURN_IF_ERROR(choose_rows());
    for (ValueId v : rg_.reads) rp_.cols = std::max(rp_.cols, per_row(v));
    for (const auto& [v, slot] : rg_.local) rp_.cols = std::max(rp_.cols, per_row(v));
    for (ValueId v : rg_.reads) MCX_RETURN_IF_ERROR(add(v, Storage::kInput).status());
    // A read that is a broadcast of one value per row (or of one value) is a row scalar, whatever its dims.
    for (size_t k = 0; k < rg_.reads.size(); ++k) {
      if (constant_along_rows(rg_.reads[k])) rp_.values[k].full = false;
    }
    for (const Plan::Step& st : rg_.steps) {
      switch (st.kind) {
        case Plan::StepKind::kView: MCX_RETURN_IF_ERROR(view(st)); break;
        case Plan::StepKind::kOp: MCX_RETURN_IF_ERROR(reduction(st)); break;
        case Plan::StepKind::kFused: MCX_RETURN_IF_ERROR(group(st)); break;
        default: return not_one("a step that is not a view, a reduction or a fused group");
      }
    }
    for (ValueId v : rg_.escaping) {
      MCX_ASSIGN_OR_RETURN(int k, row_value(v));
      rp_.outputs.push_back(k);
    }
    return std::move(rp_);
  }

 private:
  static absl::Status not_one(std::string_view why) {
    return absl::UnimplementedError(absl::StrCat("[cpu] not a row program: ", std::string(why)));
  }

  // The program's rows are the region's leading dims up to the first axis any reduction reduces (softmax of
  // [B, H, T, T] over the last axis: B * H * T rows of T), so that a reduction's result is a row scalar.
  absl::Status choose_rows() {
    int row_rank = INT32_MAX;
    ValueId operand = -1;
    for (const Plan::Step& st : rg_.steps) {
      if (st.kind != Plan::StepKind::kOp) continue;
      const auto& axes = std::get<step_attrs::Axes>(st.attrs).dimensions;
      if (axes.empty()) return not_one("a reduction over no axes");
      const int first = static_cast<int>(*std::min_element(axes.begin(), axes.end()));
      if (first < row_rank) {
        row_rank = first;
        operand = plan_.program.defining_instr(st.value).operands[0];
      }
    }
    if (operand < 0) return not_one("no reduction");
    const std::vector<int64_t>& d = plan_.dims[operand];
    rp_.row_dims.assign(d.begin(), d.begin() + row_rank);
    return absl::OkStatus();
  }

  // The row value that region value v names: Internal when the region uses v before making it (a planner bug).
  absl::StatusOr<int> row_value(ValueId v) const {
    auto it = index_.find(v);
    if (it == index_.end()) {
      return absl::InternalError(absl::StrCat("[cpu] row region uses value %", v, " before it is made or read"));
    }
    return it->second;
  }

  // Whether v's leading dims are the rows' (every value of the program has them).
  bool has_rows(ValueId v) const {
    const std::vector<int64_t>& d = plan_.dims[v];
    const std::vector<int64_t>& rows = rp_.row_dims;
    return d.size() >= rows.size() && std::equal(rows.begin(), rows.end(), d.begin());
  }

  // Elements per row (the product of the dims after the rows').
  int64_t per_row(ValueId v) const {
    const std::vector<int64_t>& d = plan_.dims[v];
    int64_t n = 1;
    for (size_t i = rp_.row_dims.size(); i < d.size(); ++i) n *= d[i];
    return n;
  }

  // Whether v is a broadcast (made outside the region) of a single value, or of one value per row.
  bool constant_along_rows(ValueId v) const {
    const ir::Program& p = plan_.program;
    if (p.is_param(v) || plan_.constants.count(v)) return false;
    const ir::Instr& in = p.defining_instr(v);
    if (in.kind != OpKind::kBroadcastInDim) return false;
    const ValueId o = in.operands[0];
    if (product(plan_.dims[o]) == 1) return true;
    auto to = in.attrs.get_ints("broadcast_dimensions");
    return to.ok() && !to->empty() && (*to)[0] == 0 && has_rows(o) && per_row(o) == 1;
  }

  absl::Status check_width(ValueId v) const {
    if (!has_rows(v)) return not_one(absl::StrCat("value %", v, " does not start with the rows' dims"));
    const int64_t n = per_row(v);
    if (n == 1 || n == rp_.cols) return absl::OkStatus();
    return not_one(absl::StrCat("value %", v, " has ", n, " elements per row, expected 1 or ", rp_.cols));
  }

  absl::StatusOr<int> add(ValueId v, Storage storage) {
    MCX_RETURN_IF_ERROR(check_width(v));
    RowProgram::Value rv;
    rv.dtype = plan_.program.type(v).dtype;
    rv.full = per_row(v) != 1;
    rv.storage = storage;
    if (storage != Storage::kInput && rg_.escape_slot.count(v)) rv.storage = Storage::kOutput;
    else if (storage != Storage::kInput) rv.storage = rv.full ? Storage::kScratch : Storage::kRegister;
    rp_.values.push_back(rv);
    const int k = static_cast<int>(rp_.values.size()) - 1;
    index_[v] = k;
    return k;
  }

  // A view names its operand's row value: a broadcast of a row scalar (to any width), a broadcast that only
  // inserts size-1 dims (its dims are increasing: the element order stays), or a reshape that keeps rows.
  absl::Status view(const Plan::Step& st) {
    const ir::Instr& in = plan_.program.defining_instr(st.value);
    MCX_ASSIGN_OR_RETURN(const int src, row_value(in.operands[0]));
    MCX_RETURN_IF_ERROR(check_width(st.value));
    if (in.kind == OpKind::kBroadcastInDim && rp_.values[src].full && per_row(st.value) != rp_.cols) {
      return not_one("a broadcast of a full row");
    }
    if (in.kind != OpKind::kBroadcastInDim && in.kind != OpKind::kReshape) return not_one("a view that moves rows");
    index_[st.value] = src;
    return absl::OkStatus();
  }

  absl::Status reduction(const Plan::Step& st) {
    const ir::Instr& in = plan_.program.defining_instr(st.value);
    MCX_ASSIGN_OR_RETURN(const int src, row_value(in.operands[0]));
    if (!rp_.values[src].full) return not_one("a reduction of a row scalar");
    if (per_row(st.value) != 1) return not_one("a reduction over some of a row's axes");
    if (!is_float_reduction(in.kind, rp_.values[src].dtype)) {
      return not_one(absl::StrCat(std::string(ir::op_name(in.kind)), " on ",
                                  std::string(dtype_short_name(rp_.values[src].dtype))));
    }
    RowProgram::Stage s;
    s.kind = RowProgram::Stage::Kind::kReduce;
    s.reduce_kind = in.kind;
    s.args = {src};
    MCX_ASSIGN_OR_RETURN(int r, add(st.value, Storage::kRegister));
    s.results = {r};
    rp_.stages.push_back(std::move(s));
    return absl::OkStatus();
  }

  absl::Status group(const Plan::Step& st) {
    const Plan::GroupPlan& gp = plan_.groups[st.group];
    RowProgram::Stage s;
    s.kind = RowProgram::Stage::Kind::kElementwise;
    s.group.leaf_dtypes = gp.group.leaf_dtypes;
    s.group.nodes = gp.group.nodes;
    s.group.outputs = gp.group.outputs;
    s.group.dims = gp.group.dims;
    if (gp.outputs.empty()) return not_one("a group without outputs");
    MCX_RETURN_IF_ERROR(check_width(gp.outputs[0]));  // 1 or cols elements per row
    s.full = per_row(gp.outputs[0]) != 1;
    for (ValueId l : gp.leaves) {
      MCX_ASSIGN_OR_RETURN(int k, row_value(l));
      s.args.push_back(k);
    }
    for (ValueId o : gp.outputs) {
      MCX_ASSIGN_OR_RETURN(int r, add(o, Storage::kRegister));
      s.results.push_back(r);
    }
    rp_.stages.push_back(std::move(s));
    return absl::OkStatus();
  }

  const Plan& plan_;
  const Plan::RowRegion& rg_;
  RowProgram rp_;
  std::map<ValueId, int> index_;  // region value -> row value (a view's is its operand's)
};

}  // namespace

absl::StatusOr<RowProgram> plan_row_program(const Plan& plan, const Plan::RowRegion& rg) {
  return Builder(plan, rg).build();
}

}  // namespace mcx::cpu
