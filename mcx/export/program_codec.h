// Internal to the export layer: the FlatBuffers encoding of ir::Program and abstract values.
// Decoders assume the buffer passed the FlatBuffers verifier and check everything else (indices, limits,
// dimension texts, constant sizes, then ir::verify).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "flatbuffers/flatbuffers.h"
#include "mcx/export/artifact.h"
#include "mcx/export/exported_generated.h"
#include "mcx/ir/program.h"

namespace mcx::exporting::codec {

flatbuffers::Offset<fb::AbstractValue> encode_aval(flatbuffers::FlatBufferBuilder& fbb, const AbstractValue& v);
flatbuffers::Offset<fb::Program> encode_program(flatbuffers::FlatBufferBuilder& fbb, const ir::Program& p);

// Checks a dimension-expression or constraint text against the limits before parsing it (the parser
// expands powers of sums, so unbounded exponents would be a denial of service).
absl::Status check_dim_text(std::string_view text, const Limits& limits, std::string_view what);
// The elements of a vector of int64: copied with memcpy, because a corrupt (yet verified) buffer may place
// such a vector at an address that is 4- but not 8-byte aligned.
std::vector<int64_t> read_int64s(const flatbuffers::Vector<int64_t>* v);
absl::StatusOr<DType> decode_dtype(fb::DType t);
absl::StatusOr<AbstractValue> decode_aval(const fb::AbstractValue* v, const Limits& limits, std::string_view what);
// depth: how many control-flow regions enclose p (at most limits.max_region_depth).
absl::StatusOr<ir::Program> decode_program(const fb::Program* p, const Limits& limits, int depth = 0);

}  // namespace mcx::exporting::codec
