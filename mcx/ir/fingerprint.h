// Structural fingerprint of a Program: SHA-256 over its canonical binary encoding, the one canonical form
// of a program (the in-memory executable cache keys by the encoding itself, the persistent cache and export
// by its digest).
//
// Encoded: a format tag and required_opset(program) (not kOpsetVersion, so growing the op set keeps the
// fingerprints of programs that do not use the new ops); the scope constraints (each as normalised "lhs op rhs",
// sorted, so constraint order and spelling do not matter); parameter types; every instruction's op
// kind, operand value numbers (values are numbered by definition order, so value names in the text form
// and pointers never enter), attributes (name, kind, value; constants as dtype, dims and raw bytes) and
// result type; the result value numbers. Dimensions are encoded in their normal form.
//
// NOT encoded: the program name. Like JAX's compilation cache key, which ignores debug names, two
// programs that differ only in name compute the same thing and share one fingerprint; callers that need
// the name in a key (e.g. export) add it themselves.
//
// Changing this encoding changes every fingerprint (persistent caches miss); the golden test in
// tests/ir/fingerprint_test.cc pins it. Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

#include "mcx/ir/program.h"

namespace mcx::ir {

// The smallest opset (op.h kOpsetVersion history) holding every op of program: the largest
// op_info(kind).opset of its instructions and of the regions of its control-flow ops, at any nesting (1 for
// a program of opset-1 ops only, 2 with SPMD ops, 3 with conv_general_dilated or reduce_window, ...).
int required_opset(const Program& program);

// The canonical encoding (binary, not printable; ir::print_program gives text). Equal encodings mean programs
// that compute the same function on the same types.
std::string canonical_encoding(const Program& program);
// Rebuilds a Program from its canonical encoding (the persistent compilation cache stores executables'
// programs in this form). The result is structurally equal to the encoded program but for names: it is
// called `name`, and its regions "region" (names are not encoded). Regions that were shared (siblings)
// are shared again. A truncated, extended or malformed encoding is InvalidArgument naming the byte offset and
// what was expected, never a crash; the decoded program must pass verify(). Meant for bytes whose integrity
// is checked (the cache's checksummed entries): symbolic dimension texts (at most 256 characters each) are
// parsed without the export decoder's limits on exponents and literals, so artifacts from strangers go
// through export's own decoder instead.
absl::StatusOr<Program> decode_canonical_encoding(std::string_view bytes, std::string name = "main");

// SHA-256 of canonical_encoding(program).
std::array<uint8_t, 32> fingerprint(const Program& program);
// Lower-case hex of fingerprint(program), 64 characters.
std::string fingerprint_hex(const Program& program);

}  // namespace mcx::ir
