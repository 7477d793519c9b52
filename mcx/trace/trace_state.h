// Internal: the implementation of Array and of traces. Not part of the public API; included by the
// trace layer's sources only.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "mcx/core/dim_expr.h"
#include "mcx/ir/attrs.h"
#include "mcx/ir/op.h"
#include "mcx/ir/program.h"
#include "mcx/runtime/array_value.h"
#include "mcx/runtime/mesh.h"
#include "mcx/trace/array.h"
#include "mcx/trace/tracing.h"

namespace mcx::detail {

struct ArrayImpl {
  AbstractValue aval;
  bool weak = false;
  // Concrete arrays: the runtime value; `literal` is the exact C++ number of a weak scalar (so that
  // converting it to the other operand's dtype loses nothing).
  std::optional<ArrayValue> value;
  std::optional<double> literal;
  // Tracers: the trace and the trace-local node.
  std::shared_ptr<TraceContext> trace;
  int32_t node = -1;

  bool is_tracer() const { return trace != nullptr; }
};

// One trace (a jit, grad, vjp or mcx::trace of a function) being recorded on one thread. Values are
// trace-local nodes (parameters, captured enclosing tracers, instructions); finish() numbers them into a
// Program: parameters first, then captured values, then instructions.
class TraceContext : public std::enable_shared_from_this<TraceContext> {
 public:
  TraceContext(std::string what, SymbolicScope scope, int level)
      : what_(std::move(what)), scope_(std::move(scope)), level_(level), owner_(std::this_thread::get_id()) {}

  const std::string& what() const { return what_; }
  const SymbolicScope& scope() const { return scope_; }
  int level() const { return level_; }
  bool active() const { return active_.load(std::memory_order_acquire); }
  bool owned_by_this_thread() const { return owner_ == std::this_thread::get_id(); }
  void deactivate() { active_.store(false, std::memory_order_release); }

  Array new_param(const AbstractValue& aval, bool weak);
  // Infers the result type (errors name the op) and records the op; returns a tracer.
  Array record(ir::OpKind kind, const std::vector<Array>& operands, ir::Attrs attrs);
  // Records with a known type and node operands (used when inlining a program).
  int32_t record_node(ir::OpKind kind, std::vector<int32_t> operands, ir::Attrs attrs, AbstractValue type);
  Array tracer(int32_t node, bool weak = false);
  // The node for an operand: own tracer, constant for a concrete array, lifted parameter for a tracer of
  // an enclosing trace. Throws the escaped-tracer error for tracers of finished traces. `api` names the
  // op in messages.
  int32_t node_of(const Array& a, const char* api);

  TracedFunction finish(const std::vector<Array>& outputs, const std::string& program_name);

  // n fresh remat region ids of this trace (ir/remat.h); returns the first.
  int64_t new_remat_regions(int64_t n) {
    const int64_t first = next_remat_region_;
    next_remat_region_ += n;
    return first;
  }

 private:
  enum class NodeKind : uint8_t { kParam, kCaptured, kInstr };
  struct Node {
    NodeKind kind;
    int32_t index;
    AbstractValue type;
  };

  std::string what_;
  SymbolicScope scope_;
  int level_;
  std::thread::id owner_;
  std::atomic<bool> active_{true};

  std::vector<Node> nodes_;
  std::vector<AbstractValue> params_;
  std::vector<Array> captured_;
  std::vector<ir::Instr> instrs_;  // operands are node ids until finish()
  absl::flat_hash_map<const ArrayImpl*, int32_t> constants_;
  std::vector<Array> constant_keepalive_;  // keeps constant impls alive so their addresses stay unique
  absl::flat_hash_map<std::pair<const TraceContext*, int32_t>, int32_t> captured_nodes_;
  int64_t next_remat_region_ = 0;
};

// The innermost active trace on this thread, or nullptr.
TraceContext* current_trace();
// Pushes a new trace for the lifetime of the object (popped and deactivated on destruction).
class TraceScope {
 public:
  TraceScope(std::string what, SymbolicScope scope);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;
  TraceContext& context() { return *ctx_; }

 private:
  std::shared_ptr<TraceContext> ctx_;
  // Expressions built while tracing let the scope's zero-allowed variables be 0 (dim_expr.h).
  std::optional<ZeroSizedVariables> zero_sized_;
};

// The scope of the innermost trace (empty outside traces); nested traces inherit it.
SymbolicScope current_scope();

// Throws when a is a tracer that cannot be used here: its trace ended (escaped) or belongs to another
// thread. `api` names the operation in the message.
void check_tracer_usable(const Array& a, const char* api);
[[noreturn]] void throw_escaped(const ArrayImpl& impl, const char* api);

std::shared_ptr<const ArrayImpl> make_concrete(ArrayValue value, bool weak = false);

// The mesh a traced computation must run on: with_sharding_constraint and shard_map, called while
// tracing, note theirs. trace_flat opens a collector around each trace, and a note reaches every open
// collector of this thread (a grad traced inside jit tells both), so jit, grad, vjp, jvp and vmap run
// the program on that mesh. A second, different mesh in one trace is InvalidArgument naming `api` (one
// computation runs on one mesh). Outside collectors nothing is recorded.
void note_trace_mesh(const Mesh& mesh, const char* api);
class TraceMeshCollector {
 public:
  TraceMeshCollector();
  ~TraceMeshCollector();
  TraceMeshCollector(const TraceMeshCollector&) = delete;
  TraceMeshCollector& operator=(const TraceMeshCollector&) = delete;
  const std::optional<Mesh>& mesh() const { return mesh_; }

 private:
  friend void note_trace_mesh(const Mesh& mesh, const char* api);
  TraceMeshCollector* previous_;
  std::optional<Mesh> mesh_;
};

// The mesh of the shard_map body being traced on this thread (nullptr outside shard_map bodies).
const Mesh* current_shard_map_mesh();
class ShardMapMeshScope {
 public:
  explicit ShardMapMeshScope(const Mesh* mesh);
  ~ShardMapMeshScope();
  ShardMapMeshScope(const ShardMapMeshScope&) = delete;
  ShardMapMeshScope& operator=(const ShardMapMeshScope&) = delete;

 private:
  const Mesh* previous_;
};

}  // namespace mcx::detail
