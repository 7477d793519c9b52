#include "mcx/trace/pytree.h"

#include <mutex>
#include <typeindex>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "mcx/export/artifact.h"

namespace mcx {
namespace {

const char* kind_name(TreeDef::Kind k) {
  switch (k) {
    case TreeDef::Kind::kLeaf: return "leaf";
    case TreeDef::Kind::kList: return "list";
    case TreeDef::Kind::kTuple: return "tuple";
    case TreeDef::Kind::kDict: return "dict";
    case TreeDef::Kind::kCustom: return "custom node";
  }
  return "?";
}

[[noreturn]] void wrong_kind(const char* expected, const char* found) {
  throw InvalidArgument(absl::StrCat("[Tree] expected a ", expected, ", found a ", found));
}

template <typename V>
const char* tree_kind(const V& node) {
  return std::holds_alternative<Array>(node)        ? "leaf"
         : std::holds_alternative<Tree::List>(node) ? "list"
         : std::holds_alternative<Tree::Dict>(node) ? "dict"
                                                    : "custom node";
}

}  // namespace

// ---- Tree ---------------------------------------------------------------------------------------------

const Array& Tree::array() const {
  if (!is_leaf()) wrong_kind("leaf", tree_kind(node_));
  return std::get<Array>(node_);
}
Array& Tree::array() {
  if (!is_leaf()) wrong_kind("leaf", tree_kind(node_));
  return std::get<Array>(node_);
}
const Tree::List& Tree::list() const {
  if (!is_list()) wrong_kind("list", tree_kind(node_));
  return std::get<List>(node_);
}
Tree::List& Tree::list() {
  if (!is_list()) wrong_kind("list", tree_kind(node_));
  return std::get<List>(node_);
}
const Tree::Dict& Tree::dict() const {
  if (!is_dict()) wrong_kind("dict", tree_kind(node_));
  return std::get<Dict>(node_);
}
Tree::Dict& Tree::dict() {
  if (!is_dict()) wrong_kind("dict", tree_kind(node_));
  return std::get<Dict>(node_);
}
const Tree::Custom& Tree::custom() const {
  if (!is_custom()) wrong_kind("custom node", tree_kind(node_));
  return std::get<Custom>(node_);
}
Tree::Custom& Tree::custom() {
  if (!is_custom()) wrong_kind("custom node", tree_kind(node_));
  return std::get<Custom>(node_);
}
Tree& Tree::operator[](const std::string& key) { return dict()[key]; }
const Tree& Tree::at(const std::string& key) const {
  const Dict& d = dict();
  auto it = d.find(key);
  if (it == d.end()) {
    std::string keys;
    for (const auto& [k, v] : d) absl::StrAppend(&keys, keys.empty() ? "" : ", ", k);
    throw InvalidArgument(absl::StrCat("[Tree] key '", key, "' not found; keys are {", keys, "}"));
  }
  return it->second;
}
const Tree& Tree::at(size_t index) const {
  const List& l = list();
  if (index >= l.size()) {
    throw InvalidArgument(absl::StrCat("[Tree] index ", index, " out of range for a list of ", l.size()));
  }
  return l[index];
}

// ---- TreeDef ------------------------------------------------------------------------------------------

TreeDef TreeDef::list(std::vector<TreeDef> children) {
  TreeDef d;
  d.kind_ = Kind::kList;
  d.num_leaves_ = 0;
  for (const TreeDef& c : children) d.num_leaves_ += c.num_leaves_;
  d.children_ = std::move(children);
  return d;
}
TreeDef TreeDef::tuple(std::vector<TreeDef> children) {
  TreeDef d = list(std::move(children));
  d.kind_ = Kind::kTuple;
  return d;
}
TreeDef TreeDef::dict(std::vector<std::string> keys, std::vector<TreeDef> children) {
  TreeDef d = list(std::move(children));
  d.kind_ = Kind::kDict;
  d.keys_ = std::move(keys);
  return d;
}

TreeDef TreeDef::custom(std::string name, std::string aux, std::vector<TreeDef> children) {
  if (!exporting::is_custom_node_name(name)) {
    throw InvalidArgument(absl::StrCat("[pytree] a custom node's name must be letters, digits and '._:-', found '",
                                       absl::CHexEscape(name), "'"));
  }
  TreeDef d = list(std::move(children));
  d.kind_ = Kind::kCustom;
  d.custom_name_ = std::move(name);
  d.aux_ = std::move(aux);
  return d;
}

std::string TreeDef::to_string() const {
  switch (kind_) {
    case Kind::kLeaf: return "*";
    case Kind::kCustom: {
      // The escaped auxiliary data keeps the text one-to-one with the structure (it is jit's cache key).
      std::string out = absl::StrCat(custom_name_, "[\"", absl::CHexEscape(aux_), "\"](");
      for (size_t i = 0; i < children_.size(); ++i) absl::StrAppend(&out, i ? ", " : "", children_[i].to_string());
      return out + ")";
    }
    case Kind::kList:
    case Kind::kTuple: {
      std::string out = kind_ == Kind::kList ? "list[" : "tuple(";
      for (size_t i = 0; i < children_.size(); ++i) absl::StrAppend(&out, i ? ", " : "", children_[i].to_string());
      return out + (kind_ == Kind::kList ? "]" : ")");
    }
    case Kind::kDict: {
      std::string out = "dict{";
      for (size_t i = 0; i < children_.size(); ++i) {
        absl::StrAppend(&out, i ? ", " : "", keys_[i], ": ", children_[i].to_string());
      }
      return out + "}";
    }
  }
  return "?";
}

std::vector<std::string> TreeDef::leaf_paths() const {
  if (kind_ == Kind::kLeaf) return {std::string()};
  std::vector<std::string> out;
  for (size_t i = 0; i < children_.size(); ++i) {
    const std::string step = kind_ == Kind::kDict ? absl::StrCat("['", keys_[i], "']") : absl::StrCat("[", i, "]");
    for (const std::string& rest : children_[i].leaf_paths()) out.push_back(step + rest);
  }
  return out;
}

bool operator==(const TreeDef& a, const TreeDef& b) {
  return a.kind_ == b.kind_ && a.num_leaves_ == b.num_leaves_ && a.keys_ == b.keys_ &&
         a.custom_name_ == b.custom_name_ && a.aux_ == b.aux_ && a.children_ == b.children_;
}

// ---- traits and helpers -------------------------------------------------------------------------------

namespace detail {

const Array& LeafReader::next() {
  if (pos >= leaves.size()) {
    throw InvalidArgument(absl::StrCat("[tree_unflatten] ran out of leaves after ", leaves.size()));
  }
  return leaves[pos++];
}

void throw_structure_mismatch(const std::string& expected_kind, const TreeDef& found) {
  throw InvalidArgument(
      absl::StrCat("[tree_unflatten] expected a ", expected_kind, ", found structure ", found.to_string()));
}

void check_kind(const TreeDef& def, TreeDef::Kind kind, const char* what) {
  if (def.kind() != kind) {
    throw InvalidArgument(absl::StrCat("[tree_unflatten] expected a ", what, " (", kind_name(kind),
                                       "), found structure ", def.to_string()));
  }
}

void claim_custom_node_name(std::string_view name, const std::type_info& type) {
  static std::mutex mu;
  static auto* claimed = new std::map<std::string, std::type_index, std::less<>>();
  std::lock_guard<std::mutex> lock(mu);
  auto [it, inserted] = claimed->emplace(std::string(name), std::type_index(type));
  if (!inserted && it->second != std::type_index(type)) {
    throw InvalidArgument(absl::StrCat("[pytree] two custom node types are named '", std::string(name), "': ", it->second.name(),
                                       " and ", type.name(), "; a name identifies one type (artifacts store it)"));
  }
}

void check_custom(const TreeDef& def, std::string_view name) {
  if (def.kind() != TreeDef::Kind::kCustom || def.custom_name() != name) {
    throw InvalidArgument(absl::StrCat("[tree_unflatten] expected the custom node ", std::string(name), ", found structure ",
                                       def.to_string()));
  }
}

}  // namespace detail

TreeDef PyTreeTraits<Tree>::flatten(const Tree& t, std::vector<Array>& out) {
  if (t.is_leaf()) {
    out.push_back(t.array());
    return TreeDef::leaf();
  }
  if (t.is_list()) {
    std::vector<TreeDef> children;
    for (const Tree& c : t.list()) children.push_back(flatten(c, out));
    return TreeDef::list(std::move(children));
  }
  if (t.is_custom()) {
    std::vector<TreeDef> children;
    for (const Tree& c : t.custom().children) children.push_back(flatten(c, out));
    return TreeDef::custom(t.custom().name, t.custom().aux, std::move(children));
  }
  std::vector<std::string> keys;
  std::vector<TreeDef> children;
  for (const auto& [k, c] : t.dict()) {
    keys.push_back(k);
    children.push_back(flatten(c, out));
  }
  return TreeDef::dict(std::move(keys), std::move(children));
}

Tree PyTreeTraits<Tree>::unflatten(const TreeDef& def, detail::LeafReader& r) {
  switch (def.kind()) {
    case TreeDef::Kind::kLeaf: return Tree(r.next());
    case TreeDef::Kind::kList:
    case TreeDef::Kind::kTuple: {  // a Tree has no tuples: they become lists
      Tree::List l;
      for (const TreeDef& c : def.children()) l.push_back(unflatten(c, r));
      return Tree(std::move(l));
    }
    case TreeDef::Kind::kDict: {
      Tree::Dict d;
      for (size_t i = 0; i < def.keys().size(); ++i) d.emplace(def.keys()[i], unflatten(def.children()[i], r));
      return Tree(std::move(d));
    }
    case TreeDef::Kind::kCustom: {
      Tree::Custom c{def.custom_name(), def.aux(), {}};
      for (const TreeDef& child : def.children()) c.children.push_back(unflatten(child, r));
      return Tree(std::move(c));
    }
  }
  return Tree();
}

}  // namespace mcx
