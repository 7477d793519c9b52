// parse_step_attrs (executable_plan.h): an op step's attributes, parsed once at plan time (and when a stored plan is
// loaded) into the typed struct of its op.
#include "mcx/backend/cpu/executable_plan.h"

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"

namespace mcx::cpu {
namespace {

using ir::OpKind;

absl::StatusOr<std::vector<int64_t>> concrete(const ir::Attrs& attrs, std::string_view name) {
  MCX_ASSIGN_OR_RETURN(Shape s, attrs.get_dims(name));
  return to_concrete(s);
}

}  // namespace

absl::StatusOr<StepAttrs> parse_step_attrs(const ir::Instr& in) {
  const ir::Attrs& at = in.attrs;
  switch (in.kind) {
    case OpKind::kIota: {
      step_attrs::Iota s;
      MCX_ASSIGN_OR_RETURN(s.dtype, at.get_dtype("dtype"));
      MCX_ASSIGN_OR_RETURN(s.dimension, at.get_int("dimension"));
      return s;
    }
    case OpKind::kBroadcastInDim: {
      step_attrs::BroadcastInDim s;
      MCX_ASSIGN_OR_RETURN(s.broadcast_dimensions, at.get_ints("broadcast_dimensions"));
      return s;
    }
    case OpKind::kTranspose: {
      step_attrs::Transpose s;
      MCX_ASSIGN_OR_RETURN(s.permutation, at.get_ints("permutation"));
      return s;
    }
    case OpKind::kSlice: {
      step_attrs::Slice s;
      MCX_ASSIGN_OR_RETURN(s.start, concrete(at, "start"));
      MCX_ASSIGN_OR_RETURN(s.limit, concrete(at, "limit"));
      MCX_ASSIGN_OR_RETURN(s.strides, at.get_ints("strides"));
      return s;
    }
    case OpKind::kReverse:
    case OpKind::kReduceSum:
    case OpKind::kReduceMax:
    case OpKind::kReduceMin:
    case OpKind::kReduceProd: {
      step_attrs::Axes s;
      MCX_ASSIGN_OR_RETURN(s.dimensions, at.get_ints("dimensions"));
      return s;
    }
    case OpKind::kDynamicSlice: {
      step_attrs::DynamicSlice s;
      MCX_ASSIGN_OR_RETURN(s.sizes, concrete(at, "sizes"));
      return s;
    }
    case OpKind::kConcatenate: {
      step_attrs::Concatenate s;
      MCX_ASSIGN_OR_RETURN(s.dimension, at.get_int("dimension"));
      return s;
    }
    case OpKind::kPad: {
      step_attrs::Pad s;
      MCX_ASSIGN_OR_RETURN(s.low, concrete(at, "low"));
      MCX_ASSIGN_OR_RETURN(s.high, concrete(at, "high"));
      MCX_ASSIGN_OR_RETURN(s.interior, at.get_ints("interior"));
      return s;
    }
    case OpKind::kArgMax:
    case OpKind::kArgMin: {
      step_attrs::ArgReduce s;
      MCX_ASSIGN_OR_RETURN(s.dimension, at.get_int("dimension"));
      MCX_ASSIGN_OR_RETURN(s.index_dtype, at.get_dtype("index_dtype"));
      return s;
    }
    case OpKind::kDotGeneral: {
      step_attrs::DotGeneral s;
      MCX_ASSIGN_OR_RETURN(s.lhs_batch, at.get_ints("lhs_batch"));
      MCX_ASSIGN_OR_RETURN(s.rhs_batch, at.get_ints("rhs_batch"));
      MCX_ASSIGN_OR_RETURN(s.lhs_contracting, at.get_ints("lhs_contracting"));
      MCX_ASSIGN_OR_RETURN(s.rhs_contracting, at.get_ints("rhs_contracting"));
      return s;
    }
    case OpKind::kCumsum: {
      step_attrs::Cumsum s;
      MCX_ASSIGN_OR_RETURN(s.dimension, at.get_int("dimension"));
      MCX_ASSIGN_OR_RETURN(int64_t reverse, at.get_int("reverse"));
      s.reverse = reverse != 0;
      return s;
    }
    case OpKind::kArgsort: {
      step_attrs::Argsort s;
      MCX_ASSIGN_OR_RETURN(s.dimension, at.get_int("dimension"));
      MCX_ASSIGN_OR_RETURN(int64_t descending, at.get_int("descending"));
      s.descending = descending != 0;
      return s;
    }
    case OpKind::kConvGeneralDilated: return conv_geometry(at, in.type.rank());
    case OpKind::kReduceWindow: return window_geometry(at, in.type.rank());
    default: return std::monostate{};
  }
}

}  // namespace mcx::cpu
