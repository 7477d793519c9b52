#include "tests/support/fake_cuda/emulated_kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/ThreadSafeModule.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"

namespace {

constexpr char kMagic[8] = {'M', 'C', 'X', 'H', 'O', 'S', 'T', 'K'};

// The inverse error function, which C's library lacks: Giles's single-precision approximation ("Approximating
// the erfinv function", 2010) refined by Newton's method on erf in long double (so the double result is
// correctly rounded but for rare ties).
double erfinv(double y) {
  if (std::isnan(y) || y < -1 || y > 1) return std::nan("");
  if (y == 1) return HUGE_VAL;
  if (y == -1) return -HUGE_VAL;
  double w = -std::log((1.0 - y) * (1.0 + y));
  double p;
  if (w < 5) {
    w -= 2.5;
    p = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                     -0.00417768164, 0.246640727, 1.50140941}) {
      p = c + p * w;
    }
  } else {
    w = std::sqrt(w) - 3;
    p = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
                     1.00167406, 2.83297682}) {
      p = c + p * w;
    }
  }
  long double x = p * y;
  for (int i = 0; i < 4; ++i) {
    const long double slope = 1.12837916709551257389615890312154517L * std::exp(-x * x);  // erf'(x)
    if (slope == 0) break;
    x -= (std::erf(x) - static_cast<long double>(y)) / slope;
  }
  return static_cast<double>(x);
}

}  // namespace

extern "C" {
double mcx_emulated_erfinv(double y) { return erfinv(y); }
float mcx_emulated_erfinvf(float y) { return static_cast<float>(erfinv(y)); }
}

namespace mcx::fake_cuda {
namespace {

struct Jit {
  std::mutex mu;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::map<size_t, llvm::orc::JITDylib*> modules;  // guarded by mu
  size_t next = 1;                                 // guarded by mu
  std::string error;                               // why jit is null
};

Jit& the_jit() {
  static Jit* j = [] {
    auto* out = new Jit;
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::Expected<std::unique_ptr<llvm::orc::LLJIT>> jit = llvm::orc::LLJITBuilder().create();
    if (jit) {
      out->jit = std::move(*jit);
    } else {
      out->error = llvm::toString(jit.takeError());
    }
    return out;
  }();
  return *j;
}

}  // namespace

bool is_host_kernel_image(const void* image) { return std::memcmp(image, kMagic, sizeof(kMagic)) == 0; }

size_t load_host_module(const void* image, std::string* error) {
  Jit& j = the_jit();
  if (j.jit == nullptr) {
    *error = "no JIT: " + j.error;
    return 0;
  }
  const auto* bytes = static_cast<const unsigned char*>(image);
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= static_cast<uint64_t>(bytes[sizeof(kMagic) + i]) << (8 * i);
  const llvm::StringRef bitcode(reinterpret_cast<const char*>(bytes + sizeof(kMagic) + 8), length);
  auto ctx = std::make_unique<llvm::LLVMContext>();
  llvm::Expected<std::unique_ptr<llvm::Module>> m = llvm::parseBitcodeFile(llvm::MemoryBufferRef(bitcode, "kernel"), *ctx);
  if (!m) {
    *error = llvm::toString(m.takeError());
    return 0;
  }
  std::lock_guard<std::mutex> lock(j.mu);
  const size_t id = j.next++;
  llvm::Expected<llvm::orc::JITDylib&> lib = j.jit->createJITDylib("module" + std::to_string(id));
  if (!lib) {
    *error = llvm::toString(lib.takeError());
    return 0;
  }
  const llvm::DataLayout& layout = j.jit->getDataLayout();
  (*m)->setDataLayout(layout);
  llvm::Expected<std::unique_ptr<llvm::orc::DynamicLibrarySearchGenerator>> process =
      llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(layout.getGlobalPrefix());
  if (!process) {
    *error = llvm::toString(process.takeError());
    return 0;
  }
  lib->addGenerator(std::move(*process));
  llvm::orc::MangleAndInterner mangle(j.jit->getExecutionSession(), layout);
  llvm::orc::SymbolMap erfinv_symbols;
  erfinv_symbols[mangle("mcx_emulated_erfinv")] = {llvm::orc::ExecutorAddr::fromPtr(&mcx_emulated_erfinv),
                                                   llvm::JITSymbolFlags::Exported};
  erfinv_symbols[mangle("mcx_emulated_erfinvf")] = {llvm::orc::ExecutorAddr::fromPtr(&mcx_emulated_erfinvf),
                                                    llvm::JITSymbolFlags::Exported};
  if (llvm::Error e = lib->define(llvm::orc::absoluteSymbols(std::move(erfinv_symbols)))) {
    *error = llvm::toString(std::move(e));
    return 0;
  }
  if (llvm::Error e = j.jit->addIRModule(*lib, llvm::orc::ThreadSafeModule(std::move(*m), std::move(ctx)))) {
    *error = llvm::toString(std::move(e));
    return 0;
  }
  j.modules[id] = &*lib;
  return id;
}

KernelEntry host_kernel(size_t module, const char* name) {
  Jit& j = the_jit();
  llvm::orc::JITDylib* lib = nullptr;
  {
    std::lock_guard<std::mutex> lock(j.mu);
    auto it = j.modules.find(module);
    if (it == j.modules.end()) return nullptr;
    lib = it->second;
  }
  llvm::Expected<llvm::orc::ExecutorAddr> entry = j.jit->lookup(*lib, name);
  if (!entry) {
    llvm::consumeError(entry.takeError());
    return nullptr;
  }
  return entry->toPtr<KernelEntry>();
}

bool unload_host_module(size_t module) {
  Jit& j = the_jit();
  std::lock_guard<std::mutex> lock(j.mu);
  auto it = j.modules.find(module);
  if (it == j.modules.end()) return false;
  llvm::consumeError(j.jit->getExecutionSession().removeJITDylib(*it->second));
  j.modules.erase(it);
  return true;
}

}  // namespace mcx::fake_cuda
