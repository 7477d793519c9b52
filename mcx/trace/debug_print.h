// debug_print (jax.debug.print): print values from inside jitted, differentiated or vectorised code, when
// the computation runs, not when it is traced.
//
//   auto step = mcx::jit([](const mcx::Array& x) {
//     mcx::Array y = mcx::tanh(x);
//     mcx::debug_print("x = {}, tanh(x) = {}", x, y);    // printed at every call, with the values
//     return y * 2.0f;
//   });
//
// Each "{}" of `format` is replaced by the next value, printed as numpy does ("[[1, 2], [3, 4]]"; more
// than 1000 elements: type and elided values); "{{" and "}}" print braces. A wrong number of
// placeholders or a stray brace is InvalidArgument at the call. Lines go to the debug-print sink
// (core/debug_output.h: stdout by default; set_debug_print_sink installs another), one line per print.
//
// Semantics, as JAX's:
//  - eagerly the line is printed when the op runs on its device; under jit at every call of the compiled
//    program, in program order (prints are kept by every pass: they are never removed as dead code,
//    merged or folded);
//  - under grad/vjp/jvp/linearize it prints the primal values in the forward computation, once: backward
//    and tangent code that recomputes forward values (a loop's or shard_map's body, a pullback) prints
//    nothing (ir/passes.h drop_side_effects); a loop whose body prints prints once per iteration;
//  - under vmap it prints the batched values once (batch axis first);
//  - on a mesh (a jit with sharded arguments) it prints the global values once, from partition 0 (the
//    first device, so process 0 in a multi-process job); inside a shard_map body it prints on every device
//    its local values, in order per device.
// Thread-safety: like any op.
#pragma once

#include <string_view>
#include <type_traits>
#include <vector>

#include "mcx/core/debug_output.h"
#include "mcx/trace/array.h"

namespace mcx {

void debug_print(std::string_view format, const std::vector<Array>& values);

template <typename... A>
  requires(std::is_convertible_v<const A&, const Array&> && ...)
void debug_print(std::string_view format, const A&... values) {
  debug_print(format, std::vector<Array>{Array(values)...});
}

}  // namespace mcx
