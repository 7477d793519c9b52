#include "mcx/backend/cpu/codegen/row_kernel.h"

#include "absl/strings/str_cat.h"
#include "mcx/backend/cpu/codegen/kernel_registry.h"

namespace mcx::cpu::codegen {

std::string row_unsupported_reason(const RowProgram& rp) {
  for (const RowProgram::Stage& s : rp.stages) {
    if (s.kind != RowProgram::Stage::Kind::kElementwise) continue;
    if (std::string why = unsupported_reason(s.group); !why.empty()) return why;
  }
  if (rp.stages.empty()) return "no stages";
  return "";
}

std::string row_signature(const RowProgram& rp) {
  static constexpr const char* kStorage[] = {"in", "out", "scratch", "reg"};
  std::string s = "rows; values";
  for (const RowProgram::Value& v : rp.values) {
    absl::StrAppend(&s, " ", std::string(dtype_short_name(v.dtype)), v.full ? "[row]" : "", ":",
                    kStorage[static_cast<int>(v.storage)]);
  }
  for (const RowProgram::Stage& st : rp.stages) {
    if (st.kind == RowProgram::Stage::Kind::kReduce) {
      absl::StrAppend(&s, "; ", std::string(ir::op_name(st.reduce_kind)));
    } else {
      absl::StrAppend(&s, "; ", st.full ? "row" : "scalar", " {", signature(st.group), "}");
    }
    for (int a : st.args) absl::StrAppend(&s, " %", a);
    absl::StrAppend(&s, " ->");
    for (int r : st.results) absl::StrAppend(&s, " %", r);
  }
  absl::StrAppend(&s, "; outputs");
  for (int o : rp.outputs) absl::StrAppend(&s, " %", o);
  return s;
}

absl::StatusOr<std::shared_ptr<const GeneratedKernel>> compile_rows(const RowProgram& rp) {
  return compile_kernel(&rp, row_signature(rp), [&] { return row_unsupported_reason(rp); });
}

absl::StatusOr<std::shared_ptr<const GeneratedKernel>> load_rows(const RowProgram& rp, std::string_view object) {
  return load_kernel(&rp, row_signature(rp), [&] { return row_unsupported_reason(rp); }, object);
}

}  // namespace mcx::cpu::codegen
