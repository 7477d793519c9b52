#include "mcx/backend/cpu/codegen/fused_kernel.h"

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "mcx/backend/cpu/codegen/kernel_registry.h"
#include "mcx/backend/cpu/codegen/kernel_sharing.h"
#include "mcx/backend/cpu/codegen/kernel_key.h"
#include "mcx/backend/cpu/codegen/llvm_compiler.h"
#include "mcx/backend/cpu/elementwise.h"
#include "mcx/backend/cpu/platform_name.h"
#include "mcx/core/config.h"
#include "mcx/core/error.h"
#include "mcx/core/hash.h"
#include "mcx/core/logging.h"
#include "mcx/platform/stored_compile.h"

namespace mcx::cpu::codegen {
namespace {

using ir::OpKind;

const Flag<bool> kCodegenFlag("MCX_CODEGEN", true,
                              "generate machine code (LLVM) for fused element-wise regions; 0 runs the "
                              "interpreter's kernels (also the fallback where LLVM is not built in)");

// -1: not decided yet; else 0/1. Decided from the flag on first use.
std::atomic<int> g_enabled{-1};

struct Entry {
  std::once_flag once;
  absl::StatusOr<std::shared_ptr<const GeneratedKernel>> result = absl::UnknownError("not compiled");
};

struct Registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<Entry>> by_signature;  // guarded by mu
  CodegenStats stats;                                          // guarded by mu
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: kernels live until the process exits
  return *r;
}

}  // namespace

bool built_with_llvm() {
#ifdef MCX_WITH_LLVM
  return true;
#else
  return false;
#endif
}

bool enabled() {
  int v = g_enabled.load(std::memory_order_acquire);
  if (v < 0) {
    absl::StatusOr<bool> flag = kCodegenFlag.get();
    v = (built_with_llvm() && (!flag.ok() || *flag)) ? 1 : 0;
    int expected = -1;
    if (!g_enabled.compare_exchange_strong(expected, v)) v = expected;
  }
  return v == 1;
}

void set_enabled(bool on) { g_enabled.store(on && built_with_llvm() ? 1 : 0, std::memory_order_release); }

std::string unsupported_reason(const FusedGroup& g) {
  for (const FusedNode& n : g.nodes) {
    if (n.kind == OpKind::kPow && !is_floating(n.dtype)) {
      return absl::StrCat("integer pow on ", std::string(dtype_short_name(n.dtype)));
    }
    if (!elementwise_supported(n.kind, n.dtype, n.operand_dtype)) {
      return absl::StrCat(std::string(ir::op_name(n.kind)), " on ", std::string(dtype_short_name(n.dtype)),
                          " has no kernel");
    }
  }
  if (g.outputs.empty()) return "no outputs";
  return "";
}

std::string signature(const FusedGroup& g) {
  std::string s = "leaves";
  for (DType t : g.leaf_dtypes) absl::StrAppend(&s, " ", std::string(dtype_short_name(t)));
  for (const FusedNode& n : g.nodes) {
    absl::StrAppend(&s, "; ", std::string(ir::op_name(n.kind)), " ", std::string(dtype_short_name(n.dtype)), "(",
                    std::string(dtype_short_name(n.operand_dtype)), ")");
    for (int a : n.args) absl::StrAppend(&s, " %", a);
  }
  absl::StrAppend(&s, "; outputs");
  for (int o : g.outputs) absl::StrAppend(&s, " ", o);
  return s;
}

namespace {

std::string symbol_of(const KernelSource& src, const std::string& sig) {
  const char* prefix = std::holds_alternative<const RowProgram*>(src) ? "mcx_rows_" : "mcx_fused_";
  return prefix + to_hex(sha256(sig)).substr(0, 24);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

enum class Source { kStore, kPeer, kCompiled };

// Links object into the JIT as k's code and counts where it came from.
absl::StatusOr<std::shared_ptr<const GeneratedKernel>> link(std::shared_ptr<GeneratedKernel> k, std::string_view object,
                                                            Source source, std::chrono::steady_clock::time_point t0) {
  MCX_ASSIGN_OR_RETURN(k->code, llvm_load_object(object, k->symbol));
  k->object = std::string(object);
  k->from_store = source == Source::kStore;
  k->from_peer = source == Source::kPeer;
  k->compile_ms = ms_since(t0);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  switch (source) {
    case Source::kStore: ++r.stats.kernels_loaded; break;
    case Source::kPeer: ++r.stats.kernels_from_peers; break;
    case Source::kCompiled: ++r.stats.kernels_compiled; break;
  }
  (source == Source::kCompiled ? r.stats.compile_ms_total : r.stats.load_ms_total) += k->compile_ms;
  return std::shared_ptr<const GeneratedKernel>(std::move(k));
}

// Counts a checked hit (CodegenStats::kernels_checked).
void count_check(bool same) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  ++r.stats.kernels_checked;
  r.stats.kernel_check_mismatches += same ? 0 : 1;
}

// src's kernel from the kernel store, else from another process of the job, else compiled (and offered to
// both). symbol_suffix: a name apart from an object that failed to link (it may be partly defined in the JIT).
absl::StatusOr<std::shared_ptr<const GeneratedKernel>> make_kernel(const KernelSource& src, const std::string& sig,
                                                                   std::string_view symbol_suffix = "") {
  auto k = std::make_shared<GeneratedKernel>();
  k->symbol = symbol_of(src, sig) + std::string(symbol_suffix);
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<CompiledStore> store = compiled_store();
  const KernelKey key{sig, target_description()};
  // Only with a store: its key names the platform and splits the target into named components.
  const CompiledKey stored = store ? CompiledKey{kCompiledKernel, std::string(kCpuPlatformName), sig, "", target_components()} : CompiledKey{};
  // An object that does not link may be partly defined in the JIT: the fallback compiles under another name.
  auto fall_back = [&](const char* what, const absl::Status& why) {
    log_warn("[codegen] {} kernel {} did not load, compiling it: {}", what, k->symbol, std::string(why.message()));
    k->symbol += "_recompiled";
  };
  std::optional<std::string> stored_object;
  bool check = false;  // a hit compiled again and compared (MCX_COMPILATION_CACHE_CHECK_CONTENTS)
  if (store) {
    MCX_ASSIGN_OR_RETURN(stored_object, store->load(stored));
    check = stored_object.has_value() && store->check_this_hit();
    if (stored_object && !check) {
      auto linked = link(k, *stored_object, Source::kStore, t0);
      if (linked.ok()) return linked;
      MCX_RETURN_IF_ERROR(store->problem(absl::Status(
          linked.status().code(), absl::StrCat("[codegen] stored kernel ", k->symbol, " did not link: ",
                                               linked.status().message()))));
      k->symbol += "_recompiled";  // the object may be partly defined in the JIT
    }
  }
  // Another process of the job may compile it for us (kernel_sharing.h); a checked hit is compiled here.
  ShareOutcome shared;
  if (sharing_enabled() && !check) shared = share_or_claim(key);
  if (shared.kind == ShareOutcome::kFromPeer) {
    if (store) MCX_RETURN_IF_ERROR(store->save(stored, shared.object, ms_since(t0)));  // node-local caches warm up too
    auto linked = link(k, shared.object, Source::kPeer, t0);
    if (linked.ok()) return linked;
    fall_back("shared", linked.status());
  } else if (!shared.why.empty()) {
    log_warn("[codegen] compiling kernel {} here: {}", k->symbol, shared.why);
  }
  absl::StatusOr<std::string> object = llvm_compile_object(src, k->symbol);
  if (shared.kind == ShareOutcome::kOwner) publish_shared(key, object.ok() ? *object : std::string());
  if (!object.ok()) return object.status();
  const bool same = check && *object == *stored_object;  // a checked hit whose entry is already right
  if (check) {
    count_check(same);
    if (!same) {
      MCX_RETURN_IF_ERROR(store->problem(absl::DataLossError(absl::StrCat(
          "[codegen] the stored object of kernel ", k->symbol, " (", stored_object->size(),
          " bytes) differs from a fresh compile (", object->size(), " bytes, first difference at byte ",
          first_difference(*object, *stored_object), "): the fresh one is used and stored in its place"))));
    }
  }
  if (store && !same) MCX_RETURN_IF_ERROR(store->save(stored, *object, ms_since(t0)));
  return link(k, *object, Source::kCompiled, t0);
}

}  // namespace

namespace {

// The kernel for a signature: the one already in this process, else make() (called once per signature, for
// sources the generator takes: `unsupported()` is empty).
template <typename Make>
absl::StatusOr<std::shared_ptr<const GeneratedKernel>> kernel_for(const std::string& sig,
                                                                  const UnsupportedReason& unsupported, Make make) {
  if (!built_with_llvm()) {
    return absl::UnimplementedError("[codegen] this build has no LLVM code generator (MCX_WITH_LLVM=OFF)");
  }
  // One entry per signature, decided once: a warm process meets the same few signatures in hundreds of
  // groups, and a signature the generator does not take is not examined again.
  Registry& r = registry();
  std::shared_ptr<Entry> entry;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    std::shared_ptr<Entry>& slot = r.by_signature[sig];
    if (!slot) slot = std::make_shared<Entry>();
    entry = slot;
  }
  bool made_here = false;
  std::call_once(entry->once, [&] {
    made_here = true;
    if (std::string why = unsupported(); !why.empty()) {
      entry->result = absl::UnimplementedError(absl::StrCat("[codegen] not generated: ", why));
    } else {
      entry->result = make();
    }
  });
  if (!made_here && entry->result.ok()) {
    std::lock_guard<std::mutex> lock(r.mu);
    ++r.stats.kernel_reuses;
  }
  return entry->result;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const GeneratedKernel>> compile_kernel(const KernelSource& src, const std::string& sig,
                                                                      const UnsupportedReason& unsupported) {
  return kernel_for(sig, unsupported, [&] { return make_kernel(src, sig); });
}

absl::StatusOr<std::shared_ptr<const GeneratedKernel>> load_kernel(const KernelSource& src, const std::string& sig,
                                                                   const UnsupportedReason& unsupported,
                                                                   std::string_view object) {
  return kernel_for(sig, unsupported, [&]() -> absl::StatusOr<std::shared_ptr<const GeneratedKernel>> {
    auto k = std::make_shared<GeneratedKernel>();
    k->symbol = symbol_of(src, sig);
    auto linked = link(k, object, Source::kStore, std::chrono::steady_clock::now());
    if (linked.ok()) return linked;
    log_warn("[codegen] kernel {} of a serialised executable did not load, compiling it: {}", k->symbol,
             std::string(linked.status().message()));
    return make_kernel(src, sig, "_relinked");
  });
}

absl::StatusOr<std::shared_ptr<const GeneratedKernel>> compile_fused(const FusedGroup& g) {
  return compile_kernel(&g, signature(g), [&] { return unsupported_reason(g); });
}

absl::StatusOr<std::shared_ptr<const GeneratedKernel>> load_fused(const FusedGroup& g, std::string_view object) {
  return load_kernel(&g, signature(g), [&] { return unsupported_reason(g); }, object);
}

std::string target_description() { return built_with_llvm() ? llvm_target_description() : "none"; }

std::vector<KeyComponent> target_components() {
  const std::vector<std::string> parts = absl::StrSplit(target_description(), "; ");
  const char* const kNames[] = {"llvm_version", "generator", "cpu", "cpu_features"};
  std::vector<KeyComponent> components;
  for (size_t i = 0; i < parts.size(); ++i) {
    components.push_back({i < 4 ? kNames[i] : absl::StrCat("target_", i), parts[i]});
  }
  return components;
}

CodegenStats stats() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.stats;
}

}  // namespace mcx::cpu::codegen
