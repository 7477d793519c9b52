// Planner phase 9 (executable_plan.h): machine code for the plan's row regions and fused groups.
#include <mutex>
#include <string>
#include <vector>

#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/backend/cpu/codegen/row_kernel.h"
#include "mcx/backend/cpu/executable_plan.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/core/logging.h"

namespace mcx::cpu {
namespace {

using Plan = CpuExecutable::Plan;

// Logs, once per process, a failed code generation (a bug in the generator, not in the program). Unimplemented
// is by design (the generator does not take that source: it runs on the interpreter, its intended path).
void note_codegen_failure(const absl::Status& st) {
  if (st.code() == absl::StatusCode::kUnimplemented) return;
  static std::once_flag logged;
  std::call_once(logged, [&] {
    log_warn("[cpu_compile] code generation failed, running the interpreter instead: {}", std::string(st.message()));
  });
}

}  // namespace

// Generates machine code, in parallel on the thread pool: a kernel for each row region that is a row program
// (codegen/row_kernel.h), then one for each fused group outside those regions (codegen/fused_kernel.h). A
// source the generator does not take, or whose compile fails, stays on the interpreter. A region without a
// kernel runs its steps with its groups' own kernels; a region with one whose reads do not fit it at run
// time (run_row_kernel) runs its steps on the interpreter, since its groups were not generated separately.
void generate_kernels(Plan& plan) {
  if (!codegen::enabled()) return;
  std::vector<Plan::RowRegion*> row_candidates;
  for (Plan::RowRegion& rg : plan.regions) {
    absl::StatusOr<RowProgram> rp = plan_row_program(plan, rg);
    if (!rp.ok()) continue;
    rg.row_program = std::make_shared<const RowProgram>(*std::move(rp));
    row_candidates.push_back(&rg);
  }
  parallel_for(static_cast<int64_t>(row_candidates.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      auto kernel = codegen::compile_rows(*row_candidates[k]->row_program);
      if (kernel.ok()) row_candidates[k]->row_kernel = *std::move(kernel);
      else note_codegen_failure(kernel.status());
    }
  });
  std::vector<bool> covered(plan.groups.size(), false);
  for (const Plan::RowRegion& rg : plan.regions) {
    if (!rg.row_kernel) continue;
    for (const Plan::Step& st : rg.steps) {
      if (st.kind == Plan::StepKind::kFused) covered[st.group] = true;
    }
  }
  std::vector<FusedGroup*> candidates;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    FusedGroup& group = plan.groups[g].group;
    if (!covered[g] && static_cast<int>(group.nodes.size()) >= codegen::kMinNodesToGenerate) {
      candidates.push_back(&group);
    }
  }
  parallel_for(static_cast<int64_t>(candidates.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      absl::StatusOr<std::shared_ptr<const codegen::GeneratedKernel>> kernel = codegen::compile_fused(*candidates[k]);
      if (kernel.ok()) candidates[k]->kernel = *std::move(kernel);
      else note_codegen_failure(kernel.status());
    }
  });
}

}  // namespace mcx::cpu
