#include "mcx/runtime/executable_cache.h"

#include "mcx/backend/cpu/codegen/fused_kernel.h"

#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"

namespace mcx {
namespace {

void put_int(std::string& out, int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); }
void put_str(std::string& out, std::string_view s) {
  put_int(out, static_cast<int64_t>(s.size()));
  out.append(s);
}
void put_type(std::string& out, const AbstractValue& t) { put_str(out, t.to_string()); }

void put_attr(std::string& out, const ir::Attr& attr) {
  put_int(out, static_cast<int64_t>(attr.index()));
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, int64_t>) {
          put_int(out, v);
        } else if constexpr (std::is_same_v<V, std::vector<int64_t>>) {
          put_int(out, static_cast<int64_t>(v.size()));
          for (int64_t x : v) put_int(out, x);
        } else if constexpr (std::is_same_v<V, Shape>) {
          put_str(out, shape_to_string(v));
        } else if constexpr (std::is_same_v<V, DType>) {
          put_int(out, static_cast<int64_t>(v));
        } else {  // Buffer: type and raw bytes, so -0 and NaN payloads are distinguished
          put_type(out, v.abstract_value());
          put_str(out, std::string_view(static_cast<const char*>(v.data()), v.nbytes()));
        }
      },
      attr);
}

}  // namespace

std::string program_key(const ir::Program& program) {
  std::string out;
  out.reserve(64 + 32 * program.instrs.size());
  put_int(out, static_cast<int64_t>(program.scope.constraints().size()));
  for (const std::string& c : program.scope.constraints()) put_str(out, c);
  put_int(out, program.num_params());
  for (const AbstractValue& p : program.params) put_type(out, p);
  put_int(out, static_cast<int64_t>(program.instrs.size()));
  for (const ir::Instr& in : program.instrs) {
    put_int(out, static_cast<int64_t>(in.kind));
    put_int(out, static_cast<int64_t>(in.operands.size()));
    for (ir::ValueId v : in.operands) put_int(out, v);
    put_int(out, static_cast<int64_t>(in.attrs.entries().size()));
    for (const auto& [name, attr] : in.attrs.entries()) {
      put_str(out, name);
      put_attr(out, attr);
    }
    put_type(out, in.type);
  }
  put_int(out, static_cast<int64_t>(program.results.size()));
  for (ir::ValueId v : program.results) put_int(out, v);
  return out;
}

ExecutableCache& ExecutableCache::global() {
  static ExecutableCache* cache = new ExecutableCache();  // never destroyed: used until process exit
  return *cache;
}

absl::StatusOr<ExecutableCache::ExecutablePtr> ExecutableCache::get_or_compile(const ir::Program& program) {
  return get_or_compile(program_key(program), program);
}

absl::StatusOr<ExecutableCache::ExecutablePtr> ExecutableCache::get_or_compile(const std::string& program_key,
                                                                              const ir::Program& program) {
  // Whether kernels are generated is a compile option: an executable compiled with it must not answer a
  // lookup made without it (tests and benchmarks switch it within one process).
  const std::string key = program_key + (cpu::codegen::enabled() ? "|codegen" : "|interpreter");
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      ++hits_;
      return it->second;
    }
    ++misses_;
  }
  MCX_ASSIGN_OR_RETURN(ExecutablePtr exe, cpu::CpuExecutable::compile(program));
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = entries_.emplace(key, exe);
  return it->second;
}

int64_t ExecutableCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(entries_.size());
}
int64_t ExecutableCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}
int64_t ExecutableCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}
void ExecutableCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
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
