// PTX to a cubin for one GPU architecture, through CUDA's nvJitLink (loaded at run time from
// libnvJitLink.so.13, never linked). Works without a GPU or a driver: the tests assemble every generated
// kernel for sm_90 and sm_80 on machines that have neither.
//
// Thread-safety: thread-safe (one nvJitLink handle per call).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace mcx::cuda {

struct AssembledKernel {
  std::string cubin;  // the ELF image cuModuleLoadData takes
  std::string info;   // the assembler's report (registers, spills, shared memory per kernel)
};

// Assembles `ptx` for sm_<arch> (90 for Hopper, 80 for Ampere) at -O3. InvalidArgument with the assembler's
// log when the PTX is rejected; FailedPrecondition when nvJitLink cannot be loaded.
absl::StatusOr<AssembledKernel> assemble_ptx(std::string_view ptx, int arch);

// nvJitLink's version, "13.0"; FailedPrecondition when it cannot be loaded.
absl::StatusOr<std::string> ptx_assembler_version();

}  // namespace mcx::cuda
