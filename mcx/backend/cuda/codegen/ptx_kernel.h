// A generated GPU kernel as PTX, what every generator of mcx/backend/cuda/codegen returns. No LLVM.
#pragma once

#include <string>

namespace mcx::cuda::codegen {

struct PtxKernel {
  std::string name;  // the .entry to launch
  std::string ptx;
  int arch = 0;      // sm_<arch> it was generated for
};

}  // namespace mcx::cuda::codegen
