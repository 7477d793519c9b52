#include "mcx/backend/cuda/cuda_executable.h"

#include <algorithm>
#include <optional>
#include <variant>

#include "absl/strings/str_cat.h"
#include "mcx/backend/cuda/cuda_plan.h"
#include "mcx/backend/cuda/gemm.h"
#include "mcx/backend/cuda/ptx_assembler.h"
#include "mcx/backend/cuda/nccl_spmd.h"
#include "mcx/backend/cuda/staged_spmd.h"
#include "mcx/core/dims.h"
#include "mcx/core/byte_io.h"
#include "mcx/core/config.h"
#include "mcx/core/error.h"
#include "mcx/core/debug_output.h"
#include "mcx/ir/debug_print.h"
#include "mcx/ir/fingerprint.h"

namespace mcx::cuda {

using ir::ValueId;

namespace {

using Plan = CudaExecutable::Plan;

// What cuModuleLoadData is given for host bitcode, which does not state its own length: "MCXHOSTK", the length
// (u64, little-endian), the bitcode.
std::string host_kernel_image(std::string_view bitcode) {
  std::string out(kHostKernelImageMagic);
  ByteWriter w(out);
  w.u64(bitcode.size());
  out.append(bitcode);
  return out;
}

}  // namespace

std::string arch_name(int arch) { return arch == kHostEmulationArch ? "host emulation" : absl::StrCat("sm_", arch); }

CudaExecutable::CudaExecutable(const CudaDevices& devices, int arch, std::unique_ptr<Plan> plan,
                               std::vector<CompiledKernel> kernels, RegionExecutables regions)
    : devices_(devices),
      arch_(arch),
      plan_(std::move(plan)),
      kernels_(std::move(kernels)),
      regions_(std::move(regions)) {}

CudaExecutable::~CudaExecutable() {
  MutexLock lock(&mu_);
  for (auto& [ordinal, state] : states_) {
    const CudaDevice& d = *devices_[ordinal];
    if (!d.make_current().ok()) continue;
    for (CUmodule m : state->modules) d.api().cuModuleUnload(m);
  }
}

const ir::Program& CudaExecutable::program() const { return plan_->program; }

namespace {

// The serialised form: the magic, the architecture, the program's name and canonical encoding, each kernel
// (name, image format, image), then per control-flow op the count of its regions and each one's executable.
constexpr std::string_view kMagic = "MCXCUDA1";

}  // namespace

absl::StatusOr<std::string> CudaExecutable::serialize() const {
  std::string out(kMagic);
  ByteWriter w(out);
  w.i64(arch_);
  w.str(plan_->program.name);
  w.str(ir::canonical_encoding(plan_->program));
  w.u64(kernels_.size());
  for (const CompiledKernel& k : kernels_) {
    w.str(k.name);
    w.u64(static_cast<uint64_t>(k.format));
    w.str(k.image);
  }
  for (const auto& regions : regions_) {
    w.u64(regions.size());
    for (const auto& region : regions) {
      MCX_ASSIGN_OR_RETURN(const std::string bytes, region->serialize());
      w.str(bytes);
    }
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const CudaExecutable>> CudaExecutable::deserialize(std::string_view bytes,
                                                                                 const CudaDevices& devices, int arch) {
  if (bytes.substr(0, kMagic.size()) != kMagic) {
    return absl::FailedPreconditionError("[cuda] not a serialised cuda executable (another format or version)");
  }
  ByteReader r(bytes.substr(kMagic.size()), "cuda executable");
  MCX_ASSIGN_OR_RETURN(const int64_t stored_arch, r.i64());
  if (stored_arch != arch) {
    return absl::FailedPreconditionError(absl::StrCat("[cuda] a stored executable for ", arch_name(stored_arch),
                                                      "; this process compiles for ", arch_name(arch)));
  }
  MCX_ASSIGN_OR_RETURN(const std::string_view name, r.str());
  MCX_ASSIGN_OR_RETURN(const std::string_view encoding, r.str());
  MCX_ASSIGN_OR_RETURN(const ir::Program program, ir::decode_canonical_encoding(encoding, std::string(name)));
  MCX_ASSIGN_OR_RETURN(const uint64_t n, r.count(24));
  std::vector<CompiledKernel> kernels;
  for (uint64_t k = 0; k < n; ++k) {
    MCX_ASSIGN_OR_RETURN(const std::string_view kname, r.str());
    MCX_ASSIGN_OR_RETURN(const uint64_t format, r.u64());
    MCX_ASSIGN_OR_RETURN(const std::string_view image, r.str());
    if (format > static_cast<uint64_t>(KernelImageFormat::kHostBitcode)) return r.error("a kernel image format of 0, 1 or 2");
    kernels.push_back({std::string(kname), std::string(image), static_cast<KernelImageFormat>(format)});
  }
  MCX_ASSIGN_OR_RETURN(auto planned, plan_program(program));
  if (planned.second.size() != kernels.size()) {
    return absl::FailedPreconditionError(absl::StrCat("[cuda] the stored executable of @", std::string(name), " has ", kernels.size(),
                                                      " kernels; this build plans ", planned.second.size()));
  }
  RegionExecutables regions;
  for (const ControlFlowOp& op : planned.first->control_flows) {
    MCX_ASSIGN_OR_RETURN(const uint64_t count, r.count(8));
    if (count != op.regions().size()) return r.error(absl::StrCat(op.regions().size(), " regions"));
    std::vector<std::shared_ptr<const CudaExecutable>> executables;
    for (uint64_t k = 0; k < count; ++k) {
      MCX_ASSIGN_OR_RETURN(const std::string_view bytes, r.str());
      MCX_ASSIGN_OR_RETURN(std::shared_ptr<const CudaExecutable> e, deserialize(bytes, devices, arch));
      executables.push_back(std::move(e));
    }
    regions.push_back(std::move(executables));
  }
  if (!r.at_end()) return r.error("the end of the executable");
  return std::shared_ptr<const CudaExecutable>(
      new CudaExecutable(devices, arch, std::move(planned.first), std::move(kernels), std::move(regions)));
}

absl::StatusOr<std::shared_ptr<const CudaExecutable>> CudaExecutable::compile(const ir::Program& program,
                                                                             const CudaDevices& devices, int arch) {
  MCX_ASSIGN_OR_RETURN(auto planned, plan_program(program));
  auto& [plan, specs] = planned;
  std::vector<CompiledKernel> kernels;
  for (size_t k = 0; k < specs.size(); ++k) {
    const std::string name = absl::StrCat("mcx_", k);
    auto failed = [&](const absl::Status& s) {
      return absl::Status(s.code(), absl::StrCat("[cuda_compile] @", program.name, " kernel ", k, ": ", s.message()));
    };
    if (arch == kHostEmulationArch) {
      absl::StatusOr<std::string> bitcode = codegen::generate_host_kernel(specs[k], name);
      if (!bitcode.ok()) return failed(bitcode.status());
      kernels.push_back({name, host_kernel_image(*bitcode), KernelImageFormat::kHostBitcode});
      continue;
    }
    absl::StatusOr<codegen::PtxKernel> ptx = codegen::generate_ptx_kernel(specs[k], arch, name);
    if (!ptx.ok()) return failed(ptx.status());
    absl::StatusOr<AssembledKernel> cubin = assemble_ptx(ptx->ptx, arch);
    if (cubin.ok()) {
      kernels.push_back({name, std::move(cubin->cubin), KernelImageFormat::kCubin});
    } else if (cubin.status().code() == absl::StatusCode::kFailedPrecondition) {
      // No nvJitLink: the driver compiles the PTX.
      kernels.push_back({name, std::move(ptx->ptx), KernelImageFormat::kPtx});
    } else {
      return cubin.status();
    }
  }
  RegionExecutables regions;
  for (const ControlFlowOp& op : plan->control_flows) {
    std::vector<std::shared_ptr<const CudaExecutable>> executables;
    for (const auto& region : op.regions()) {
      absl::StatusOr<std::shared_ptr<const CudaExecutable>> e = compile(*region, devices, arch);
      if (!e.ok()) {
        return absl::Status(e.status().code(), absl::StrCat("[cuda_compile] @", program.name, " ",
                                                            std::string(ir::op_name(op.kind)), " region @", region->name,
                                                            ": ", e.status().message()));
      }
      executables.push_back(*std::move(e));
    }
    regions.push_back(std::move(executables));
  }
  return std::shared_ptr<const CudaExecutable>(
      new CudaExecutable(devices, arch, std::move(plan), std::move(kernels), std::move(regions)));
}

absl::StatusOr<const CudaExecutable::DeviceState*> CudaExecutable::state_on(const CudaDevice& device,
                                                                            absl::Time deadline) const {
  MutexLock lock(&mu_);
  auto it = states_.find(device.info().ordinal);
  if (it != states_.end()) return it->second.get();
  auto state = std::make_unique<DeviceState>();
  const DriverApi& api = device.api();
  for (const CompiledKernel& k : kernels_) {
    CUmodule m = nullptr;
    MCX_RETURN_IF_ERROR(device.check(api.cuModuleLoadData(&m, k.image.data()), absl::StrCat("loading kernel ", k.name)));
    state->modules.push_back(m);
    CUfunction f = nullptr;
    MCX_RETURN_IF_ERROR(device.check(api.cuModuleGetFunction(&f, m, k.name.c_str()), "cuModuleGetFunction"));
    state->functions.push_back(f);
  }
  for (const auto& [v, host] : plan_->constants) {
    MCX_ASSIGN_OR_RETURN(std::shared_ptr<DeviceMemory> mem, DeviceMemory::allocate(device, host.nbytes()));
    if (host.nbytes() > 0) MCX_RETURN_IF_ERROR(device.to_device(mem->address(), host.data(), host.nbytes(), deadline));
    state->constants[v] = std::move(mem);
  }
  const DeviceState* out = state.get();
  states_[device.info().ordinal] = std::move(state);
  return out;
}

absl::StatusOr<std::vector<std::shared_ptr<const DeviceBuffer>>> CudaExecutable::execute(
    std::span<const DeviceBuffer* const> args, const ExecutionContext* ctx) const {
  const ir::Program& p = plan_->program;
  const int local = ctx != nullptr ? ctx->local_device : 0;
  if (local < 0 || local >= static_cast<int>(devices_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("[cuda] execute on local device ", local, "; this process has ",
                                                   devices_.size(), " CUDA devices"));
  }
  const CudaDevice& device = *devices_[local];
  absl::Time deadline = ctx != nullptr ? ctx->deadline : absl::InfiniteFuture();
  if (ctx == nullptr) {
    MCX_ASSIGN_OR_RETURN(deadline, device_deadline_from_now());
  }
  if (static_cast<int>(args.size()) != p.num_params()) {
    return absl::InvalidArgumentError(absl::StrCat("[cuda] @", p.name, " takes ", p.num_params(), " arguments, got ",
                                                   args.size()));
  }
  std::vector<std::shared_ptr<DeviceMemory>> values(plan_->dims.size());
  for (int i = 0; i < p.num_params(); ++i) {
    const auto* b = dynamic_cast<const CudaDeviceBuffer*>(args[i]);
    if (b == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("[cuda] @", p.name, " argument ", i, ": expected a buffer on ",
                                                     device.label(), ", found ", args[i]->describe()));
    }
    if (b->dtype() != p.type(i).dtype || b->dims() != plan_->dims[i]) {
      return absl::InvalidArgumentError(absl::StrCat("[cuda] @", p.name, " argument ", i, ": expected ",
                                                     p.type(i).to_string(), ", found ", b->describe()));
    }
    if (&b->device() != &device) {
      return absl::InvalidArgumentError(absl::StrCat("[cuda] @", p.name, " argument ", i, " is on ", b->device().label(),
                                                     "; the program runs on ", device.label()));
    }
    values[i] = b->memory();
  }
  MCX_RETURN_IF_ERROR(device.make_current());
  MCX_ASSIGN_OR_RETURN(const DeviceState* state, state_on(device, deadline));
  for (const auto& [v, mem] : state->constants) values[v] = mem;
  const DriverApi& api = device.api();
  constexpr int kBlock = 256;
  std::vector<CUdeviceptr> pointers;  // a launch's parameters (reused: no allocation per launch)
  std::vector<int64_t> scalars;
  std::vector<void*> params;
  for (const Plan::Step& st : plan_->steps) {
    if (st.kind == Plan::Step::Kind::kAlias) {
      values[st.value] = values[st.source];
    } else if (st.allocate_outputs) {
      for (ValueId o : st.outputs) {
        const size_t bytes = static_cast<size_t>(product(plan_->dims[o])) * dtype_size(plan_->dtypes[o]);
        MCX_ASSIGN_OR_RETURN(values[o], DeviceMemory::allocate(device, bytes));
      }
    }
    if (st.kind == Plan::Step::Kind::kDebugPrint) {
      std::vector<Buffer> operands;
      for (ValueId o : st.inputs) {
        Buffer host = Buffer::uninitialized(plan_->dtypes[o], plan_->dims[o]);
        if (host.nbytes() > 0) MCX_RETURN_IF_ERROR(device.to_host(host.mutable_data(), values[o]->address(), host.nbytes(), deadline));
        operands.push_back(std::move(host));
      }
      MCX_ASSIGN_OR_RETURN(const std::optional<std::string> line,
                           ir::debug_print_line(p.instrs[st.instr].attrs, operands, ctx != nullptr ? ctx->partition_id : 0));
      if (line.has_value()) write_debug_print(*line);
      const int32_t zero = 0;
      MCX_RETURN_IF_ERROR(device.to_device(values[st.outputs[0]]->address(), &zero, sizeof(zero), deadline));
    } else if (st.kind == Plan::Step::Kind::kSpmd) {
      StagedValue operand;
      if (!st.inputs.empty()) {
        const ValueId o = st.inputs[0];
        operand = {values[o].get(), plan_->dtypes[o], plan_->dims[o]};
      }
      const ValueId r = st.outputs[0];
      const StagedValue result{values[r].get(), plan_->dtypes[r], plan_->dims[r]};
      const ir::Instr& op = p.instrs[st.instr];
      // The group is found once, for whichever path runs the op (axis_index has none: it runs on the host).
      std::optional<SpmdMember> member;
      if (op.kind != ir::OpKind::kAxisIndex) {
        MCX_ASSIGN_OR_RETURN(member, spmd_member(op, ctx));
      }
      bool on_device = false;
      if (member) {
        MCX_ASSIGN_OR_RETURN(on_device, run_spmd_op_on_device(op, device, *member, operand, result, ctx, deadline));
      }
      if (!on_device) {
        MCX_RETURN_IF_ERROR(run_staged_spmd_op(op, device, operand, result, ctx, member ? &*member : nullptr, deadline));
      }
    } else if (st.kind == Plan::Step::Kind::kControlFlow) {
      std::vector<std::shared_ptr<const CudaDeviceBuffer>> operands;
      for (ValueId o : st.inputs) {
        operands.push_back(std::make_shared<CudaDeviceBuffer>(plan_->dtypes[o], plan_->dims[o], values[o]));
      }
      ExecutionContext region_ctx = ctx != nullptr ? *ctx : ExecutionContext{};
      region_ctx.local_device = local;
      region_ctx.deadline = deadline;
      MCX_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<const CudaDeviceBuffer>> out,
                           run_control_flow(plan_->control_flows[st.control_flow], regions_[st.control_flow], device,
                                            std::move(operands), region_ctx));
      for (size_t k = 0; k < st.outputs.size(); ++k) values[st.outputs[k]] = out[k]->memory();
    } else if (st.kind == Plan::Step::Kind::kGemm) {
      const GemmShape& g = st.gemm;
      const uint64_t out = values[st.outputs[0]]->address();
      if (g.batch * g.m * g.n == 0) {
        // An empty result: nothing to compute.
      } else if (g.k == 0) {  // an empty sum: zeros
        MCX_RETURN_IF_ERROR(device.check(api.cuMemsetD8Async(static_cast<CUdeviceptr>(out), 0,
                                                              values[st.outputs[0]]->bytes(), device.stream()),
                                         "cuMemsetD8Async"));
      } else {
        MCX_RETURN_IF_ERROR(run_gemm(device, g, values[st.inputs[0]]->address(), values[st.inputs[1]]->address(), out));
      }
    } else if (st.kind == Plan::Step::Kind::kKernel && st.n > 0) {
      pointers.clear();
      for (ValueId v : st.inputs) pointers.push_back(static_cast<CUdeviceptr>(values[v]->address()));
      for (ValueId v : st.outputs) pointers.push_back(static_cast<CUdeviceptr>(values[v]->address()));
      int64_t n = st.n;
      scalars.assign(st.scalars.begin(), st.scalars.end());
      params.clear();
      for (CUdeviceptr& ptr : pointers) params.push_back(&ptr);
      for (int64_t& s : scalars) params.push_back(&s);
      params.push_back(&n);
      const int64_t blocks = std::clamp<int64_t>((st.n + kBlock - 1) / kBlock, 1, int64_t{device.info().sm_count} * 16);
      MCX_RETURN_IF_ERROR(device.check(
          api.cuLaunchKernel(state->functions[st.kernel], static_cast<unsigned>(blocks), 1, 1, kBlock, 1, 1, 0,
                             device.stream(), params.data(), nullptr),
          absl::StrCat("launching ", kernels_[st.kernel].name, " of @", p.name)));
    }
    for (ValueId v : st.release) values[v].reset();
  }
  // The results are complete when execute returns: the runtime marks a buffer ready then (block_until_ready
  // means done, as in JAX), and a kernel's asynchronous failure is reported by the op that caused it.
  MCX_RETURN_IF_ERROR(device.synchronize(deadline));
  std::vector<std::shared_ptr<const DeviceBuffer>> results;
  for (ValueId r : p.results) {
    results.push_back(std::make_shared<CudaDeviceBuffer>(p.type(r).dtype, plan_->dims[r], values[r]));
  }
  return results;
}

}  // namespace mcx::cuda
