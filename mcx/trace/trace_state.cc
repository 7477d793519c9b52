#include "mcx/trace/trace_state.h"

#include "absl/strings/str_cat.h"
#include "mcx/ir/shape_rules.h"

namespace mcx::detail {
namespace {

// The thread's trace stack. Entries are owned by their TraceScope; the stack holds raw pointers.
std::vector<TraceContext*>& trace_stack() {
  thread_local std::vector<TraceContext*> stack;
  return stack;
}

}  // namespace

TraceContext* current_trace() {
  auto& s = trace_stack();
  return s.empty() ? nullptr : s.back();
}

SymbolicScope current_scope() {
  TraceContext* t = current_trace();
  return t ? t->scope() : SymbolicScope();
}

TraceScope::TraceScope(std::string what, SymbolicScope scope) {
  auto& s = trace_stack();
  ctx_ = std::make_shared<TraceContext>(std::move(what), std::move(scope), static_cast<int>(s.size()) + 1);
  s.push_back(ctx_.get());
  zero_sized_.emplace(ctx_->scope());
}

TraceScope::~TraceScope() {
  ctx_->deactivate();
  auto& s = trace_stack();
  if (!s.empty() && s.back() == ctx_.get()) s.pop_back();
}

void throw_escaped(const ArrayImpl& impl, const char* api) {
  throw InvalidArgument(absl::StrCat(
      "[", api, "] escaped tracer: a value of type ", impl.aval.to_string(), " traced in ", impl.trace->what(),
      " was used after that trace finished. Traced values exist only while the function is being traced; "
      "return the value from the function instead of storing it in a variable outside it"));
}

void check_tracer_usable(const Array& a, const char* api) {
  const ArrayImpl& impl = *a.impl();
  if (!impl.is_tracer()) return;
  if (!impl.trace->active()) throw_escaped(impl, api);
  if (!impl.trace->owned_by_this_thread()) {
    throw InvalidArgument(absl::StrCat("[", api, "] a tracer of ", impl.trace->what(), " (",
                                       impl.aval.to_string(),
                                       ") was used on another thread; tracers belong to the thread that traces"));
  }
  // Active on this thread but not on top of the stack and no trace above it to lift it into: only
  // possible outside every trace, which cannot happen for an active trace.
}

Array TraceContext::tracer(int32_t node, bool weak) {
  auto impl = std::make_shared<ArrayImpl>();
  impl->aval = nodes_[node].type;
  impl->weak = weak;
  impl->trace = shared_from_this();
  impl->node = node;
  return Array(std::shared_ptr<const ArrayImpl>(std::move(impl)));
}

Array TraceContext::new_param(const AbstractValue& aval, bool weak) {
  int32_t node = static_cast<int32_t>(nodes_.size());
  nodes_.push_back(Node{NodeKind::kParam, static_cast<int32_t>(params_.size()), aval});
  params_.push_back(aval);
  return tracer(node, weak);
}

int32_t TraceContext::record_node(ir::OpKind kind, std::vector<int32_t> operands, ir::Attrs attrs,
                                  AbstractValue type) {
  int32_t node = static_cast<int32_t>(nodes_.size());
  nodes_.push_back(Node{NodeKind::kInstr, static_cast<int32_t>(instrs_.size()), type});
  instrs_.push_back(ir::Instr{kind, std::move(operands), std::move(attrs), std::move(type)});
  return node;
}

int32_t TraceContext::node_of(const Array& a, const char* api) {
  if (!a.valid()) throw InvalidArgument(absl::StrCat("[", api, "] an operand is an empty Array"));
  const ArrayImpl* impl = a.impl().get();
  if (impl->is_tracer()) {
    if (impl->trace.get() == this) return impl->node;
    check_tracer_usable(a, api);
    if (impl->trace->level() >= level_) {
      throw Internal(absl::StrCat("[", api, "] tracer of ", impl->trace->what(), " used in the enclosing ",
                                  what_));
    }
    // A tracer of an enclosing trace: lift it into a parameter of this trace (closure capture).
    auto key = std::make_pair(static_cast<const TraceContext*>(impl->trace.get()), impl->node);
    auto it = captured_nodes_.find(key);
    if (it != captured_nodes_.end()) return it->second;
    int32_t node = static_cast<int32_t>(nodes_.size());
    nodes_.push_back(Node{NodeKind::kCaptured, static_cast<int32_t>(captured_.size()), impl->aval});
    captured_.push_back(a);
    captured_nodes_.emplace(key, node);
    return node;
  }
  auto it = constants_.find(impl);
  if (it != constants_.end()) return it->second;
  int32_t node = record_node(ir::OpKind::kConstant, {}, ir::Attrs{{"value", value_or_throw(impl->value->to_buffer())}}, impl->aval);
  constants_.emplace(impl, node);
  constant_keepalive_.push_back(a);
  return node;
}

Array TraceContext::record(ir::OpKind kind, const std::vector<Array>& operands, ir::Attrs attrs) {
  const std::string api_name(ir::op_name(kind));
  const char* api = api_name.c_str();
  std::vector<int32_t> ids;
  std::vector<AbstractValue> types;
  ids.reserve(operands.size());
  for (const Array& a : operands) {
    ids.push_back(node_of(a, api));
    types.push_back(nodes_[ids.back()].type);
  }
  auto type = ir::infer_type(kind, types, attrs, scope_);
  throw_if_error(type.status());
  return tracer(record_node(kind, std::move(ids), std::move(attrs), *std::move(type)));
}

TracedFunction TraceContext::finish(const std::vector<Array>& outputs, const std::string& program_name) {
  std::vector<int32_t> out_nodes;
  TracedFunction result;
  for (const Array& a : outputs) {
    out_nodes.push_back(node_of(a, "trace"));
    result.out_weak.push_back(a.weak_type());
  }
  const int32_t num_params = static_cast<int32_t>(params_.size());
  const int32_t num_inputs = num_params + static_cast<int32_t>(captured_.size());
  auto value_id = [&](int32_t node) -> ir::ValueId {
    const Node& n = nodes_[node];
    switch (n.kind) {
      case NodeKind::kParam: return n.index;
      case NodeKind::kCaptured: return num_params + n.index;
      case NodeKind::kInstr: break;
    }
    return num_inputs + n.index;
  };
  ir::Program& p = result.program;
  p.name = program_name;
  p.scope = scope_;
  p.params = params_;
  for (const Array& c : captured_) p.params.push_back(c.aval());
  p.instrs = instrs_;
  for (ir::Instr& in : p.instrs) {
    for (ir::ValueId& v : in.operands) v = value_id(v);
  }
  for (int32_t n : out_nodes) p.results.push_back(value_id(n));
  result.captured = captured_;
  return result;
}

namespace {
thread_local TraceMeshCollector* t_collector = nullptr;
thread_local const Mesh* t_shard_map_mesh = nullptr;
}  // namespace

TraceMeshCollector::TraceMeshCollector() : previous_(t_collector) { t_collector = this; }
TraceMeshCollector::~TraceMeshCollector() { t_collector = previous_; }

void note_trace_mesh(const Mesh& mesh, const char* api) {
  for (TraceMeshCollector* c = t_collector; c != nullptr; c = c->previous_) {
    if (c->mesh_ && !(*c->mesh_ == mesh)) {
      throw InvalidArgument(absl::StrCat("[", api, "] one traced computation uses two meshes: ", c->mesh_->to_string(),
                                         " and ", mesh.to_string()));
    }
  }
  for (TraceMeshCollector* c = t_collector; c != nullptr; c = c->previous_) c->mesh_ = mesh;
}

const Mesh* current_shard_map_mesh() { return t_shard_map_mesh; }
ShardMapMeshScope::ShardMapMeshScope(const Mesh* mesh) : previous_(t_shard_map_mesh) { t_shard_map_mesh = mesh; }
ShardMapMeshScope::~ShardMapMeshScope() { t_shard_map_mesh = previous_; }

}  // namespace mcx::detail
