// The machinery shared by jit, grad, vjp and trace: tracing a function of flat Array leaves into a
// Program, and the argument handling that turns C++ arguments into leaves plus static values.
// Most users want jit.h / grad.h instead.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "mcx/core/dim_expr.h"
#include "mcx/core/shape.h"
#include "mcx/ir/program.h"
#include "mcx/runtime/mesh.h"
#include "mcx/trace/array.h"
#include "mcx/trace/pytree.h"

namespace mcx {

// The result of tracing: a Program whose parameters are the input leaves followed by the tracers of
// enclosing traces that the function captured (closure capture); `captured` holds those enclosing
// tracers, to be passed as the extra arguments when the program is evaluated (call_program).
struct TracedFunction {
  ir::Program program;
  std::vector<Array> captured;
  std::vector<bool> out_weak;  // weak type of each result
  // The mesh the program must run on, when it holds sharding constraints or shard_maps (their mesh;
  // trace_state.h note_trace_mesh); pass it to call_program.
  std::optional<Mesh> mesh;
};

// Traces body on fresh tracers of the given types in a new trace pushed on this thread's trace stack.
// `what` describes the trace in error messages, e.g. "jit of 'loss'". body's outputs may be tracers of this
// trace, concrete arrays (they become constants) or enclosing tracers (lifted). Exceptions thrown by body
// propagate after the trace is popped; tracers that escape it are detected when used later. An
// InvalidArgument from body (a shape or type error) gets " (traced in <what>)" appended, by the innermost
// trace only: "[matmul] ... (traced in jit of 'mm')".
// With `arg_names` (one per input, e.g. from argument_leaf_names) the note also lists the traced arguments
// with their types: "(traced in jit of 'mm' on args[0]: f32[2,3], args[1]: f32[4,5])".
TracedFunction trace_flat(const std::string& what, const std::string& program_name,
                          const std::vector<AbstractValue>& in_avals, const std::vector<bool>& in_weak,
                          const SymbolicScope& scope,
                          const std::function<std::vector<Array>(std::span<const Array>)>& body,
                          const std::vector<std::string>& arg_names = {});

namespace detail {

// Arguments that are not pytrees but plain values: part of the jit cache key, passed through unchanged.
// String literals and const char* are passed to the function as std::string.
template <typename T>
concept StringLike = std::is_same_v<T, std::string> || std::is_same_v<std::decay_t<T>, const char*> ||
                     std::is_same_v<std::decay_t<T>, char*>;
template <typename T>
concept StaticArg = std::is_arithmetic_v<T> || std::is_enum_v<T> || StringLike<T>;

// Arguments of jitted/differentiated calls, and of mcx::trace (which also takes AbstractValue leaves).
template <typename T>
concept CallArg = PyTree<T> || StaticArg<T>;
template <typename T>
concept TraceableArg = CallArg<T> || std::is_same_v<T, AbstractValue>;

std::string static_arg_key(const std::type_info& type, const std::string& value);

template <typename T>
std::string static_key_of(const T& v) {
  if constexpr (StringLike<T>) {
    return static_arg_key(typeid(std::string), std::string(v));
  } else if constexpr (std::is_enum_v<T>) {
    return static_arg_key(typeid(T), std::to_string(static_cast<int64_t>(v)));
  } else if constexpr (std::is_floating_point_v<T>) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", static_cast<double>(v));
    return static_arg_key(typeid(T), buf);
  } else {
    return static_arg_key(typeid(T), std::to_string(v));
  }
}

// Leaves and structure of a call's arguments.
struct FlatArgs {
  std::vector<Array> leaves;          // pytree leaves of all arguments, in argument order
  std::vector<AbstractValue> avals;   // one per leaf (AbstractValue arguments are leaves without data)
  std::vector<bool> weak;             // one per leaf
  std::vector<TreeDef> defs;          // one per argument (a leaf def for static arguments)
  std::vector<std::pair<size_t, size_t>> ranges;  // [begin, end) of each argument's leaves
  std::string key;                    // structure + static values + leaf types: the jit cache key
};

void append_leaf_key(FlatArgs& flat);  // finishes `key` with the leaves' types (after all arguments)
size_t arg_of_leaf(const FlatArgs& flat, size_t leaf);  // the argument a leaf belongs to
// "args[1]['w']": each leaf's argument and path within it (static arguments have no leaves).
std::vector<std::string> argument_leaf_names(const FlatArgs& flat);

template <typename T>
void flatten_one(FlatArgs& flat, const T& arg) {
  size_t begin = flat.leaves.size();
  if constexpr (std::is_same_v<T, AbstractValue>) {
    flat.leaves.emplace_back();
    flat.avals.push_back(arg);
    flat.weak.push_back(false);
    flat.defs.push_back(TreeDef::leaf());
    flat.key += "A;";
  } else if constexpr (PyTree<T>) {
    auto [leaves, def] = tree_flatten(arg);
    for (Array& a : leaves) {
      flat.avals.push_back(a.aval());
      flat.weak.push_back(a.weak_type());
      flat.leaves.push_back(std::move(a));
    }
    flat.key += "T" + def.to_string() + ";";
    flat.defs.push_back(std::move(def));
  } else {
    static_assert(StaticArg<T>, "mcx: arguments must be Arrays, pytrees of Arrays, or static values "
                                "(arithmetic, enum, std::string)");
    flat.defs.push_back(TreeDef::leaf());
    flat.key += "S" + static_key_of(arg) + ";";
  }
  flat.ranges.emplace_back(begin, flat.leaves.size());
}

template <typename... Args>
FlatArgs flatten_args(const Args&... args) {
  FlatArgs flat;
  (flatten_one(flat, args), ...);
  append_leaf_key(flat);
  return flat;
}

// The argument as the function sees it when its leaves are replaced (AbstractValue becomes Array).
template <typename T>
using traced_arg_t = std::conditional_t<std::is_same_v<T, AbstractValue>, Array,
                                        std::conditional_t<StringLike<T>, std::string, T>>;

template <typename T>
traced_arg_t<T> rebuild_one(const T& orig, const FlatArgs& flat, size_t index, std::span<const Array> leaves) {
  if constexpr (std::is_same_v<T, AbstractValue>) {
    return leaves[flat.ranges[index].first];
  } else if constexpr (PyTree<T>) {
    auto [b, e] = flat.ranges[index];
    return tree_unflatten<T>(flat.defs[index], leaves.subspan(b, e - b));
  } else if constexpr (StringLike<T>) {
    return std::string(orig);
  } else {
    return orig;
  }
}

// Calls f with the arguments rebuilt from `leaves` (statics passed through unchanged).
template <typename F, typename... Args, size_t... I>
decltype(auto) call_rebuilt_impl(const F& f, const FlatArgs& flat, std::span<const Array> leaves,
                                 std::index_sequence<I...>, const Args&... args) {
  std::tuple<traced_arg_t<Args>...> rebuilt{rebuild_one(args, flat, I, leaves)...};
  return std::apply(f, rebuilt);
}
template <typename F, typename... Args>
decltype(auto) call_rebuilt(const F& f, const FlatArgs& flat, std::span<const Array> leaves,
                            const Args&... args) {
  return call_rebuilt_impl(f, flat, leaves, std::index_sequence_for<Args...>{}, args...);
}

template <typename F, typename... Args>
using traced_result_t =
    std::remove_cvref_t<std::invoke_result_t<const F&, const traced_arg_t<Args>&...>>;

}  // namespace detail
}  // namespace mcx
