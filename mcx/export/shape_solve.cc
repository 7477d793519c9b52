#include "mcx/export/shape_solve.h"

#include <set>

#include "mcx/core/error.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/str_util.h"

namespace mcx::exporting {

using ir::internal::cat;
using ir::internal::join;

namespace {

struct Equation {
  DimExpr expr;     // the specification
  DimExpr actual;   // the dimension found
  int arg = 0;
  int dim = 0;
  bool done = false;
};

std::string spec_list(const Signature& sig) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < sig.in_avals.size(); ++i) {
    if (is_static(sig.in_avals[i].shape)) continue;
    std::vector<std::string> dims;
    for (const DimExpr& d : sig.in_avals[i].shape) dims.push_back(d.to_string());
    parts.push_back(cat(sig.in_names[i], ".shape = (", join(dims, ", "), sig.in_avals[i].rank() == 1 ? ",)" : ")"));
  }
  return join(parts, ", ");
}

}  // namespace

absl::Status check_arguments(const Signature& sig, std::span<const AbstractValue> args) {
  auto fail = [&](const auto&... x) {
    return absl::InvalidArgumentError(cat("[", sig.api, "] '", sig.fun_name, "': ", x...));
  };
  if (args.size() != sig.in_avals.size()) {
    return fail("expected ", sig.in_avals.size(), " arguments, found ", args.size());
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const AbstractValue& want = sig.in_avals[i];
    if (args[i].dtype != want.dtype) {
      return fail("argument ", sig.in_names[i], " must have dtype ", dtype_name(want.dtype), " (exported as ",
                  want.to_string(), "), found ", args[i].to_string());
    }
    if (args[i].rank() != want.rank()) {
      return fail("argument ", sig.in_names[i], " must have rank ", want.rank(), " (exported as ", want.to_string(),
                  "), found ", args[i].to_string());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, DimExpr>> solve_dim_vars(const Signature& sig,
                                                              std::span<const AbstractValue> args) {
  MCX_RETURN_IF_ERROR(check_arguments(sig, args));
  const std::string prefix = cat("[", sig.api, "] '", sig.fun_name, "': ");
  auto mismatch = [&](const auto&... x) {
    return absl::InvalidArgumentError(
        cat(prefix, "Input shapes do not match the polymorphic shapes specification. ", x...,
            ". Using the following polymorphic shapes specifications: ", spec_list(sig), "."));
  };
  std::vector<Equation> eqs;
  std::set<std::string> unknown;
  for (size_t i = 0; i < args.size(); ++i) {
    for (int d = 0; d < args[i].rank(); ++d) {
      eqs.push_back({sig.in_avals[i].shape[d], args[i].shape[d], static_cast<int>(i), d});
      for (const std::string& v : eqs.back().expr.variables()) unknown.insert(v);
    }
  }
  std::map<std::string, DimExpr> env;
  std::vector<std::string> provenance;
  auto where = [&](const Equation& e) {
    return cat("dimension ", e.dim, " of ", sig.in_names[e.arg], " (specification '", e.expr.to_string(),
               "', found ", e.actual.to_string(), ")");
  };
  const SymbolicScope empty_scope;
  const SymbolicScope& scope = sig.scope ? *sig.scope : empty_scope;
  for (bool progress = true; progress;) {
    progress = false;
    for (Equation& e : eqs) {
      if (e.done) continue;
      DimExpr rest = e.expr.substitute(env);
      std::vector<std::string> unk;
      for (const std::string& v : rest.variables()) {
        if (unknown.count(v)) unk.push_back(v);
      }
      if (unk.empty()) {
        // Fully determined: check it.
        e.done = true;
        bool equal = rest == e.actual || scope.known_equal(rest, e.actual);
        if (!equal) {
          return mismatch("Found inconsistency between ", where(e), ": the specification evaluates to ",
                          rest.to_string(), (provenance.empty() ? "" : " with "), join(provenance, ", "));
        }
        continue;
      }
      if (unk.size() != 1) continue;
      // rest == k*v + c with a constant k != 0 (c may hold the caller's symbolic variables)?
      const DimExpr c = rest.substitute({{unk[0], DimExpr(0)}});
      const auto k = (rest.substitute({{unk[0], DimExpr(1)}}) - c).constant_value();
      if (!k || *k == 0 || !(DimExpr(*k) * DimExpr::var(unk[0]) + c == rest)) continue;
      struct { std::string var; int64_t factor; } lin_v{unk[0], *k};
      auto* lin = &lin_v;
      // actual = k*v + c  =>  v = (actual - c) / k
      DimExpr numer = e.actual - c;
      DimExpr value;
      if (auto n = numer.constant_value()) {
        if (*n % lin->factor != 0) {
          int64_t r = *n % lin->factor;
          if (r < 0) r += lin->factor > 0 ? lin->factor : -lin->factor;
          return mismatch("Division had remainder ", r, " when computing the value of '", lin->var, "' from ",
                          where(e));
        }
        value = DimExpr(*n / lin->factor);
        const bool zero_ok = scope.zero_allowed().count(lin->var) > 0;  // "zero_sized(v)": a dimension of size 0
        if (*n / lin->factor < (zero_ok ? 0 : 1)) {
          return mismatch("Expected value >= ", zero_ok ? 0 : 1, " for dimension variable '", lin->var, "', found ",
                          *n / lin->factor, " from ", where(e),
                          zero_ok || *n / lin->factor != 0
                              ? std::string()
                              : cat(" (the constraint 'zero_sized(", lin->var, ")' at export allows size 0)"));
        }
      } else {
        value = lin->factor == 1 ? numer : floordiv(numer, DimExpr(lin->factor));
        if (!(value * DimExpr(lin->factor) == numer)) {
          return mismatch("Cannot divide '", numer.to_string(), "' by ", lin->factor, " exactly when computing '",
                          lin->var, "' from ", where(e));
        }
      }
      env[lin->var] = value;
      provenance.push_back(cat("'", lin->var, "' = ", value.to_string(), " from ", where(e)));
      unknown.erase(lin->var);
      e.done = true;
      progress = true;
    }
  }
  if (!unknown.empty()) {
    std::vector<std::string> names, pending;
    for (const auto& v : unknown) names.push_back(cat("'", v, "'"));
    for (const Equation& e : eqs) {
      if (!e.done) pending.push_back(cat("'", e.expr.to_string(), "' for dimension ", e.dim, " of ", sig.in_names[e.arg]));
    }
    return absl::InvalidArgumentError(
        cat(prefix, "Cannot solve for values of dimension variables {", join(names, ", "),
            "}. We can only solve linear uni-variate constraints. Using the following polymorphic shapes "
            "specifications: ", spec_list(sig), ". Unprocessed specifications: ", join(pending, ", "), "."));
  }
  // Constraints with the values found (only decidable ones are checked; symbolic leftovers must be
  // provable from the caller's scope, which the inlined program's shape rules then rely on).
  for (size_t i = 0; i < scope.parsed().size(); ++i) {
    const auto& c = scope.parsed()[i];
    DimExpr l = c.lhs.substitute(env), r = c.rhs.substitute(env);
    auto lv = l.constant_value(), rv = r.constant_value();
    if (!lv || !rv) continue;
    bool ok = c.op == ">=" ? *lv >= *rv : c.op == "<=" ? *lv <= *rv : c.op == ">" ? *lv > *rv
              : c.op == "<" ? *lv < *rv : *lv == *rv;
    if (!ok) {
      std::vector<std::string> vals;
      for (const auto& [k, v] : env) vals.push_back(cat(k, " = ", v.to_string()));
      return absl::InvalidArgumentError(
          cat(prefix, "Input shapes do not match the symbolic shape constraint '", scope.constraints()[i],
              "': found ", *lv, " ", c.op, " ", *rv, " false for ", join(vals, ", "), " (obtained: ",
              join(provenance, "; "), ")"));
    }
  }
  return env;
}

absl::StatusOr<std::map<std::string, int64_t>> solve_dim_values(const Signature& sig,
                                                                std::span<const AbstractValue> args) {
  MCX_ASSIGN_OR_RETURN(auto env, solve_dim_vars(sig, args));
  std::map<std::string, int64_t> out;
  for (const auto& [k, v] : env) {
    auto c = v.constant_value();
    if (!c) {
      return absl::InvalidArgumentError(cat("[", sig.api, "] '", sig.fun_name, "': dimension variable '", k,
                                            "' is symbolic (", v.to_string(), "); expected concrete arguments"));
    }
    out[k] = *c;
  }
  return out;
}

absl::StatusOr<ir::Program> substitute_dim_vars(const ir::Program& program,
                                                const std::map<std::string, DimExpr>& env,
                                                const SymbolicScope& scope, const std::string& api) {
  auto subst = [&](const Shape& s) {
    Shape out;
    out.reserve(s.size());
    for (const DimExpr& d : s) out.push_back(d.substitute(env));
    return out;
  };
  ir::ProgramBuilder b(program.name, scope);
  for (const AbstractValue& p : program.params) b.add_parameter({p.dtype, subst(p.shape)});
  for (size_t i = 0; i < program.instrs.size(); ++i) {
    const ir::Instr& in = program.instrs[i];
    ir::Attrs attrs;
    for (const auto& [name, value] : in.attrs.entries()) {
      if (const auto* s = std::get_if<Shape>(&value)) {
        attrs.set(name, subst(*s));
      } else {
        attrs.set(name, value);
      }
    }
    auto v = b.emit(in.kind, in.operands, std::move(attrs));
    if (!v.ok()) {
      return absl::InvalidArgumentError(cat("[", api, "] instantiating the exported program for symbolic ",
                                            "shapes failed at instruction ", i, ": ", v.status().message()));
    }
  }
  return std::move(b).build(program.results);
}

}  // namespace mcx::exporting
