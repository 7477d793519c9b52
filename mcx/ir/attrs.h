// Op attributes: a small sorted map from fixed names (see op.h) to typed values.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/core/buffer.h"
#include "mcx/core/dtype.h"
#include "mcx/core/shape.h"

namespace mcx::ir {

struct Program;
// The sub-programs of a control-flow op (op.h: while, scan, cond), immutable and shared between copies of
// the instruction. Never null.
using Regions = std::vector<std::shared_ptr<const Program>>;

// int64 scalar, list of ints, list of (possibly symbolic) dimensions, a dtype, a constant's data, or
// sub-programs. Regions compare equal when they are the same objects or structurally equal programs.
using Attr = std::variant<int64_t, std::vector<int64_t>, Shape, DType, Buffer, Regions>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, Attr>> entries);

  Attrs& set(std::string name, Attr value);  // replaces an existing entry
  bool has(std::string_view name) const;
  const Attr* find(std::string_view name) const;

  // Typed getters: InvalidArgument naming the attribute and the expected kind when missing/mistyped.
  absl::StatusOr<int64_t> get_int(std::string_view name) const;
  absl::StatusOr<std::vector<int64_t>> get_ints(std::string_view name) const;
  absl::StatusOr<Shape> get_dims(std::string_view name) const;
  absl::StatusOr<DType> get_dtype(std::string_view name) const;
  absl::StatusOr<Buffer> get_buffer(std::string_view name) const;
  absl::StatusOr<Regions> get_regions(std::string_view name) const;

  // Entries sorted by name.
  const std::vector<std::pair<std::string, Attr>>& entries() const { return entries_; }
  friend bool operator==(const Attrs& a, const Attrs& b);  // Buffers compared bitwise

 private:
  std::vector<std::pair<std::string, Attr>> entries_;
};

}  // namespace mcx::ir
