// The data model of an exported function (mcx's counterpart of jax.export.Exported) and its versioned
// FlatBuffers encoding (schema: mcx/export/exported.fbs; compatibility rules: docs/compatibility.md).
//
// An Artifact is plain data: the staged program (possibly with symbolic dimensions and scope
// constraints), the signature (pytree structures, per-input names and abstract values), shardings as
// data, the platforms and device count it was exported for, versions and an optional exported VJP. The
// user-facing handle that calls it lives in the trace layer (mcx/trace/export.h); this layer only
// describes, checks, encodes and decodes.
//
// Versions (four independent numbers, all recorded in the artifact):
//  - kFormatVersion: the FlatBuffers schema version this build writes and reads.
//  - min_reader_version: written by the producer; a reader whose kFormatVersion is lower rejects the
//    artifact with an error naming both versions. Never a heuristic.
//  - opset_version: mcx/ir/op.h kOpsetVersion of the producer; readers accept [kMinOpsetVersion,
//    ir::kOpsetVersion] and reject the rest naming both.
//  - calling_convention_version: how the program's parameters/results map to the signature; readers
//    accept [kMinCallingConventionVersion, kCallingConventionVersion].
//
// Thread-safety: Artifacts are values; the functions here are pure.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mcx/core/shape.h"
#include "mcx/ir/program.h"

namespace mcx::exporting {

// Format 2 adds custom pytree nodes to TreeSpec; an artifact whose trees hold one is written with
// min_reader_version 2, every other artifact with 1 (format 1 readers read it as before).
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr uint32_t kMinReaderVersionWritten = 1;  // what this build writes as min_reader_version
inline constexpr uint32_t kCustomTreeNodesVersion = 2;   // ... and when a tree holds a custom node
inline constexpr uint32_t kCallingConventionVersion = 1;
inline constexpr uint32_t kMinCallingConventionVersion = 1;
inline constexpr uint32_t kMinOpsetVersion = 1;

// Limits enforced by deserialize() (an artifact beyond them is rejected, never partly read).
struct Limits {
  size_t max_bytes = size_t{1} << 31;        // FlatBuffers' own 2 GiB limit
  int max_vjp_depth = 4;                     // nested exported VJPs
  int max_region_depth = 16;                 // control-flow ops nested in control-flow regions
  int max_rank = 64;
  size_t max_dim_text = 256;                 // characters per dimension expression / constraint
  int max_exponent = 8;                      // sum of the "^n" exponents in one expression
  int64_t max_tree_nodes = 1 << 20;
  size_t max_custom_node_name = 256;       // characters of a custom pytree node's name
  size_t max_custom_node_aux = 1 << 20;    // bytes of its auxiliary data
  uint32_t max_devices = 1u << 20;
  int64_t max_static_elements = int64_t{1} << 40;  // per static type (keeps size arithmetic far from overflow)
  int64_t max_abs_int = int64_t{1} << 40;  // integer attributes and integer literals in dimension texts
};

// Whether `name` may name a custom pytree node (TreeSpec::kCustom, the trace layer's TreeDef::custom,
// checkpoints): one or more letters, digits and "._:-".
bool is_custom_node_name(std::string_view name);

// A pytree structure, independent of the trace layer's TreeDef (which converts to and from it).
struct TreeSpec {
  enum class Kind : uint8_t { kLeaf = 0, kList = 1, kTuple = 2, kDict = 3, kCustom = 4 };
  Kind kind = Kind::kLeaf;
  std::vector<std::string> keys;  // dict keys, one per child
  std::vector<TreeSpec> children;
  std::string custom_name;  // kCustom: the node type's registered name (letters, digits, "._:-")
  std::string aux;          // kCustom: its auxiliary data
  size_t num_leaves() const;
  bool has_custom_node() const;
  // "*", "list[*, *]", "tuple(*, *)", "dict{b: *, w: *}", 'mylib.Linear["relu"](*, *)'
  std::string to_string() const;
  friend bool operator==(const TreeSpec& a, const TreeSpec& b);
};

// A sharding recorded as data: mesh axis names and sizes plus a partition spec (per dimension, the mesh
// axes it is split over; an empty list is replicated). unspecified means no sharding was given.
struct ShardingSpec {
  bool unspecified = true;
  std::vector<std::string> mesh_axis_names;
  std::vector<int64_t> mesh_axis_sizes;
  std::vector<std::vector<std::string>> spec;
  std::string to_string() const;  // "unspecified" or "{data: 2, model: 4} P('data', None)"
  friend bool operator==(const ShardingSpec& a, const ShardingSpec& b) = default;
};

struct Artifact {
  uint32_t format_version = kFormatVersion;
  uint32_t min_reader_version = kMinReaderVersionWritten;
  uint32_t opset_version = 0;  // set by make/deserialize
  uint32_t calling_convention_version = kCallingConventionVersion;
  std::string producer;
  int64_t creation_time_unix_ms = 0;

  std::string fun_name;
  TreeSpec in_tree;   // tuple of the arguments
  TreeSpec out_tree;  // the result structure
  std::vector<std::string> in_names;       // one per flat input: "args[0]", "args[1]['w']"
  std::vector<AbstractValue> in_avals;     // the program's parameter types
  std::vector<AbstractValue> out_avals;    // the program's result types
  std::vector<ShardingSpec> in_shardings;  // one per flat input
  std::vector<ShardingSpec> out_shardings; // one per flat output
  uint32_t nr_devices = 1;
  std::vector<std::string> platforms = {"cpu"};
  std::vector<std::string> constraints;    // the symbolic scope's constraints (== program.scope)
  std::vector<std::string> disabled_safety_checks;  // "platform"
  ir::Program program;
  std::shared_ptr<const Artifact> vjp;     // optional: (primals..., out cotangents...) -> cotangents
  std::vector<int> vjp_wrt;                // flat inputs the vjp returns cotangents for
  // Flat inputs whose buffers Exported::call donates (the exported jit's donate_argnums), ascending: after
  // the call their arrays are deleted, as after the jitted function's own call. Not written when empty.
  std::vector<int> donated_inputs;
  // The program's side effects, sorted (JAX's ordered_effects / unordered_effects): program_effects(program).
  // "debug_print" is ordered; mcx has no unordered effect so far.
  std::vector<std::string> ordered_effects;
  std::vector<std::string> unordered_effects;

  // All dimension variables of the inputs, sorted.
  std::vector<std::string> dim_vars() const;
  bool has_safety_check_disabled(const std::string& check) const;
};

// An artifact for a bare program: flat inputs named "args[i]" (input tree: a tuple of leaves), a tuple
// of leaf outputs, unspecified shardings, one device, platform "cpu", no VJP, this build's versions.
Artifact make_artifact(ir::Program program, std::string fun_name, int64_t creation_time_unix_ms = 0);

// The ordered effects of a program (its regions included), sorted: "debug_print" when it prints.
std::vector<std::string> program_effects(const ir::Program& program);

// The producer string of this build ("mcx 0.1.0").
std::string producer_string();

// Checks the artifact's internal consistency: counts of names/avals/shardings against the program and
// trees, the program verifies (ir::verify), output dims use only input variables, versions in range.
// InvalidArgument "[export] ..." naming the inconsistency.
absl::Status validate(const Artifact& artifact);

absl::StatusOr<std::string> serialize(const Artifact& artifact);
// Verifies (FlatBuffers verifier, identifier "MCXE", limits, versions) and decodes; then validate().
// Errors (InvalidArgument "[deserialize] ..."): not an mcx artifact, corrupt or truncated buffer,
// min_reader_version above kFormatVersion (naming both), unsupported opset or calling convention, a
// limit exceeded, an unknown op/dtype/attribute kind, a malformed dimension expression, or an
// inconsistent program. Never crashes, hangs or allocates more than a small multiple of the input.
absl::StatusOr<Artifact> deserialize(std::span<const uint8_t> bytes, const Limits& limits = {});
absl::StatusOr<Artifact> deserialize(std::string_view bytes, const Limits& limits = {});

// Multi-line human-readable description (used by mcx-export inspect): signature, shardings, versions,
// platforms, constraints, fingerprint.
std::string describe(const Artifact& artifact);

}  // namespace mcx::exporting
