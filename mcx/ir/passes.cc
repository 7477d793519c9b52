#include "mcx/ir/passes.h"

#include <memory>
#include <set>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <variant>
#include <vector>

#include "mcx/core/error.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/str_util.h"

namespace mcx::ir {
using internal::cat;
namespace {

size_t mix(size_t h, size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)); }

size_t hash_attr(const Attr& a) {
  size_t h = a.index();
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          h = mix(h, std::hash<int64_t>()(v));
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          for (int64_t x : v) h = mix(h, std::hash<int64_t>()(x));
        } else if constexpr (std::is_same_v<T, Shape>) {
          for (const DimExpr& d : v) h = mix(h, d.hash());
        } else if constexpr (std::is_same_v<T, DType>) {
          h = mix(h, static_cast<size_t>(v));
        } else if constexpr (std::is_same_v<T, Regions>) {
          for (const auto& region : v) h = mix(h, region->instrs.size());  // equality compares the programs
        } else {
          h = mix(h, static_cast<size_t>(v.dtype()));
          for (int64_t d : v.dims()) h = mix(h, std::hash<int64_t>()(d));
          h = mix(h, std::hash<std::string_view>()(
                         std::string_view(static_cast<const char*>(v.data()), v.nbytes())));
        }
      },
      a);
  return h;
}

size_t hash_instr(const Instr& ins) {
  size_t h = static_cast<size_t>(ins.kind);
  for (ValueId v : ins.operands) h = mix(h, static_cast<size_t>(v));
  for (const auto& [name, value] : ins.attrs.entries()) {
    h = mix(h, std::hash<std::string>()(name));
    h = mix(h, hash_attr(value));
  }
  h = mix(h, static_cast<size_t>(ins.type.dtype));
  for (const DimExpr& d : ins.type.shape) h = mix(h, d.hash());
  return h;
}

bool same_instr(const Instr& a, const Instr& b) {
  return a.kind == b.kind && a.operands == b.operands && a.type == b.type && a.attrs == b.attrs;
}

}  // namespace

bool EffectScan::has_effects(const Instr& instr) {
  if (has_side_effects(instr.kind)) return true;
  if (!has_regions(instr.kind)) return false;
  auto regions = instr.attrs.get_regions("regions");
  if (!regions.ok()) return false;
  for (const auto& region : *regions)
    if (region && has_effects(*region)) return true;
  return false;
}

bool EffectScan::has_effects(const Program& program) {
  if (auto it = memo_.find(&program); it != memo_.end()) return it->second;
  bool effects = false;
  for (const Instr& in : program.instrs) effects = effects || has_effects(in);
  memo_[&program] = effects;
  return effects;
}

namespace {

Program dead_code_eliminated(const Program& p, bool keep_effects) {
  const int np = p.num_params();
  std::vector<bool> live(p.num_values(), false);
  for (ValueId v : p.results) live[v] = true;
  EffectScan effects;
  for (int i = static_cast<int>(p.instrs.size()) - 1; i >= 0; --i) {
    if (keep_effects && effects.has_effects(p.instrs[i])) live[np + i] = true;
    if (!live[np + i]) continue;
    for (ValueId v : p.instrs[i].operands) live[v] = true;
  }
  Program out;
  out.name = p.name;
  out.scope = p.scope;
  out.params = p.params;
  std::vector<ValueId> remap(p.num_values(), -1);
  for (int i = 0; i < np; ++i) remap[i] = i;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    if (!live[np + i]) continue;
    Instr ins = p.instrs[i];
    for (ValueId& v : ins.operands) v = remap[v];
    remap[np + i] = out.num_values();
    out.instrs.push_back(std::move(ins));
  }
  for (ValueId v : p.results) out.results.push_back(remap[v]);
  return out;
}

}  // namespace

Program eliminate_dead_code(const Program& p) { return dead_code_eliminated(p, /*keep_effects=*/true); }

namespace {

// Rewrites programs without their effects, each distinct region once (siblings keep sharing theirs).
class EffectStripper {
 public:
  Program strip(const Program& p) {
    Program out = p;
    for (Instr& in : out.instrs) {
      if (!has_regions(in.kind) || !scan_.has_effects(in)) continue;
      Regions regions = value_or_throw(in.attrs.get_regions("regions"));
      for (auto& region : regions) region = stripped(region);
      in.attrs.set("regions", std::move(regions));
    }
    return dead_code_eliminated(out, /*keep_effects=*/false);
  }

 private:
  std::shared_ptr<const Program> stripped(const std::shared_ptr<const Program>& region) {
    if (!region || !scan_.has_effects(*region)) return region;
    auto it = done_.find(region.get());
    if (it != done_.end()) return it->second;
    auto s = std::make_shared<const Program>(strip(*region));
    done_.emplace(region.get(), s);
    return s;
  }

  EffectScan scan_;
  std::unordered_map<const Program*, std::shared_ptr<const Program>> done_;
};

}  // namespace

Program drop_side_effects(const Program& p) { return EffectStripper().strip(p); }

Program eliminate_common_subexpressions(const Program& p) {
  const int np = p.num_params();
  Program out = p;
  std::vector<ValueId> canon(p.num_values());
  for (int i = 0; i < p.num_values(); ++i) canon[i] = i;
  std::unordered_multimap<size_t, ValueId> seen;
  EffectScan effects;
  for (size_t i = 0; i < out.instrs.size(); ++i) {
    Instr& ins = out.instrs[i];
    for (ValueId& v : ins.operands) v = canon[v];
    const ValueId self = np + static_cast<ValueId>(i);
    if (effects.has_effects(ins)) continue;  // two prints of one value print twice
    size_t h = hash_instr(ins);
    auto [b, e] = seen.equal_range(h);
    for (auto it = b; it != e; ++it) {
      if (same_instr(out.instrs[it->second - np], ins)) {
        canon[self] = it->second;
        break;
      }
    }
    if (canon[self] == self) seen.emplace(h, self);
  }
  for (ValueId& v : out.results) v = canon[v];
  return eliminate_dead_code(out);
}

absl::StatusOr<Program> fold_constants(const Program& p, const ConstantEvaluator& evaluate,
                                       const FoldOptions& options) {
  const int np = p.num_params();
  Program out = p;
  for (size_t i = 0; i < out.instrs.size(); ++i) {
    const Instr& ins = p.instrs[i];
    if (ins.operands.empty()) continue;
    // A collective's value depends on the other partitions, and a sharding constraint must reach the
    // partitioner: neither is a function of its operands alone.
    if (is_collective(ins.kind) || ins.kind == OpKind::kShardingConstraint || has_side_effects(ins.kind)) continue;
    bool all_const = true;
    for (ValueId v : ins.operands)
      all_const = all_const && !out.is_param(v) && out.defining_instr(v).kind == OpKind::kConstant;
    if (!all_const) continue;
    auto n = num_elements(ins.type.shape).constant_value();
    if (!n || *n > options.max_elements) continue;
    std::vector<Buffer> args;
    for (ValueId v : ins.operands) {
      MCX_ASSIGN_OR_RETURN(Buffer b, out.defining_instr(v).attrs.get_buffer("value"));
      args.push_back(std::move(b));
    }
    auto where = [&] { return cat("[fold_constants] instruction %", np + static_cast<int>(i), " (", op_name(ins.kind), "): "); };
    auto r = evaluate(ins, args);
    if (!r.ok()) return absl::Status(r.status().code(), cat(where(), std::string(r.status().message())));
    if (r->abstract_value() != ins.type)
      return absl::InternalError(cat(where(), "the evaluator returned ", r->abstract_value().to_string(),
                                     ", expected ", ins.type.to_string()));
    out.instrs[i] = Instr{OpKind::kConstant, {}, Attrs{{"value", *std::move(r)}}, ins.type};
  }
  return eliminate_dead_code(out);
}

namespace {

void collect_vars(const Shape& s, std::set<std::string>& out) {
  for (const std::string& v : shape_variables(s)) out.insert(v);
}

bool compare(int64_t a, const std::string& op, int64_t b) {
  if (op == ">=") return a >= b;
  if (op == "<=") return a <= b;
  if (op == ">") return a > b;
  if (op == "<") return a < b;
  return a == b;
}

// The dimension variables of p's types, attributes, constraints and regions (at any nesting).
void collect_program_vars(const Program& p, std::set<std::string>& vars) {
  for (const AbstractValue& t : p.params) collect_vars(t.shape, vars);
  for (const Instr& ins : p.instrs) {
    collect_vars(ins.type.shape, vars);
    for (const auto& [name, value] : ins.attrs.entries()) {
      if (const Shape* s = std::get_if<Shape>(&value)) collect_vars(*s, vars);
      if (const Regions* r = std::get_if<Regions>(&value))
        for (const auto& region : *r) collect_program_vars(*region, vars);
    }
  }
  for (const auto& c : p.scope.parsed()) {
    for (const std::string& v : c.lhs.variables()) vars.insert(v);
    for (const std::string& v : c.rhs.variables()) vars.insert(v);
  }
}

// Specialised regions by their original objects: siblings share regions, and so do their specialisations.
using RegionMemo = std::map<const Program*, std::shared_ptr<const Program>>;

absl::StatusOr<Program> specialize_impl(const Program& p, const std::map<std::string, int64_t>& all_values,
                                        bool is_region, RegionMemo& memo);

}  // namespace

absl::StatusOr<Program> specialize(const Program& p, const std::map<std::string, int64_t>& dim_values) {
  RegionMemo memo;
  return specialize_impl(p, dim_values, false, memo);
}

namespace {

// A region is specialised with the values of the variables it uses (it need not use all of its op's).
absl::StatusOr<Program> specialize_impl(const Program& p, const std::map<std::string, int64_t>& all_values,
                                        bool is_region, RegionMemo& memo) {
  std::set<std::string> vars;
  collect_program_vars(p, vars);
  std::map<std::string, int64_t> dim_values;
  for (const auto& [name, value] : all_values)
    if (!is_region || vars.count(name)) dim_values.emplace(name, value);
  std::map<std::string, DimExpr> env;
  for (const auto& [name, value] : dim_values) {
    if (!vars.count(name))
      return absl::InvalidArgumentError(cat("[specialize] unknown dimension variable '", name, "'; the program has ",
                                            vars.empty() ? std::string("none") : internal::join(vars, ", ")));
    // "zero_sized(v)" in the scope lets v be 0; a region's values were checked with its program's.
    const int64_t least = p.scope.zero_allowed().count(name) ? 0 : 1;
    if (!is_region && value < least)
      return absl::InvalidArgumentError(
          cat("[specialize] dimension variable ", name, " = ", value, ", expected >= ", least));
    env.emplace(name, DimExpr(value));
  }
  auto bound = [&](const DimExpr& e) {
    for (const std::string& v : e.variables())
      if (!dim_values.count(v)) return false;
    return true;
  };
  std::vector<std::string> kept;
  for (size_t i = 0; i < p.scope.parsed().size(); ++i) {
    const auto& c = p.scope.parsed()[i];
    if (bound(c.lhs) && bound(c.rhs)) {
      MCX_ASSIGN_OR_RETURN(int64_t l, c.lhs.evaluate(dim_values));
      MCX_ASSIGN_OR_RETURN(int64_t r, c.rhs.evaluate(dim_values));
      if (!compare(l, c.op, r)) {
        std::string vals;
        for (const auto& [name, value] : dim_values) vals += cat(vals.empty() ? "" : ", ", name, " = ", value);
        return absl::InvalidArgumentError(cat("[specialize] constraint '", p.scope.constraints()[i],
                                              "' is violated for ", vals, " (", l, " ", c.op, " ", r, " is false)"));
      }
    } else {
      kept.push_back(cat(c.lhs.substitute(env).to_string(), " ", c.op, " ", c.rhs.substitute(env).to_string()));
    }
  }
  auto scope = SymbolicScope::create(kept);
  if (!scope.ok()) return absl::InvalidArgumentError(cat("[specialize] ", std::string(scope.status().message())));
  auto subst = [&](const Shape& s) {
    Shape out;
    for (const DimExpr& d : s) out.push_back(d.substitute(env));
    return out;
  };
  ProgramBuilder b(p.name, *std::move(scope));
  for (int i = 0; i < p.num_params(); ++i) {
    AbstractValue t{p.params[i].dtype, subst(p.params[i].shape)};
    for (const DimExpr& d : t.shape)
      if (auto c = d.constant_value(); c && *c < 0)
        return absl::InvalidArgumentError(cat("[specialize] parameter %", i, " of type ", p.params[i].to_string(),
                                              " becomes ", t.to_string(), " with a negative dimension"));
    b.add_parameter(std::move(t));
  }
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& ins = p.instrs[i];
    Attrs attrs;
    for (const auto& [name, value] : ins.attrs.entries()) {
      if (const Shape* s = std::get_if<Shape>(&value)) {
        attrs.set(name, subst(*s));
      } else if (const Regions* r = std::get_if<Regions>(&value)) {
        Regions specialised;
        for (const auto& region : *r) {
          auto it = memo.find(region.get());
          if (it == memo.end()) {
            MCX_ASSIGN_OR_RETURN(Program sr, specialize_impl(*region, dim_values, true, memo));
            it = memo.emplace(region.get(), std::make_shared<const Program>(std::move(sr))).first;
          }
          specialised.push_back(it->second);
        }
        attrs.set(name, std::move(specialised));
      } else {
        attrs.set(name, value);
      }
    }
    auto v = b.emit(ins.kind, ins.operands, std::move(attrs));
    if (!v.ok())
      return absl::InvalidArgumentError(cat("[specialize] instruction %", p.num_params() + static_cast<int>(i),
                                            ": ", std::string(v.status().message())));
  }
  return std::move(b).build(p.results);
}

}  // namespace

absl::StatusOr<std::map<std::string, int64_t>> solve_dimension_values(
    const Program& p, std::span<const std::vector<int64_t>> arg_dims) {
  auto fail = [](const auto&... a) { return absl::InvalidArgumentError(cat("[solve_dimension_values] ", a...)); };
  if (static_cast<int>(arg_dims.size()) != p.num_params())
    return fail("got ", arg_dims.size(), " argument shapes for ", p.num_params(), " parameters");
  for (int i = 0; i < p.num_params(); ++i)
    if (static_cast<int>(arg_dims[i].size()) != p.params[i].rank())
      return fail("argument ", i, " has rank ", arg_dims[i].size(), ", parameter %", i, " is ",
                  p.params[i].to_string());
  auto arg_str = [&](int i) { return cat("[", internal::join(arg_dims[i], ","), "]"); };
  std::map<std::string, int64_t> values;
  std::map<std::string, DimExpr> env;
  // Solve until no dimension yields a new variable (a solved one may make another linear).
  for (bool progress = true; progress;) {
    progress = false;
    for (int i = 0; i < p.num_params(); ++i) {
      for (int d = 0; d < p.params[i].rank(); ++d) {
        DimExpr e = p.params[i].shape[d].substitute(env);
        auto lin = e.as_linear_in_one_var();
        if (!lin) continue;
        int64_t n = arg_dims[i][d] - lin->offset;
        if (n % lin->factor != 0 || n / lin->factor < 1)
          return fail("argument ", i, " ", arg_str(i), " dim ", d, " is ", arg_dims[i][d], ", but parameter %", i,
                      " ", p.params[i].to_string(), " needs ", p.params[i].shape[d].to_string(),
                      " there, which has no solution with ", lin->var, " >= 1");
        values[lin->var] = n / lin->factor;
        env[lin->var] = DimExpr(n / lin->factor);
        progress = true;
      }
    }
  }
  for (int i = 0; i < p.num_params(); ++i) {
    for (int d = 0; d < p.params[i].rank(); ++d) {
      const DimExpr& e = p.params[i].shape[d];
      for (const std::string& v : e.variables())
        if (!values.count(v))
          return fail("dimension variable ", v, " of parameter %", i, " ", p.params[i].to_string(),
                      " is not determined by the argument shapes (it occurs only in non-linear dimensions)");
      MCX_ASSIGN_OR_RETURN(int64_t got, e.evaluate(values));
      if (got != arg_dims[i][d]) {
        std::string vals;
        for (const auto& [name, value] : values) vals += cat(vals.empty() ? "" : ", ", name, " = ", value);
        return fail("argument ", i, " ", arg_str(i), " dim ", d, " is ", arg_dims[i][d], ", but parameter %", i,
                    " ", p.params[i].to_string(), " has ", e.to_string(), " = ", got, " for ", vals);
      }
    }
  }
  for (size_t i = 0; i < p.scope.parsed().size(); ++i) {
    const auto& c = p.scope.parsed()[i];
    auto l = c.lhs.evaluate(values);
    auto r = c.rhs.evaluate(values);
    if (!l.ok() || !r.ok()) continue;  // mentions a variable that the parameters do not determine
    if (!compare(*l, c.op, *r))
      return fail("constraint '", p.scope.constraints()[i], "' is violated (", *l, " ", c.op, " ", *r,
                  " is false) for the argument shapes");
  }
  return values;
}

}  // namespace mcx::ir
