// The single entry point every op goes through, and the hooks transformations use.
//
// bind(kind, operands, attrs):
//  - If a trace is active on this thread (inside jit, grad, vjp or mcx::trace), the op is recorded into
//    the innermost one and a tracer is returned ("omnistaging", as JAX does): concrete operands become
//    constants of the program; tracers of enclosing traces become lifted parameters (closure capture).
//  - Otherwise the op runs eagerly through a cached single-op program (cache keyed by op, attributes and
//    operand types; thread-safe) and a concrete Array is returned.
// Operands must already have the types op.h requires (identical shapes/dtypes for elementwise ops): the
// ops library (ops.h) broadcasts and promotes before calling bind. Type errors are InvalidArgument
// starting with "[op_name]"; a tracer whose trace ended throws InvalidArgument "... escaped tracer ...".
//
// Traces form a thread-local stack, so concurrent jit/grad calls from several threads do not interact.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mcx/ir/attrs.h"
#include "mcx/ir/op.h"
#include "mcx/ir/program.h"
#include "mcx/runtime/mesh.h"
#include "mcx/trace/array.h"

namespace mcx {

Array bind(ir::OpKind kind, std::vector<Array> operands, ir::Attrs attrs = {});

// Evaluates program on args: inside an active trace its instructions are inlined into that trace (so a
// transformed program, e.g. a gradient, composes with jit and grad); otherwise it is compiled (cached by
// structure) and executed. args must match the parameter types ("[api] argument i: expected ..., found
// ..." otherwise).
// `mesh`: the mesh the program must run on (TracedFunction::mesh), if any.
std::vector<Array> call_program(const ir::Program& program, const std::vector<Array>& args,
                                const char* api = "call_program", const std::optional<Mesh>& mesh = std::nullopt);

// Whether a trace is active on this thread (inside jit/grad/vjp/trace).
bool in_trace();

// Eager single-op cache introspection (for tests and benchmarks).
struct EagerCacheStats {
  int64_t size = 0;
  int64_t hits = 0;
  int64_t misses = 0;
};
EagerCacheStats eager_cache_stats();

// Returns the same array marked weakly/strongly typed (see array.h). Used by the ops library.
Array with_weak_type(const Array& a, bool weak);

}  // namespace mcx
