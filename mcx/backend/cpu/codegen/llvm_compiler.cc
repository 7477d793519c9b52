// The process-wide ORC JIT and the O3 pipeline for generated kernels (see fused_kernel.h).
//
// One LLJIT per process, made on first use and never destroyed (kernels stay callable until exit).
// Compiling and loading are separate steps, so that a kernel's object code can be kept (the persistent
// compilation cache) and loaded by a later process without running LLVM's optimiser or code generator:
// compile_object builds the module in its own LLVMContext, optimises it on the calling thread with the
// host's TargetMachine (so the loop vectoriser sees the host's vector width) and emits a relocatable object;
// load_object links such an object into the JIT. Symbols the kernels call: the math helpers
// (math_helpers.h, by address) and glibc's libmvec vector functions (looked up in libmvec.so.1 once; a
// variant that is missing is simply not offered to the vectoriser).
#include "mcx/backend/cpu/codegen/llvm_compiler.h"
#include "mcx/kernelgen/optimize.h"

#include <dlfcn.h>

#include <cmath>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "llvm/Analysis/TargetLibraryInfo.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/ExecutionEngine/Orc/Core.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/ThreadSafeModule.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "mcx/backend/cpu/codegen/fused_emitter.h"
#include "mcx/backend/cpu/codegen/row_emitter.h"
#include "mcx/backend/cpu/codegen/math_helpers.h"
#include "mcx/core/config.h"
#include "mcx/core/error.h"

namespace mcx::cpu::codegen {
namespace {

const Flag<std::string> kDumpDirFlag(
    "MCX_CODEGEN_DUMP_DIR", "",
    "directory where the code generator writes each kernel's LLVM IR before (<symbol>.ll) and after "
    "(<symbol>.opt.ll) optimisation; empty: none");

void dump_module(const llvm::Module& m, const std::string& file) {
  absl::StatusOr<std::string> dir = kDumpDirFlag.get();
  if (!dir.ok() || dir->empty()) return;
  std::error_code ec;
  llvm::raw_fd_ostream os(*dir + "/" + file, ec);
  if (!ec) m.print(os, nullptr);
}

std::string llvm_message(llvm::Error e) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << e;
  return s;
}

// libmvec's ISA letters and vector widths (bits): b = SSE4 (128), d = AVX2 (256), e = AVX-512 (512). The
// interpreter's target_clones pick the same ISA for the same host, so the same vector function runs.
struct Isa {
  char letter;
  int bits;
  const char* feature;  // host feature that must be present ("" = baseline x86-64)
};
constexpr Isa kIsas[] = {{'b', 128, ""}, {'d', 256, "avx2"}, {'e', 512, "avx512f"}};

#if defined(MCX_SANITIZER_BUILD)
// Sanitizer builds instrument the interpreter's vmath loops, which then need not be vectorised into libmvec
// calls (ThreadSanitizer's are not: they compute with scalar libm), so libmvec's values would not be the
// interpreter's. There kernels call the scalar helpers, which are vmath itself: bit for bit the interpreter,
// at a cost only sanitizer runs pay.
constexpr bool kOfferVectorVariants = false;
#else
constexpr bool kOfferVectorVariants = true;
#endif

class Session {
 public:
  static absl::StatusOr<Session*> get() {
    static absl::StatusOr<Session*>* s = new absl::StatusOr<Session*>(create());
    return *s;
  }

  absl::StatusOr<std::string> compile_object(const KernelSource& src, const std::string& symbol) {
    auto ctx = std::make_unique<llvm::LLVMContext>();
    absl::StatusOr<std::unique_ptr<llvm::Module>> emitted =
        std::holds_alternative<const FusedGroup*>(src)
            ? emit_fused_module(*std::get<const FusedGroup*>(src), symbol, *ctx, variants_)
            : emit_row_module(*std::get<const RowProgram*>(src), symbol, *ctx, variants_);
    MCX_ASSIGN_OR_RETURN(std::unique_ptr<llvm::Module> m, std::move(emitted));
    llvm::orc::JITTargetMachineBuilder jtmb = jtmb_;  // copied: createTargetMachine is not const
    auto tm = jtmb.createTargetMachine();
    if (!tm) return absl::InternalError(absl::StrCat("[codegen] target machine: ", llvm_message(tm.takeError())));
    m->setDataLayout((*tm)->createDataLayout());
    m->setTargetTriple((*tm)->getTargetTriple().str());
    for (llvm::Function& f : *m) {
      if (f.isDeclaration()) continue;
      f.addFnAttr("target-cpu", cpu_);
      f.addFnAttr("target-features", features_);
    }
    {
      std::string err;
      llvm::raw_string_ostream os(err);
      if (llvm::verifyModule(*m, &os)) return absl::InternalError(absl::StrCat("[codegen] invalid IR: ", err));
    }
    dump_module(*m, symbol + ".ll");
    optimize(*m, **tm);
    dump_module(*m, symbol + ".opt.ll");
    // Machine code into a relocatable object in memory (what ORC's own IR compiler does).
    llvm::SmallVector<char, 0> object;
    llvm::raw_svector_ostream os(object);
    llvm::legacy::PassManager pm;
    if ((*tm)->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile)) {
      return absl::InternalError("[codegen] the target cannot emit object files");
    }
    pm.run(*m);
    return std::string(object.data(), object.size());
  }

  absl::StatusOr<void*> load_object(std::string_view object, const std::string& symbol) {
    std::unique_ptr<llvm::MemoryBuffer> buffer =
        llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(object.data(), object.size()), symbol);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (llvm::Error e = jit_->addObjectFile(std::move(buffer))) {
        return absl::InternalError(absl::StrCat("[codegen] adding ", symbol, ": ", llvm_message(std::move(e))));
      }
    }
    auto addr = jit_->lookup(symbol);  // links the object
    if (!addr) {
      return absl::InternalError(absl::StrCat("[codegen] linking ", symbol, ": ", llvm_message(addr.takeError())));
    }
    return addr->toPtr<void*>();
  }

  // The generator's sources are part of its identity: a changed emitter must not load objects an older one
  // made (MCX_CODEGEN_SOURCE_DIGEST: SHA-256 of the codegen sources, computed by CMake at configure time).
  std::string description() const {
    return absl::StrCat("llvm ", LLVM_VERSION_STRING, "; generator ", MCX_CODEGEN_SOURCE_DIGEST, "; cpu ", cpu_,
                        "; ", features_);
  }

 private:
  explicit Session(llvm::orc::JITTargetMachineBuilder jtmb) : jtmb_(std::move(jtmb)) {}

  static absl::StatusOr<Session*> create() {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!jtmb) return absl::InternalError(absl::StrCat("[codegen] host: ", llvm_message(jtmb.takeError())));
    jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
    // IEEE arithmetic as written: no contraction of a*b+c into an FMA (the interpreter computes each node
    // separately, rounding in between).
    jtmb->getOptions().AllowFPOpFusion = llvm::FPOpFusion::Strict;
    auto* s = new Session(*jtmb);
    s->cpu_ = jtmb->getCPU();
    s->features_ = jtmb->getFeatures().getString();
    s->feature_list_ = jtmb->getFeatures().getFeatures();
    // Kernels of one program load on several pool threads at once. Kernels have no static constructors
    // or destructors, so no platform support (the default one compiles an IR module of its own at start).
    auto jit = llvm::orc::LLJITBuilder()
                   .setJITTargetMachineBuilder(*jtmb)
                   .setSupportConcurrentCompilation(true)
                   .setPlatformSetUp(llvm::orc::setUpInactivePlatform)
                   .create();
    if (!jit) return absl::InternalError(absl::StrCat("[codegen] LLJIT: ", llvm_message(jit.takeError())));
    s->jit_ = std::move(*jit);
    MCX_RETURN_IF_ERROR(s->define_runtime_symbols());
    return s;
  }

  bool host_has(const char* feature) const {
    if (*feature == '\0') return true;
    for (const std::string& f : feature_list_) {
      if (f.size() > 1 && f[0] == '+' && f.compare(1, std::string::npos, feature) == 0) return true;
    }
    return false;
  }

  // Defines the helpers and the libmvec variants in the main JITDylib by address, and records which
  // variants exist for each helper.
  absl::Status define_runtime_symbols() {
    llvm::orc::SymbolMap symbols;
    auto define = [&](const std::string& name, void* address) {
      symbols[jit_->mangleAndIntern(name)] = llvm::orc::ExecutorSymbolDef(
          llvm::orc::ExecutorAddr::fromPtr(address), llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable);
    };
    void* libmvec = dlopen("libmvec.so.1", RTLD_NOW | RTLD_GLOBAL);  // kept open for the process
    for (const MathHelper& h : math_helpers()) {
      define(std::string(h.name), h.address);
      if (!kOfferVectorVariants || h.libmvec_stem.empty() || libmvec == nullptr) continue;
      std::vector<VectorVariant>& vs = variants_[std::string(h.name)];
      for (const Isa& isa : kIsas) {
        if (!host_has(isa.feature)) continue;
        const int width = isa.bits / (h.is_double ? 64 : 32);
        std::string sym = absl::StrCat("_ZGV", std::string(1, isa.letter), "N", width, std::string(h.arity, 'v'),
                                       "_", std::string(h.libmvec_stem));
        void* address = dlsym(libmvec, sym.c_str());
        if (address == nullptr) continue;
        define(sym, address);
        vs.push_back({width, std::move(sym)});
      }
    }
    // The remaining libm functions a kernel may call after lowering (fmodf/fmod for frem).
    define("fmodf", reinterpret_cast<void*>(static_cast<float (*)(float, float)>(&fmodf)));
    define("fmod", reinterpret_cast<void*>(static_cast<double (*)(double, double)>(&fmod)));
    if (llvm::Error e = jit_->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(symbols)))) {
      return absl::InternalError(absl::StrCat("[codegen] runtime symbols: ", llvm_message(std::move(e))));
    }
    return absl::OkStatus();
  }

  static void optimize(llvm::Module& m, llvm::TargetMachine& tm) {
    llvm::PipelineTuningOptions pto;
    pto.LoopVectorization = true;
    pto.SLPVectorization = true;
    kernelgen::optimize_o3(m, tm, pto);
  }

  llvm::orc::JITTargetMachineBuilder jtmb_;
  std::string cpu_, features_;
  std::vector<std::string> feature_list_;  // "+avx2", "-avx512f", ...
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  VectorVariants variants_;  // written once in create()
  std::mutex mu_;            // serialises additions to the JITDylib
};

}  // namespace

absl::StatusOr<std::string> llvm_compile_object(const KernelSource& src, const std::string& symbol) {
  MCX_ASSIGN_OR_RETURN(Session * s, Session::get());
  return s->compile_object(src, symbol);
}

absl::StatusOr<void*> llvm_load_object(std::string_view object, const std::string& symbol) {
  MCX_ASSIGN_OR_RETURN(Session * s, Session::get());
  return s->load_object(object, symbol);
}

std::string llvm_target_description() {
  absl::StatusOr<Session*> s = Session::get();
  if (!s.ok()) return absl::StrCat("llvm ", LLVM_VERSION_STRING, "; unavailable: ", s.status().message());
  return (*s)->description();
}

}  // namespace mcx::cpu::codegen
