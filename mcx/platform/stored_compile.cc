#include "mcx/platform/stored_compile.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"

#include "mcx/core/logging.h"
#include "mcx/core/mutex.h"
#include "mcx/core/profiler.h"

namespace mcx {
namespace {

struct Counters {
  Mutex mu;
  ExecutableStoreStats stats ABSL_GUARDED_BY(mu);
};

Counters& counters() {
  static auto* c = new Counters();  // never destroyed: compiles may run until the process exits
  return *c;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

size_t first_difference(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return i;
  }
  return n;
}

CompiledKey executable_key(const Platform& platform, std::string canonical_encoding) {
  return CompiledKey{kCompiledExecutable, std::string(platform.name()), std::move(canonical_encoding),
                     /*device_assignment=*/"", platform.compile_key()};
}

absl::StatusOr<std::shared_ptr<const Executable>> load_or_compile(const Platform& platform, const ir::Program& program,
                                                                  std::string_view canonical_encoding) {
  profiler::Scope traced("compile", "compile ", program.name);
  if (traced.recording()) {
    traced.arg("platform", platform.name()).arg("instructions", static_cast<int64_t>(program.instrs.size()));
  }
  std::shared_ptr<CompiledStore> store = compiled_store();
  if (!store) {
    traced.arg("source", "compiled");
    return platform.compile(program);
  }
  // Only with a store: the key copies the encoding and asks the platform for its compile key.
  const CompiledKey key = executable_key(platform, std::string(canonical_encoding));
  Counters& c = counters();
  const auto t0 = std::chrono::steady_clock::now();
  MCX_ASSIGN_OR_RETURN(std::optional<std::string> stored, store->load(key));
  const bool check = stored.has_value() && store->check_this_hit();
  if (stored && !check) {
    absl::StatusOr<std::shared_ptr<const Executable>> exe = platform.deserialize(*stored);
    if (exe.ok()) {
      traced.arg("source", "persistent cache");
      MutexLock lock(&c.mu);
      ++c.stats.loaded;
      c.stats.load_ms_total += ms_since(t0);
      return exe;
    }
    {
      MutexLock lock(&c.mu);
      ++c.stats.load_failures;
    }
    MCX_RETURN_IF_ERROR(store->problem(absl::Status(
        exe.status().code(), absl::StrCat("[compile on ", std::string(platform.name()), "] a stored executable of ", program.name,
                                          " did not load, compiling it: ", std::string(exe.status().message())))));
  }
  const auto t1 = std::chrono::steady_clock::now();
  traced.arg("source", check ? "compiled (checking a cache hit)" : "compiled (cache miss)");
  absl::StatusOr<std::shared_ptr<const Executable>> exe = platform.compile(program);
  if (!exe.ok()) return exe;
  const double compile_ms = ms_since(t1);
  {
    MutexLock lock(&c.mu);
    ++c.stats.compiled;
  }
  if (!check && !store->wants(compile_ms)) return exe;
  absl::StatusOr<std::string> bytes = (*exe)->serialize();
  if (!bytes.ok()) {
    log_warn("[compile on {}] could not serialise the executable of {}: {}", platform.name(), program.name,
             std::string(bytes.status().message()));
    return exe;
  }
  if (check) {
    const bool same = *bytes == *stored;
    {
      MutexLock lock(&c.mu);
      ++c.stats.checked;
      c.stats.check_mismatches += same ? 0 : 1;
    }
    if (same) return exe;
    MCX_RETURN_IF_ERROR(store->problem(absl::DataLossError(absl::StrCat(
        "[compile on ", std::string(platform.name()), "] the stored executable of ", program.name, " (", stored->size(),
        " bytes) differs from a fresh compile (", bytes->size(), " bytes, first difference at byte ",
        first_difference(*bytes, *stored), "): the fresh one is used and stored in its place"))));
  }
  MCX_RETURN_IF_ERROR(store->save(key, *bytes, compile_ms));
  MutexLock lock(&c.mu);
  ++c.stats.offered;
  return exe;
}

ExecutableStoreStats executable_store_stats() {
  Counters& c = counters();
  MutexLock lock(&c.mu);
  return c.stats;
}

}  // namespace mcx
