#include "mcx/runtime/executable_cache.h"

#include "mcx/core/error.h"
#include "mcx/ir/fingerprint.h"
#include "absl/strings/str_cat.h"
#include "mcx/platform/stored_compile.h"
#include "mcx/runtime/device_platform.h"

namespace mcx {

std::string program_key(const ir::Program& program) { return ir::canonical_encoding(program); }

ExecutableCache& ExecutableCache::global() {
  static ExecutableCache* cache = new ExecutableCache();  // never destroyed: used until process exit
  return *cache;
}

absl::StatusOr<ExecutableCache::ExecutablePtr> ExecutableCache::get_or_compile(const ir::Program& program) {
  MCX_ASSIGN_OR_RETURN(const Platform* platform, platform_of(default_device()));
  return get_or_compile(*platform, program_key(program), program);
}

absl::StatusOr<ExecutableCache::ExecutablePtr> ExecutableCache::get_or_compile(const Platform& platform,
                                                                              const ir::Program& program) {
  return get_or_compile(platform, program_key(program), program);
}

absl::StatusOr<ExecutableCache::ExecutablePtr> ExecutableCache::get_or_compile(const Platform& platform,
                                                                              const std::string& key,
                                                                              const ir::Program& program) {
  // A compile setting (code generation on or off) is a compile option: an executable compiled under one
  // must not answer a lookup made under another (tests and benchmarks switch it within one process).
  const uint64_t setting = platform.compile_setting();
  {
    MutexLock lock(&mu_);
    Table& table = table_for(platform, setting);
    auto it = table.entries.find(key);
    if (it != table.entries.end()) {
      ++hits_;
      return it->second;
    }
    ++misses_;
  }
  // A miss here compiles, or reads the executable back from the persistent cache when one is installed
  // (platform/stored_compile.h): the key is the same canonical encoding.
  MCX_ASSIGN_OR_RETURN(ExecutablePtr exe, load_or_compile(platform, program, key));
  MutexLock lock(&mu_);
  auto [it, inserted] = table_for(platform, setting).entries.emplace(key, exe);
  return it->second;
}

ExecutableCache::Table& ExecutableCache::table_for(const Platform& platform, uint64_t setting) {
  for (Table& t : tables_) {
    if (t.platform == &platform && t.setting == setting) return t;
  }
  return tables_.emplace_back(Table{&platform, setting, {}});
}

int64_t ExecutableCache::size() const {
  MutexLock lock(&mu_);
  size_t n = 0;
  for (const Table& t : tables_) n += t.entries.size();
  return static_cast<int64_t>(n);
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
  tables_.clear();
}

absl::StatusOr<std::vector<ArrayValue>> execute(const Executable& exe, std::span<const ArrayValue> args) {
  const Device& device = default_device();
  if (exe.platform() != device.platform) {
    return absl::InvalidArgumentError(absl::StrCat("[execute] an executable of platform '", std::string(exe.platform()),
                                                   "' cannot run on the default device ", device.to_string()));
  }
  std::vector<std::shared_ptr<const DeviceBuffer>> held;
  std::vector<const DeviceBuffer*> buffers;
  held.reserve(args.size());
  for (const ArrayValue& a : args) {
    MCX_ASSIGN_OR_RETURN(Buffer b, a.to_buffer());
    MCX_ASSIGN_OR_RETURN(std::shared_ptr<const DeviceBuffer> on_device, to_device(std::move(b), device));
    buffers.push_back(on_device.get());
    held.push_back(std::move(on_device));
  }
  MCX_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<const DeviceBuffer>> outs, exe.execute(buffers, nullptr));
  std::vector<ArrayValue> result;
  result.reserve(outs.size());
  for (auto& out : outs) {  // the results stay in the device's memory
    ArrayValue v = ArrayValue::single_pending(AbstractValue{out->dtype(), concrete_shape(out->dims())}, device,
                                              /*committed=*/false);
    v.shards.front().data->set(std::move(out));
    result.push_back(std::move(v));
  }
  return result;
}

}  // namespace mcx
