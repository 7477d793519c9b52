// Pytrees: nested containers whose leaves are Arrays, flattened to a list of leaves plus a TreeDef.
//
// Supported node types: Array (a leaf), std::vector<T>, std::array<T, N>, std::map<std::string, T>,
// std::tuple<T...>, std::pair<A, B>, the dynamic mcx::Tree (Array | list of Tree | dict of Tree | a custom
// node), meant for model parameters whose structure is decided at run time, and the user's own types
// registered as custom nodes (PyTreeNode below). Leaves are visited in order: vector and tuple elements in
// index order, map entries in key order (as JAX does for dicts), a custom node's children in its order.
//
// A TreeDef records the structure (node kinds, sizes, keys, a custom node's name and auxiliary data),
// compares equal for equal structures and prints as e.g. "dict{b: *, w: *}", "tuple(*, list[*, *])" or
// 'mylib.Linear["relu"](*, *)'. It is part of jit's cache key, of exported artifacts and of checkpoints.
//
// Custom nodes (JAX's register_pytree_node and register_pytree_node_serialization in one): specialise
// mcx::PyTreeNode for the type.
//   template <> struct mcx::PyTreeNode<Linear> {
//     static constexpr std::string_view name = "mylib.Linear";  // unique and stable: artifacts store it
//     static auto children(const Linear& l) { return std::tuple(l.w, l.b); }  // a std::tuple of pytrees
//     static std::string aux(const Linear& l) { return l.activation; }        // optional: static data as bytes
//     static Linear build(std::string_view aux, std::tuple<Array, Array> children);
//   };
// The auxiliary data is part of the structure (equal structures have equal bytes; jit retraces when it
// changes), so it serialises as it is: an artifact or checkpoint records the name and the bytes, and reading
// it back needs no registration (the type is named again where it is rebuilt: Exported::call_as<Linear>,
// tree_unflatten<Linear>; a mcx::Tree holds it as a Tree::Custom). A name has letters, digits and "._:-"; two
// types with one name are refused when the second is first flattened (InvalidArgument naming both).
//
// Thread-safety: all functions are pure; Tree values are plain values (copying shares Array handles).
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <typeinfo>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "mcx/core/error.h"
#include "mcx/trace/array.h"

namespace mcx {

// A dynamic pytree.
class Tree {
 public:
  using List = std::vector<Tree>;
  using Dict = std::map<std::string, Tree>;
  // A custom node held without its C++ type (e.g. an exported function's result): its registered name,
  // auxiliary data and children; tree_unflatten<T> of its structure rebuilds the T.
  struct Custom {
    std::string name;
    std::string aux;
    List children;
  };

  Tree() : node_(Dict{}) {}  // an empty dict
  Tree(Array leaf) : node_(std::move(leaf)) {}  // NOLINT
  Tree(List list) : node_(std::move(list)) {}   // NOLINT
  Tree(Dict dict) : node_(std::move(dict)) {}   // NOLINT
  Tree(Custom custom) : node_(std::move(custom)) {}  // NOLINT
  Tree(std::initializer_list<std::pair<const std::string, Tree>> dict) : node_(Dict(dict)) {}

  bool is_leaf() const { return std::holds_alternative<Array>(node_); }
  bool is_list() const { return std::holds_alternative<List>(node_); }
  bool is_dict() const { return std::holds_alternative<Dict>(node_); }
  bool is_custom() const { return std::holds_alternative<Custom>(node_); }

  // Accessors; InvalidArgument "[Tree] expected a dict, found a leaf" on the wrong kind, NotFound-like
  // InvalidArgument naming the key for a missing key in at().
  const Array& array() const;
  Array& array();
  const List& list() const;
  List& list();
  const Dict& dict() const;
  Dict& dict();
  const Custom& custom() const;
  Custom& custom();
  // Dict access; operator[] inserts an empty dict for a new key (like std::map).
  Tree& operator[](const std::string& key);
  const Tree& at(const std::string& key) const;
  const Tree& at(size_t index) const;

  // Implicit use as an Array when it is a leaf (tree["w"] * x).
  operator const Array&() const { return array(); }  // NOLINT

 private:
  std::variant<Array, List, Dict, Custom> node_;
};

class TreeDef {
 public:
  enum class Kind { kLeaf, kList, kTuple, kDict, kCustom };
  TreeDef() = default;  // a leaf
  static TreeDef leaf() { return TreeDef(); }
  static TreeDef list(std::vector<TreeDef> children);
  static TreeDef tuple(std::vector<TreeDef> children);
  static TreeDef dict(std::vector<std::string> keys, std::vector<TreeDef> children);
  // A custom node; InvalidArgument when the name is empty or has characters outside letters, digits and "._:-".
  static TreeDef custom(std::string name, std::string aux, std::vector<TreeDef> children);

  Kind kind() const { return kind_; }
  const std::vector<TreeDef>& children() const { return children_; }
  const std::vector<std::string>& keys() const { return keys_; }
  const std::string& custom_name() const { return custom_name_; }  // kCustom only
  const std::string& aux() const { return aux_; }                  // kCustom only
  size_t num_leaves() const { return num_leaves_; }
  std::string to_string() const;
  // The path of every leaf in flattening order: "[1]['w']" (index of a list, tuple or custom node's child, key
  // of a dict child), "" for a tree that is one leaf.
  std::vector<std::string> leaf_paths() const;
  friend bool operator==(const TreeDef& a, const TreeDef& b);
  friend bool operator!=(const TreeDef& a, const TreeDef& b) { return !(a == b); }

 private:
  Kind kind_ = Kind::kLeaf;
  std::vector<TreeDef> children_;
  std::vector<std::string> keys_;
  std::string custom_name_;
  std::string aux_;
  size_t num_leaves_ = 1;
};

// Specialise for a type to make it a custom pytree node (see the header comment).
template <typename T>
struct PyTreeNode;

// ---- traits: which C++ types are pytrees ------------------------------------------------------------
template <typename T, typename = void>
struct PyTreeTraits;  // undefined: not a pytree

template <typename T>
concept PyTree = requires { PyTreeTraits<std::remove_cvref_t<T>>::is_pytree; };

namespace detail {
// Sequential reader over leaves, used by unflatten; errors name the expected and found structure.
struct LeafReader {
  std::span<const Array> leaves;
  size_t pos = 0;
  const Array& next();
};
[[noreturn]] void throw_structure_mismatch(const std::string& expected_kind, const TreeDef& found);
void check_kind(const TreeDef& def, TreeDef::Kind kind, const char* what);
// Records that `type` is the custom node named `name`; InvalidArgument when another type has the name.
void claim_custom_node_name(std::string_view name, const std::type_info& type);
// def is a custom node named `name`, else InvalidArgument naming both structures.
void check_custom(const TreeDef& def, std::string_view name);

template <typename T>
struct is_std_tuple : std::false_type {};
template <typename... Ts>
struct is_std_tuple<std::tuple<Ts...>> : std::true_type {};

template <typename T>
concept CustomNode = requires(const T& x) {
  { PyTreeNode<T>::name } -> std::convertible_to<std::string_view>;
  PyTreeNode<T>::children(x);
};
}  // namespace detail

template <>
struct PyTreeTraits<Array> {
  static constexpr bool is_pytree = true;
  static TreeDef flatten(const Array& a, std::vector<Array>& out) {
    out.push_back(a);
    return TreeDef::leaf();
  }
  static Array unflatten(const TreeDef& def, detail::LeafReader& r) {
    detail::check_kind(def, TreeDef::Kind::kLeaf, "leaf");
    return r.next();
  }
};

template <>
struct PyTreeTraits<Tree> {
  static constexpr bool is_pytree = true;
  static TreeDef flatten(const Tree& t, std::vector<Array>& out);
  static Tree unflatten(const TreeDef& def, detail::LeafReader& r);
};

template <typename T>
struct PyTreeTraits<std::vector<T>, std::enable_if_t<PyTree<T>>> {
  static constexpr bool is_pytree = true;
  static TreeDef flatten(const std::vector<T>& v, std::vector<Array>& out) {
    std::vector<TreeDef> children;
    children.reserve(v.size());
    for (const T& x : v) children.push_back(PyTreeTraits<T>::flatten(x, out));
    return TreeDef::list(std::move(children));
  }
  static std::vector<T> unflatten(const TreeDef& def, detail::LeafReader& r) {
    detail::check_kind(def, TreeDef::Kind::kList, "list");
    std::vector<T> v;
    v.reserve(def.children().size());
    for (const TreeDef& c : def.children()) v.push_back(PyTreeTraits<T>::unflatten(c, r));
    return v;
  }
};

template <typename T, size_t N>
struct PyTreeTraits<std::array<T, N>, std::enable_if_t<PyTree<T>>> {
  static constexpr bool is_pytree = true;
  static TreeDef flatten(const std::array<T, N>& v, std::vector<Array>& out) {
    std::vector<TreeDef> children;
    for (const T& x : v) children.push_back(PyTreeTraits<T>::flatten(x, out));
    return TreeDef::tuple(std::move(children));
  }
  static std::array<T, N> unflatten(const TreeDef& def, detail::LeafReader& r) {
    detail::check_kind(def, TreeDef::Kind::kTuple, "tuple");
    if (def.children().size() != N) detail::throw_structure_mismatch("tuple of " + std::to_string(N), def);
    std::array<T, N> v;
    for (size_t i = 0; i < N; ++i) v[i] = PyTreeTraits<T>::unflatten(def.children()[i], r);
    return v;
  }
};

template <typename T>
struct PyTreeTraits<std::map<std::string, T>, std::enable_if_t<PyTree<T>>> {
  static constexpr bool is_pytree = true;
  static TreeDef flatten(const std::map<std::string, T>& m, std::vector<Array>& out) {
    std::vector<std::string> keys;
    std::vector<TreeDef> children;
    for (const auto& [k, x] : m) {
      keys.push_back(k);
      children.push_back(PyTreeTraits<T>::flatten(x, out));
    }
    return TreeDef::dict(std::move(keys), std::move(children));
  }
  static std::map<std::string, T> unflatten(const TreeDef& def, detail::LeafReader& r) {
    detail::check_kind(def, TreeDef::Kind::kDict, "dict");
    std::map<std::string, T> m;
    for (size_t i = 0; i < def.keys().size(); ++i) {
      m.emplace(def.keys()[i], PyTreeTraits<T>::unflatten(def.children()[i], r));
    }
    return m;
  }
};

template <typename... Ts>
struct PyTreeTraits<std::tuple<Ts...>, std::enable_if_t<(PyTree<Ts> && ...)>> {
  static constexpr bool is_pytree = true;
  static TreeDef flatten(const std::tuple<Ts...>& t, std::vector<Array>& out) {
    std::vector<TreeDef> children;
    std::apply([&](const auto&... xs) {
      (children.push_back(PyTreeTraits<std::remove_cvref_t<decltype(xs)>>::flatten(xs, out)), ...);
    }, t);
    return TreeDef::tuple(std::move(children));
  }
  static std::tuple<Ts...> unflatten(const TreeDef& def, detail::LeafReader& r) {
    detail::check_kind(def, TreeDef::Kind::kTuple, "tuple");
    if (def.children().size() != sizeof...(Ts)) {
      detail::throw_structure_mismatch("tuple of " + std::to_string(sizeof...(Ts)), def);
    }
    return unflatten_impl(def, r, std::index_sequence_for<Ts...>{});
  }
  template <size_t... I>
  static std::tuple<Ts...> unflatten_impl(const TreeDef& def, detail::LeafReader& r,
                                          std::index_sequence<I...>) {
    // Braced init list: evaluated left to right, so leaves are consumed in order.
    return std::tuple<Ts...>{PyTreeTraits<Ts>::unflatten(def.children()[I], r)...};
  }
};

template <typename A, typename B>
struct PyTreeTraits<std::pair<A, B>, std::enable_if_t<PyTree<A> && PyTree<B>>> {
  static constexpr bool is_pytree = true;
  static TreeDef flatten(const std::pair<A, B>& p, std::vector<Array>& out) {
    TreeDef a = PyTreeTraits<A>::flatten(p.first, out);
    TreeDef b = PyTreeTraits<B>::flatten(p.second, out);
    return TreeDef::tuple({std::move(a), std::move(b)});
  }
  static std::pair<A, B> unflatten(const TreeDef& def, detail::LeafReader& r) {
    detail::check_kind(def, TreeDef::Kind::kTuple, "pair");
    if (def.children().size() != 2) detail::throw_structure_mismatch("pair", def);
    A a = PyTreeTraits<A>::unflatten(def.children()[0], r);
    B b = PyTreeTraits<B>::unflatten(def.children()[1], r);
    return {std::move(a), std::move(b)};
  }
};

template <detail::CustomNode T>
struct PyTreeTraits<T> {
  using Node = PyTreeNode<T>;
  using Children = std::remove_cvref_t<decltype(Node::children(std::declval<const T&>()))>;
  static_assert(detail::is_std_tuple<Children>::value && PyTree<Children>,
                "mcx::PyTreeNode<T>::children must return a std::tuple of pytrees");
  static constexpr bool is_pytree = true;
  static TreeDef flatten(const T& x, std::vector<Array>& out) {
    static const bool claimed = (detail::claim_custom_node_name(Node::name, typeid(T)), true);
    (void)claimed;
    TreeDef children = PyTreeTraits<Children>::flatten(Node::children(x), out);
    std::string aux;
    if constexpr (requires { Node::aux(x); }) aux = Node::aux(x);
    return TreeDef::custom(std::string(Node::name), std::move(aux), children.children());
  }
  static T unflatten(const TreeDef& def, detail::LeafReader& r) {
    detail::check_custom(def, Node::name);
    return Node::build(std::string_view(def.aux()),
                       PyTreeTraits<Children>::unflatten(TreeDef::tuple(def.children()), r));
  }
};

// ---- public functions -------------------------------------------------------------------------------
template <PyTree T>
std::pair<std::vector<Array>, TreeDef> tree_flatten(const T& tree) {
  std::vector<Array> leaves;
  TreeDef def = PyTreeTraits<std::remove_cvref_t<T>>::flatten(tree, leaves);
  return {std::move(leaves), std::move(def)};
}

template <PyTree T>
std::vector<Array> tree_leaves(const T& tree) {
  return tree_flatten(tree).first;
}

template <PyTree T>
TreeDef tree_structure(const T& tree) {
  return tree_flatten(tree).second;
}

// Rebuilds a T of structure def from leaves. InvalidArgument when def does not describe a T or the
// number of leaves differs ("[tree_unflatten] expected 3 leaves, found 2").
template <PyTree T>
T tree_unflatten(const TreeDef& def, std::span<const Array> leaves) {
  if (leaves.size() != def.num_leaves()) {
    throw InvalidArgument("[tree_unflatten] expected " + std::to_string(def.num_leaves()) +
                          " leaves for " + def.to_string() + ", found " + std::to_string(leaves.size()));
  }
  detail::LeafReader r{leaves, 0};
  return PyTreeTraits<std::remove_cvref_t<T>>::unflatten(def, r);
}

// Applies f (Array -> Array) to every leaf, keeping the structure.
template <PyTree T, typename F>
std::remove_cvref_t<T> tree_map(F&& f, const T& tree) {
  auto [leaves, def] = tree_flatten(tree);
  for (Array& a : leaves) a = f(a);
  return tree_unflatten<std::remove_cvref_t<T>>(def, leaves);
}

// Applies f (Array, Array -> Array) leafwise to two trees of equal structure (e.g. an SGD update:
// tree_map([&](const Array& p, const Array& g) { return p - lr * g; }, params, grads)).
// InvalidArgument naming both structures when they differ.
template <PyTree T, PyTree U, typename F>
std::remove_cvref_t<T> tree_map(F&& f, const T& a, const U& b) {
  auto [la, da] = tree_flatten(a);
  auto [lb, db] = tree_flatten(b);
  if (da != db) {
    throw InvalidArgument("[tree_map] trees have different structures: " + da.to_string() + " vs " +
                          db.to_string());
  }
  for (size_t i = 0; i < la.size(); ++i) la[i] = f(la[i], lb[i]);
  return tree_unflatten<std::remove_cvref_t<T>>(da, la);
}

}  // namespace mcx
