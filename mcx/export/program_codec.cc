#include "mcx/export/program_codec.h"

#include <cctype>
#include <cstring>
#include <map>

#include "mcx/core/error.h"
#include "mcx/ir/shape_rules.h"
#include "mcx/ir/str_util.h"

namespace mcx::exporting::codec {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;
using ir::internal::cat;

namespace {

absl::Status fail(const auto&... a) { return absl::InvalidArgumentError(cat("[deserialize] ", a...)); }

fb::DType to_fb(DType t) { return static_cast<fb::DType>(static_cast<uint8_t>(t)); }

Offset<flatbuffers::Vector<Offset<flatbuffers::String>>> encode_dims(FlatBufferBuilder& fbb, const Shape& s) {
  std::vector<std::string> dims;
  dims.reserve(s.size());
  for (const DimExpr& d : s) dims.push_back(d.to_string());
  return fbb.CreateVectorOfStrings(dims);
}

// region_index: the position of each region object in the enclosing program's table.
Offset<fb::Attr> encode_attr(FlatBufferBuilder& fbb, const std::string& name, const ir::Attr& attr,
                             const std::map<const ir::Program*, uint32_t>& region_index) {
  auto name_off = fbb.CreateString(name);
  if (const auto* i = std::get_if<int64_t>(&attr)) {
    return fb::CreateAttr(fbb, name_off, fb::AttrKind::Int, *i);
  }
  if (const auto* v = std::get_if<std::vector<int64_t>>(&attr)) {
    return fb::CreateAttr(fbb, name_off, fb::AttrKind::Ints, 0, fbb.CreateVector(*v));
  }
  if (const auto* s = std::get_if<Shape>(&attr)) {
    return fb::CreateAttr(fbb, name_off, fb::AttrKind::Dims, 0, 0, encode_dims(fbb, *s));
  }
  if (const auto* t = std::get_if<DType>(&attr)) {
    return fb::CreateAttr(fbb, name_off, fb::AttrKind::DType, 0, 0, 0, to_fb(*t));
  }
  if (const auto* regions = std::get_if<ir::Regions>(&attr)) {
    std::vector<uint32_t> indices;
    for (const auto& region : *regions) indices.push_back(region_index.at(region.get()));
    return fb::CreateAttr(fbb, name_off, fb::AttrKind::Regions, 0, 0, 0, fb::DType::Bool, 0,
                          fbb.CreateVector(indices));
  }
  const Buffer& b = std::get<Buffer>(attr);
  auto dims = fbb.CreateVector(b.dims());
  auto data = fbb.CreateVector(static_cast<const uint8_t*>(b.data()), b.nbytes());
  auto c = fb::CreateConstant(fbb, to_fb(b.dtype()), dims, data);
  return fb::CreateAttr(fbb, name_off, fb::AttrKind::Constant, 0, 0, 0, fb::DType::Bool, c);
}

absl::StatusOr<DimExpr> decode_dim(const flatbuffers::String* s, const Limits& limits, std::string_view what) {
  if (s == nullptr) return fail(what, ": missing dimension text");
  std::string_view text = s->string_view();
  MCX_RETURN_IF_ERROR(check_dim_text(text, limits, what));
  auto e = DimExpr::parse(text);
  if (!e.ok()) return fail(what, ": bad dimension expression '", text, "': ", e.status().message());
  return *e;
}

absl::StatusOr<Shape> decode_dims(const flatbuffers::Vector<Offset<flatbuffers::String>>* dims,
                                  const Limits& limits, std::string_view what) {
  Shape out;
  if (dims == nullptr) return out;
  if (dims->size() > static_cast<uint32_t>(limits.max_rank)) {
    return fail(what, ": rank ", dims->size(), " exceeds the limit ", limits.max_rank);
  }
  for (uint32_t i = 0; i < dims->size(); ++i) {
    MCX_ASSIGN_OR_RETURN(DimExpr d, decode_dim(dims->Get(i), limits, what));
    out.push_back(std::move(d));
  }
  return out;
}

absl::StatusOr<Buffer> decode_constant(const fb::Constant* c, const Limits& limits, std::string_view what) {
  if (c == nullptr) return fail(what, ": constant attribute without data");
  MCX_ASSIGN_OR_RETURN(DType dtype, decode_dtype(c->dtype()));
  std::vector<int64_t> dims;
  int64_t n = 1;
  if (c->dims() != nullptr) {
    if (c->dims()->size() > static_cast<uint32_t>(limits.max_rank)) {
      return fail(what, ": constant rank ", c->dims()->size(), " exceeds the limit ", limits.max_rank);
    }
    for (int64_t d : read_int64s(c->dims())) {
      if (d < 0) return fail(what, ": constant has negative dimension ", d);
      if (d != 0 && n > (int64_t{1} << 62) / d) return fail(what, ": constant element count overflows");
      n *= d;
      dims.push_back(d);
    }
  }
  const size_t have = c->data() == nullptr ? 0 : c->data()->size();
  // n * size cannot overflow: n < 2^62 / d >= ... checked against the actual byte count first.
  if (static_cast<uint64_t>(n) > have || static_cast<uint64_t>(n) * dtype_size(dtype) != have) {
    return fail(what, ": constant ", dtype_short_name(dtype), "[", ir::internal::join(dims, ","), "] needs ",
                static_cast<uint64_t>(n) * dtype_size(dtype), " bytes, found ", have);
  }
  Buffer b = Buffer::uninitialized(dtype, std::move(dims));
  if (have > 0) std::memcpy(b.mutable_data(), c->data()->data(), have);
  return b;
}

absl::Status check_int(int64_t v, const Limits& limits, std::string_view what) {
  if (v > limits.max_abs_int || v < -limits.max_abs_int) {
    return fail(what, ": integer ", v, " exceeds the limit +-", limits.max_abs_int);
  }
  return absl::OkStatus();
}

// table: the enclosing program's decoded regions.
absl::StatusOr<ir::Attr> decode_attr(const fb::Attr* a, const Limits& limits, std::string_view what,
                                     const ir::Regions& table) {
  switch (a->kind()) {
    case fb::AttrKind::Int:
      MCX_RETURN_IF_ERROR(check_int(a->int_value(), limits, what));
      return ir::Attr(a->int_value());
    case fb::AttrKind::Ints: {
      std::vector<int64_t> v = read_int64s(a->ints());
      if (v.size() > static_cast<size_t>(limits.max_rank)) {
        return fail(what, ": ", v.size(), " integers exceed the limit ", limits.max_rank);
      }
      for (int64_t x : v) MCX_RETURN_IF_ERROR(check_int(x, limits, what));
      return ir::Attr(std::move(v));
    }
    case fb::AttrKind::Dims: {
      MCX_ASSIGN_OR_RETURN(Shape s, decode_dims(a->dims(), limits, what));
      return ir::Attr(std::move(s));
    }
    case fb::AttrKind::DType: {
      MCX_ASSIGN_OR_RETURN(DType t, decode_dtype(a->dtype()));
      return ir::Attr(t);
    }
    case fb::AttrKind::Constant: {
      MCX_ASSIGN_OR_RETURN(Buffer b, decode_constant(a->constant(), limits, what));
      return ir::Attr(std::move(b));
    }
    case fb::AttrKind::Regions: {
      ir::Regions regions;
      if (a->region_indices() == nullptr || a->region_indices()->size() == 0) {
        return fail(what, ": regions attribute without programs");
      }
      for (uint32_t i : *a->region_indices()) {
        if (i >= table.size()) return fail(what, ": region index ", i, " out of range (", table.size(), " regions)");
        regions.push_back(table[i]);
      }
      return ir::Attr(std::move(regions));
    }
  }
  return fail(what, ": unknown attribute kind ", static_cast<int>(a->kind()),
              " (written by a newer producer? this reader knows kinds 0..5)");
}

}  // namespace

absl::Status check_dim_text(std::string_view text, const Limits& limits, std::string_view what) {
  if (text.size() > limits.max_dim_text) {
    return fail(what, ": expression of ", text.size(), " characters exceeds the limit ", limits.max_dim_text);
  }
  // Integer literals: at most max_abs_int (DimExpr and shape-rule arithmetic is int64 without overflow
  // checks; absurd constants would overflow it).
  for (size_t i = 0; i < text.size();) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    int64_t v = 0;
    size_t j = i;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) {
      if (v <= limits.max_abs_int) v = v * 10 + (text[j] - '0');
      ++j;
    }
    // Digits that are part of an identifier ("b2") are not literals.
    bool in_identifier = i > 0 && (std::isalpha(static_cast<unsigned char>(text[i - 1])) || text[i - 1] == '_');
    if (!in_identifier && v > limits.max_abs_int) {
      return fail(what, ": integer literal in '", text, "' exceeds the limit ", limits.max_abs_int);
    }
    i = j;
  }
  int64_t exponent_sum = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    bool pow = text[i] == '^' || (text[i] == '*' && i + 1 < text.size() && text[i + 1] == '*');
    if (!pow) continue;
    size_t j = i + (text[i] == '^' ? 1 : 2);
    while (j < text.size() && text[j] == ' ') ++j;
    int64_t e = 0;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j])) && e <= limits.max_exponent) {
      e = e * 10 + (text[j] - '0');
      ++j;
    }
    exponent_sum += e;
    if (exponent_sum > limits.max_exponent) {
      return fail(what, ": exponents in '", text, "' sum to more than the limit ", limits.max_exponent);
    }
    i = j - 1;
  }
  return absl::OkStatus();
}

std::vector<int64_t> read_int64s(const flatbuffers::Vector<int64_t>* v) {
  std::vector<int64_t> out;
  if (v == nullptr || v->size() == 0) return out;
  out.resize(v->size());
  std::memcpy(out.data(), v->Data(), v->size() * sizeof(int64_t));  // little-endian hosts only (as FlatBuffers here)
  return out;
}

absl::StatusOr<DType> decode_dtype(fb::DType t) {
  auto v = static_cast<uint8_t>(t);
  if (v >= kNumDTypes) {
    return fail("unknown dtype id ", static_cast<int>(v), " (this reader knows 0..", kNumDTypes - 1, ")");
  }
  return static_cast<DType>(v);
}

Offset<fb::AbstractValue> encode_aval(FlatBufferBuilder& fbb, const AbstractValue& v) {
  auto dims = encode_dims(fbb, v.shape);
  return fb::CreateAbstractValue(fbb, to_fb(v.dtype), dims);
}

absl::StatusOr<AbstractValue> decode_aval(const fb::AbstractValue* v, const Limits& limits, std::string_view what) {
  if (v == nullptr) return fail(what, ": missing abstract value");
  AbstractValue out;
  MCX_ASSIGN_OR_RETURN(out.dtype, decode_dtype(v->dtype()));
  MCX_ASSIGN_OR_RETURN(out.shape, decode_dims(v->dims(), limits, what));
  int64_t n = 1;
  for (const DimExpr& d : out.shape) {
    auto c = d.constant_value();
    if (!c) continue;
    if (*c < 0 || *c > limits.max_static_elements || (*c > 0 && n > limits.max_static_elements / *c)) {
      return fail(what, ": type ", out.to_string(), " exceeds the limit of ", limits.max_static_elements,
                  " elements (or has a negative dimension)");
    }
    n *= *c;
  }
  return out;
}

Offset<fb::Program> encode_program(FlatBufferBuilder& fbb, const ir::Program& p) {
  std::vector<std::string> op_names;
  std::map<ir::OpKind, uint16_t> op_index;
  for (const ir::Instr& in : p.instrs) {
    if (op_index.emplace(in.kind, static_cast<uint16_t>(op_names.size())).second) {
      op_names.emplace_back(ir::op_name(in.kind));
    }
  }
  // The distinct region objects, each encoded once (before this program's tables are started).
  std::map<const ir::Program*, uint32_t> region_index;
  std::vector<Offset<fb::Program>> regions;
  for (const ir::Instr& in : p.instrs) {
    for (const auto& [name, value] : in.attrs.entries()) {
      const auto* rs = std::get_if<ir::Regions>(&value);
      if (rs == nullptr) continue;
      for (const auto& region : *rs) {
        if (!region_index.emplace(region.get(), static_cast<uint32_t>(regions.size())).second) continue;
        regions.push_back(encode_program(fbb, *region));
      }
    }
  }
  std::vector<Offset<fb::AbstractValue>> params;
  for (const AbstractValue& v : p.params) params.push_back(encode_aval(fbb, v));
  std::vector<Offset<fb::Instr>> instrs;
  instrs.reserve(p.instrs.size());
  for (const ir::Instr& in : p.instrs) {
    std::vector<Offset<fb::Attr>> attrs;
    for (const auto& [name, value] : in.attrs.entries()) attrs.push_back(encode_attr(fbb, name, value, region_index));
    auto operands = fbb.CreateVector(in.operands);
    auto attrs_off = fbb.CreateVector(attrs);
    auto type = encode_aval(fbb, in.type);
    instrs.push_back(fb::CreateInstr(fbb, op_index.at(in.kind), operands, attrs_off, type));
  }
  auto regions_off = regions.empty() ? 0 : fbb.CreateVector(regions);
  return fb::CreateProgram(fbb, fbb.CreateString(p.name), fbb.CreateVectorOfStrings(p.scope.constraints()),
                           fbb.CreateVectorOfStrings(op_names), fbb.CreateVector(params),
                           fbb.CreateVector(instrs), fbb.CreateVector(p.results), regions_off);
}

absl::StatusOr<ir::Program> decode_program(const fb::Program* p, const Limits& limits, int depth) {
  if (p == nullptr) return fail("the artifact has no program");
  ir::Program out;
  if (p->name() != nullptr) out.name = p->name()->str();
  std::vector<std::string> constraints;
  if (p->constraints() != nullptr) {
    for (const auto* c : *p->constraints()) {
      if (c == nullptr) return fail("program: missing constraint text");
      MCX_RETURN_IF_ERROR(check_dim_text(c->string_view(), limits, "program constraint"));
      constraints.push_back(c->str());
    }
  }
  auto scope = SymbolicScope::create(constraints);
  if (!scope.ok()) return fail("program constraints: ", scope.status().message());
  out.scope = *std::move(scope);

  ir::Regions regions;  // decoded once each; the instructions' attributes index them
  if (p->regions() != nullptr) {
    if (depth >= limits.max_region_depth) {
      return fail("control-flow regions nest deeper than the limit ", limits.max_region_depth);
    }
    for (uint32_t i = 0; i < p->regions()->size(); ++i) {
      auto region = decode_program(p->regions()->Get(i), limits, depth + 1);
      if (!region.ok()) {
        std::string m(region.status().message());
        if (m.rfind("[deserialize] ", 0) == 0) m.erase(0, 14);
        return fail("region ", i, ": ", m);
      }
      regions.push_back(std::make_shared<const ir::Program>(*std::move(region)));
    }
  }
  std::vector<ir::OpKind> ops;
  if (p->op_names() != nullptr) {
    for (const auto* n : *p->op_names()) {
      if (n == nullptr) return fail("program: missing op name");
      auto k = ir::op_from_name(n->string_view());
      if (!k) {
        return fail("unknown op '", n->string_view(), "' (this reader implements opset ", ir::kOpsetVersion, ")");
      }
      ops.push_back(*k);
    }
  }
  if (p->params() != nullptr) {
    for (uint32_t i = 0; i < p->params()->size(); ++i) {
      MCX_ASSIGN_OR_RETURN(AbstractValue v, decode_aval(p->params()->Get(i), limits, cat("parameter ", i)));
      out.params.push_back(std::move(v));
    }
  }
  const int64_t num_params = out.num_params();
  if (p->instrs() != nullptr) {
    out.instrs.reserve(p->instrs()->size());
    for (uint32_t i = 0; i < p->instrs()->size(); ++i) {
      const fb::Instr* in = p->instrs()->Get(i);
      const std::string what = cat("instruction ", i);
      if (in->op() >= ops.size()) return fail(what, ": op index ", in->op(), " out of range (", ops.size(), " ops)");
      ir::Instr instr;
      instr.kind = ops[in->op()];
      if (in->operands() != nullptr) {
        for (int32_t v : *in->operands()) {
          if (v < 0 || v >= num_params + static_cast<int64_t>(i)) {
            return fail(what, " (", ir::op_name(instr.kind), "): operand %", v, " is not defined before it");
          }
          instr.operands.push_back(v);
        }
      }
      if (in->attrs() != nullptr) {
        for (const fb::Attr* a : *in->attrs()) {
          if (a->name() == nullptr) return fail(what, ": attribute without a name");
          MCX_ASSIGN_OR_RETURN(ir::Attr attr, decode_attr(a, limits, cat(what, " attribute ", a->name()->str()), regions));
          if (instr.attrs.has(a->name()->string_view())) return fail(what, ": duplicate attribute ", a->name()->str());
          instr.attrs.set(a->name()->str(), std::move(attr));
        }
      }
      MCX_ASSIGN_OR_RETURN(instr.type, decode_aval(in->type(), limits, what));
      out.instrs.push_back(std::move(instr));
    }
  }
  if (p->results() != nullptr) {
    for (int32_t v : *p->results()) {
      if (v < 0 || v >= out.num_values()) return fail("program result %", v, " is not a value of the program");
      out.results.push_back(v);
    }
  }
  if (absl::Status s = ir::verify(out); !s.ok()) return fail("the program does not verify: ", s.message());
  return out;
}

}  // namespace mcx::exporting::codec
