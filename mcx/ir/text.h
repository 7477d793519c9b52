// Text form of Programs: a printer and a parser that round-trip exactly.
//
//   program @loss(%0: f32[b,784], %1: f32[784,10]) -> (f32[b,10]) where b >= 16 {
//     %2 = dot_general(%0, %1) {lhs_batch=[], lhs_contracting=[1], rhs_batch=[], rhs_contracting=[0]} : f32[b,10]
//     %3 = constant() {value=f32[2]{1.5, -0}} : f32[2]
//     return (%2)
//   }
//
// Grammar (whitespace and "//" line comments are ignored between tokens):
//   program    := 'program' '@' name '(' [param {',' param}] ')' '->' '(' [type {',' type}] ')'
//                 ['where' constraint {',' constraint}] '{' {instr} 'return' '(' [value {',' value}] ')' '}'
//   name       := [A-Za-z0-9_.$-]+ | '"' escaped chars '"'
//   param      := value ':' type
//   instr      := value '=' op_name '(' [value {',' value}] ')' ['{' attr {',' attr} '}'] ':' type
//   attr       := attr_name '=' ( int | '[' [int {',' int}] ']'          (int, ints)
//                               | 'dims' '[' dims ']'                      (dims, may be symbolic)
//                               | dtype                                    (dtype)
//                               | dtype '[' static dims ']' '{' elems '}'  (Buffer)
//                               | '[' program {',' program} ']'            (regions)
//                               | 'like' value                             (the regions of value's
//                                                                           instruction, shared) )
//   value      := '%' ([0-9]+ | identifier)        (any name when parsing; printed as %<id>)
// Buffer elements: bool true/false; integers in decimal; floats in the shortest decimal form that
// round-trips (std::to_chars), "inf", "-inf", "nan" for the default quiet NaN of the dtype, and
// "nan:0x<bits>" for any other NaN, so every bit pattern (NaN payloads, -0) survives.
// Constraints are printed as the scope stores their text. The regions of a control-flow op are printed in
// full inside the attributes of its first sibling (their value names are their own); siblings holding the
// same region objects print "regions=like %<first>", so nested loops print in linear size.
//
// Parsing re-infers every instruction's type (shape_rules.h); a written type that differs from the
// inferred one is an error, as is a result type in the header that differs from the returned value's.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "mcx/ir/attrs.h"
#include "mcx/ir/program.h"

namespace mcx::ir {

// The text form; values are numbered canonically (parameters 0..P-1, instruction i is P+i).
std::string print_program(const Program& program);

// Parses one program. InvalidArgument "[parse_program] line L, column C: expected X, found 'Y'" for
// syntax errors, and the same position prefix for type errors (unknown op, shape rule failures,
// mismatched types, undefined or redefined values).
absl::StatusOr<Program> parse_program(std::string_view text);

// One attribute value in the text form above (used by the printer and in messages).
std::string print_attr(const Attr& attr);

}  // namespace mcx::ir
