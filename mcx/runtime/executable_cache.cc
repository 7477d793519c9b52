#include "mcx/runtime/executable_cache.h"

#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/backend/cpu/executable_store.h"
#include "mcx/core/error.h"
#include "mcx/ir/fingerprint.h"

namespace mcx {

std::string program_key(const ir::Program& program) { return ir::canonical_encoding(program); }

ExecutableCache& ExecutableCache::global() {
  static ExecutableCache* cache = new ExecutableCache();  // never destroyed: used until process exit
  return *cache;
}

absl::StatusOr<ExecutableCache::ExecutablePtr> ExecutableCache::get_or_compile(const ir::Program& program) {
  return get_or_compile(program_key(program), program);
}

absl::StatusOr<ExecutableCache::ExecutablePtr> ExecutableCache::get_or_compile(const std::string& key,
                                                                              const ir::Program& program) {
  // Whether kernels are generated is a compile option: an executable compiled with it must not answer a
  // lookup made without it (tests and benchmarks switch it within one process). One table per setting, so
  // the key (which holds constants' bytes) is not copied on this hot path.
  const int table = cpu::codegen::enabled() ? 1 : 0;
  {
    MutexLock lock(&mu_);
    auto it = entries_[table].find(key);
    if (it != entries_[table].end()) {
      ++hits_;
      return it->second;
    }
    ++misses_;
  }
  // A miss here compiles, or reads the executable back from the persistent cache when one is installed
  // (backend/cpu/executable_store.h): the key is the same canonical encoding.
  MCX_ASSIGN_OR_RETURN(ExecutablePtr exe, cpu::load_or_compile(program, key));
  MutexLock lock(&mu_);
  auto [it, inserted] = entries_[table].emplace(key, exe);
  return it->second;
}

int64_t ExecutableCache::size() const {
  MutexLock lock(&mu_);
  return static_cast<int64_t>(entries_[0].size() + entries_[1].size());
}
int64_t ExecutableCache::hits() const {
  MutexLock lock(&mu_);
  return hits_;
}
int64_t ExecutableCache::misses() const {
  MutexLock lock(&mu_);
  return misses_;
}
void ExecutableCache::clear() {
  MutexLock lock(&mu_);
  for (auto& table : entries_) table.clear();
}

absl::StatusOr<std::vector<ArrayValue>> execute(const cpu::CpuExecutable& exe,
                                                std::span<const ArrayValue> args) {
  std::vector<Buffer> buffers;
  buffers.reserve(args.size());
  for (const ArrayValue& a : args) {
    MCX_ASSIGN_OR_RETURN(Buffer b, a.to_buffer());
    buffers.push_back(std::move(b));
  }
  MCX_ASSIGN_OR_RETURN(std::vector<Buffer> outs, exe.execute(buffers));
  std::vector<ArrayValue> result;
  result.reserve(outs.size());
  for (Buffer& b : outs) result.push_back(ArrayValue::single(std::move(b), default_device()));
  return result;
}

}  // namespace mcx
