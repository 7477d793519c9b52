// Program-level autodiff: composite programs with shared values, value_and_grad, grad of grad, symbolic
// shapes, errors, dead-code behaviour and inline_program.
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "mcx/core/error.h"
#include "mcx/ir/autodiff.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/shape_rules.h"
#include "tests/support/reference_eval.h"
#include "tests/ir/ir_test_util.h"
#include "tests/support/test_util.h"

namespace mcx::test {
namespace {

using ir::ProgramBuilder;

// Compares the gradient outputs of a (params..., cts...) -> (results..., grads...) program, or of a
// value_and_grad program (cts empty), with central differences of f.
void expect_grads_match_fd(const Program& f, const Program& g, const std::vector<Buffer>& args,
                           const std::vector<Buffer>& cts, const std::vector<int>& wrt, double rtol = 1e-6,
                           double atol = 1e-8) {
  ASSERT_TRUE(ir::verify(g).ok()) << ir::verify(g);
  std::vector<Buffer> gargs = args;
  gargs.insert(gargs.end(), cts.begin(), cts.end());
  auto out = reference_evaluate(g, gargs);
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<Buffer> fd_cts = cts;
  if (fd_cts.empty()) fd_cts.push_back(Buffer::scalar<double>(1.0));
  auto fd = numerical_vjp(f, args, fd_cts, wrt);
  ASSERT_TRUE(fd.ok()) << fd.status();
  const size_t nres = f.results.size();
  for (size_t i = 0; i < wrt.size(); ++i) {
    EXPECT_TRUE(buffers_near((*out)[nres + i], (*fd)[i], rtol, atol)) << "gradient of parameter " << wrt[i];
  }
}

// A two-layer network with a log-sum-exp loss; x, w1, b1 and w2 are used several times.
Program mlp_loss(DType t = DType::kFloat64) {
  ProgramBuilder b("mlp");
  auto ty = [&](V dims) { return AbstractValue{t, concrete_shape(dims)}; };
  ValueId x = b.add_parameter(ty({4, 3}));
  ValueId w1 = b.add_parameter(ty({3, 5}));
  ValueId b1 = b.add_parameter(ty({5}));
  ValueId w2 = b.add_parameter(ty({5, 2}));
  auto dot = [&](ValueId l, ValueId r) {
    return b.emit_or_throw(OpKind::kDotGeneral, {l, r},
                           {{"lhs_batch", V{}}, {"rhs_batch", V{}}, {"lhs_contracting", V{1}}, {"rhs_contracting", V{0}}});
  };
  ValueId h = b.unary(OpKind::kTanh, b.binary(OpKind::kAdd, dot(x, w1), b.broadcast_in_dim(b1, concrete_shape({4, 5}), {1})));
  ValueId logits = dot(h, w2);
  ValueId lse = b.unary(OpKind::kLog, b.reduce_sum(b.unary(OpKind::kExp, logits), {1}));
  ValueId picked = b.reduce_sum(b.binary(OpKind::kMul, logits, b.full_like(logits, 0.5)), {1});
  ValueId per_row = b.binary(OpKind::kSub, lse, picked);
  ValueId reg = b.reduce_sum(b.binary(OpKind::kMul, w1, w1), {0, 1});
  ValueId loss = b.binary(OpKind::kAdd, b.reduce_sum(per_row, {0}), b.binary(OpKind::kMul, reg, b.scalar_constant(t, 0.1)));
  return std::move(b).build({loss});
}

TEST(Autodiff, ValueAndGradOfMlpMatchesFiniteDifferences) {
  Program f = mlp_loss();
  auto g = ir::value_and_grad_program(f, {1, 2, 3});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->results.size(), 4u);
  EXPECT_EQ(g->params, f.params);
  std::vector<Buffer> args = {rnd({4, 3}, 1), rnd({3, 5}, 2), rnd({5}, 3), rnd({5, 2}, 4)};
  auto value = reference_evaluate(f, args);
  auto out = reference_evaluate(*g, args);
  ASSERT_TRUE(value.ok() && out.ok());
  EXPECT_TRUE((*out)[0].bitwise_equal((*value)[0]));
  expect_grads_match_fd(f, *g, args, {}, {1, 2, 3});
}

TEST(Autodiff, LowerPrecisionGradientsAgreeWithFloat64) {
  // The same network in f32, f16 and bf16: every constant a rule emits takes the value's dtype, and the
  // gradients agree with the f64 gradients to the precision of the type.
  auto g64 = ir::value_and_grad_program(mlp_loss(), {0, 1, 2, 3});
  ASSERT_TRUE(g64.ok());
  std::vector<Buffer> args = {rnd({4, 3}, 1), rnd({3, 5}, 2), rnd({5}, 3), rnd({5, 2}, 4)};
  auto want = reference_evaluate(*g64, args);
  ASSERT_TRUE(want.ok());
  for (auto [t, tol] : {std::pair{DType::kFloat32, 1e-5}, std::pair{DType::kFloat16, 2e-2}, std::pair{DType::kBFloat16, 1e-1}}) {
    SCOPED_TRACE(dtype_name(t));
    auto g = ir::value_and_grad_program(mlp_loss(t), {0, 1, 2, 3});
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_TRUE(ir::verify(*g).ok());
    std::vector<Buffer> targs;
    for (const Buffer& a : args) targs.push_back(buffer_from_doubles(t, a.dims(), a.to_doubles()));
    auto got = reference_evaluate(*g, targs);
    ASSERT_TRUE(got.ok()) << got.status();
    for (size_t i = 0; i < got->size(); ++i) {
      EXPECT_EQ((*got)[i].dtype(), t);
      Buffer as64 = buffer_from_doubles(DType::kFloat64, (*got)[i].dims(), (*got)[i].to_doubles());
      EXPECT_TRUE(buffers_near(as64, (*want)[i], tol, tol)) << "output " << i;
    }
  }
}

TEST(Autodiff, VjpWithSharedValuesAndRepeatedResults) {
  // Results (y, y, x) with y = x * exp(x): the cotangents of both copies of y and of x add up.
  ProgramBuilder b;
  ValueId x = b.add_parameter(f64({3}));
  ValueId y = b.binary(OpKind::kMul, x, b.unary(OpKind::kExp, x));
  Program f = std::move(b).build({y, y, x});
  auto vjp = ir::vjp_program(f, {0});
  ASSERT_TRUE(vjp.ok()) << vjp.status();
  EXPECT_EQ(vjp->num_params(), 4);
  expect_grads_match_fd(f, *vjp, {rnd({3}, 1)}, {rnd({3}, 2), rnd({3}, 3), rnd({3}, 4)}, {0});
}

TEST(Autodiff, UnusedAndConstantPathsGiveZeroGradient) {
  // p1 is unused, p2 only reaches the result through stop_gradient and floor.
  ProgramBuilder b;
  ValueId x = b.add_parameter(f64({2}));
  b.add_parameter(f64({3}));
  ValueId z = b.add_parameter(f64({2}));
  ValueId blocked = b.binary(OpKind::kAdd, b.unary(OpKind::kStopGradient, z), b.unary(OpKind::kFloor, z));
  ValueId r = b.reduce_sum(b.binary(OpKind::kMul, x, blocked), {0});
  Program f = std::move(b).build({r});
  auto g = ir::value_and_grad_program(f, {1, 2});
  ASSERT_TRUE(g.ok()) << g.status();
  auto out = reference_evaluate(*g, std::vector<Buffer>{rnd({2}, 1), rnd({3}, 2), rnd({2}, 3)});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE((*out)[1].bitwise_equal(Buffer::zeros(DType::kFloat64, {3})));
  EXPECT_TRUE((*out)[2].bitwise_equal(Buffer::zeros(DType::kFloat64, {2})));
}

TEST(Autodiff, BackwardPassSkipsValuesThatDoNotReachWrt) {
  // f(x, y) = sum(x * y + sin(y)): the gradient w.r.t. x alone needs no cos (sin's rule).
  ProgramBuilder b;
  ValueId x = b.add_parameter(f64({4}));
  ValueId y = b.add_parameter(f64({4}));
  ValueId s = b.binary(OpKind::kAdd, b.binary(OpKind::kMul, x, y), b.unary(OpKind::kSin, y));
  Program f = std::move(b).build({b.reduce_sum(s, {0})});
  auto gx = ir::value_and_grad_program(f, {0});
  auto gy = ir::value_and_grad_program(f, {1});
  ASSERT_TRUE(gx.ok() && gy.ok());
  EXPECT_EQ(count_ops(*gx, OpKind::kCos), 0);
  EXPECT_EQ(count_ops(*gy, OpKind::kCos), 1);
  EXPECT_LT(gx->instrs.size(), gy->instrs.size());
  expect_grads_match_fd(f, *gx, {rnd({4}, 1), rnd({4}, 2)}, {}, {0});
  expect_grads_match_fd(f, *gy, {rnd({4}, 1), rnd({4}, 2)}, {}, {1});
}

// ---- higher order ------------------------------------------------------------------------------------

// Checks the Hessian-vector product obtained by differentiating value_and_grad_program(f) again.
void check_second_derivative(const Program& f, const std::vector<Buffer>& args, uint64_t seed) {
  auto g = ir::value_and_grad_program(f, {0});
  ASSERT_TRUE(g.ok()) << g.status();
  auto h = ir::vjp_program(*g, {0});  // (x, ct_value, ct_grad) -> (value, grad, hvp)
  ASSERT_TRUE(h.ok()) << h.status();
  std::vector<int64_t> dims = *to_concrete(f.params[0].shape);
  std::vector<Buffer> cts = {Buffer::scalar<double>(0.0), rnd(dims, seed)};
  expect_grads_match_fd(*g, *h, args, cts, {0}, 1e-5, 1e-7);
}

TEST(Autodiff, SecondDerivativesOfElementwiseOps) {
  ProgramBuilder b;
  ValueId x = b.add_parameter(f64({5}));
  auto u = [&](OpKind k, ValueId v) { return b.unary(k, v); };
  auto bin = [&](OpKind k, ValueId l, ValueId r) { return b.binary(k, l, r); };
  ValueId one = b.full_like(x, 1.0);
  ValueId t = bin(OpKind::kMul, u(OpKind::kTanh, x), u(OpKind::kLogistic, x));
  t = bin(OpKind::kDiv, t, bin(OpKind::kAdd, one, bin(OpKind::kMul, x, x)));
  ValueId pos = bin(OpKind::kAdd, bin(OpKind::kMul, x, x), one);
  t = bin(OpKind::kAdd, t, bin(OpKind::kMul, u(OpKind::kSqrt, pos), u(OpKind::kRsqrt, pos)));
  t = bin(OpKind::kAdd, t, bin(OpKind::kPow, pos, u(OpKind::kSin, x)));
  t = bin(OpKind::kAdd, t, u(OpKind::kLog, bin(OpKind::kAdd, u(OpKind::kExp, x), u(OpKind::kCos, x))));
  t = bin(OpKind::kAdd, t, bin(OpKind::kMax, x, u(OpKind::kNeg, u(OpKind::kExpm1, x))));
  Program f = std::move(b).build({b.reduce_sum(t, {0})});
  check_second_derivative(f, {rnd({5}, 1, 0.1, 1.5)}, 2);
}

TEST(Autodiff, SecondDerivativesThroughStructuralOps) {
  // sum(reduce_max(pad(slice(x)) * dot(x, x^T))) + prod(...) style mix.
  ProgramBuilder b;
  ValueId x = b.add_parameter(f64({3, 4}));
  ValueId xx = b.emit_or_throw(OpKind::kDotGeneral, {x, x},
                               {{"lhs_batch", V{}}, {"rhs_batch", V{}}, {"lhs_contracting", V{1}}, {"rhs_contracting", V{1}}});
  ValueId sq = b.binary(OpKind::kMul, xx, xx);  // [3,3]
  ValueId sl = b.emit_or_throw(OpKind::kSlice, {x}, {{"start", concrete_shape({0, 1})}, {"limit", concrete_shape({3, 4})},
                                                     {"strides", V{1, 1}}});  // [3,3]
  ValueId padded = b.emit_or_throw(OpKind::kPad, {sl, b.scalar_constant(DType::kFloat64, 0.25)},
                                   {{"low", concrete_shape({1, 0})}, {"high", concrete_shape({-1, 0})}, {"interior", V{0, 0}}});
  ValueId prod = b.binary(OpKind::kMul, padded, sq);
  ValueId mx = b.emit_or_throw(OpKind::kReduceMax, {prod}, {{"dimensions", V{1}}});
  ValueId pr = b.emit_or_throw(OpKind::kReduceProd, {b.unary(OpKind::kTanh, x)}, {{"dimensions", V{0}}});
  ValueId cs = b.emit_or_throw(OpKind::kCumsum, {b.unary(OpKind::kSin, x)}, {{"dimension", int64_t{1}}, {"reverse", int64_t{0}}});
  ValueId total = b.binary(OpKind::kAdd, b.reduce_sum(mx, {0}), b.reduce_sum(pr, {0}));
  total = b.binary(OpKind::kAdd, total, b.reduce_sum(b.binary(OpKind::kMul, cs, cs), {0, 1}));
  Program f = std::move(b).build({total});
  check_second_derivative(f, {rnd({3, 4}, 5, 0.2, 1.2)}, 6);
}

TEST(Autodiff, SecondDerivativesThroughIndexingAndLayoutOps) {
  // Every op here has a rule that emits other rule-bearing ops (dynamic_update_slice, scatter_add, pad,
  // slice, reverse, transpose), so the Hessian exercises the rules of the rules.
  ProgramBuilder b;
  ValueId x = b.add_parameter(f64({4, 3}));
  ValueId i1 = b.constant(Buffer::scalar<int32_t>(1));
  ValueId i0 = b.constant(Buffer::scalar<int32_t>(0));
  ValueId sq = b.binary(OpKind::kMul, x, x);
  ValueId ds = b.emit_or_throw(OpKind::kDynamicSlice, {sq, i1, i0}, {{"sizes", concrete_shape({2, 3})}});
  ValueId dus = b.emit_or_throw(OpKind::kDynamicUpdateSlice, {x, b.unary(OpKind::kSin, ds), i0, i1});
  ValueId rows = b.constant(Buffer::from_vector<int32_t>({3, 0, 3, 1}, {4}));
  ValueId tk = b.emit_or_throw(OpKind::kTake, {b.unary(OpKind::kTanh, dus), rows});  // [4,3]
  ValueId sc = b.emit_or_throw(OpKind::kScatterAdd, {sq, rows, b.binary(OpKind::kMul, tk, x)});
  ValueId tr = b.transpose(b.emit_or_throw(OpKind::kReverse, {sc}, {{"dimensions", V{0}}}), {1, 0});  // [3,4]
  ValueId cat = b.emit_or_throw(OpKind::kConcatenate, {tr, b.transpose(x, {1, 0})}, {{"dimension", int64_t{1}}});
  ValueId bc = b.broadcast_in_dim(b.reduce_sum(x, {1}), concrete_shape({3, 4}), {1});
  ValueId pred = b.binary(OpKind::kGt, x, b.full_like(x, 0.5));
  ValueId sel = b.select(pred, b.unary(OpKind::kExp, x), sq);
  ValueId cl = b.emit_or_throw(OpKind::kClamp, {b.full_like(x, -0.2), b.unary(OpKind::kCos, sel), b.full_like(x, 0.3)});
  ValueId rm = b.binary(OpKind::kRem, b.binary(OpKind::kMul, x, b.full_like(x, 7.0)), b.full_like(x, 1.3));
  ValueId total = b.reduce_sum(b.binary(OpKind::kMul, cat, cat), {0, 1});
  total = b.binary(OpKind::kAdd, total, b.reduce_sum(b.binary(OpKind::kMul, bc, tr), {0, 1}));
  total = b.binary(OpKind::kAdd, total, b.reduce_sum(b.binary(OpKind::kMul, cl, b.binary(OpKind::kMul, rm, x)), {0, 1}));
  Program f = std::move(b).build({total});
  // Inputs away from select's switch at 0.5, clamp's bounds and rem's jumps.
  Buffer xv = Buffer::from_vector<double>({0.11, 0.23, 0.37, 0.71, 0.83, 0.97, 0.13, 0.29, 0.61, 0.77, 0.41, 0.89}, {4, 3});
  check_second_derivative(f, {xv}, 7);
}

TEST(Autodiff, ThirdDerivativeOfScalarFunction) {
  // f(x) = x^4 summed: f''' = 24 x.
  ProgramBuilder b;
  ValueId x = b.add_parameter(f64({}));
  ValueId x2 = b.binary(OpKind::kMul, x, x);
  Program f = std::move(b).build({b.binary(OpKind::kMul, x2, x2)});
  auto d1 = ir::value_and_grad_program(f, {0});
  ASSERT_TRUE(d1.ok());
  // Keep only the gradient as the result so it can go through value_and_grad again.
  Program g1 = *d1;
  g1.results = {d1->results[1]};
  auto d2 = ir::value_and_grad_program(g1, {0});
  ASSERT_TRUE(d2.ok());
  Program g2 = *d2;
  g2.results = {d2->results[1]};
  auto d3 = ir::value_and_grad_program(g2, {0});
  ASSERT_TRUE(d3.ok()) << d3.status();
  auto out = reference_evaluate(*d3, std::vector<Buffer>{Buffer::scalar<double>(1.5)});
  ASSERT_TRUE(out.ok());
  EXPECT_DOUBLE_EQ((*out)[0].to_doubles()[0], 12 * 1.5 * 1.5);  // f''
  EXPECT_DOUBLE_EQ((*out)[1].to_doubles()[0], 24 * 1.5);        // f'''
}

// ---- symbolic shapes ---------------------------------------------------------------------------------

// Substitutes concrete values for dimension variables in parameter types and shape attributes, and
// re-infers every type: the concrete instance of a symbolic program.
Program specialize(const Program& p, const std::map<std::string, int64_t>& env) {
  std::map<std::string, DimExpr> sub;
  for (const auto& [k, v] : env) sub[k] = DimExpr(v);
  auto subst = [&](const Shape& s) {
    Shape out;
    for (const DimExpr& d : s) out.push_back(d.substitute(sub));
    return out;
  };
  ProgramBuilder b(p.name);
  for (const AbstractValue& t : p.params) b.add_parameter(AbstractValue{t.dtype, subst(t.shape)});
  for (const ir::Instr& in : p.instrs) {
    ir::Attrs attrs;
    for (const auto& [name, value] : in.attrs.entries()) {
      if (const Shape* s = std::get_if<Shape>(&value)) attrs.set(name, subst(*s));
      else attrs.set(name, value);
    }
    b.emit_or_throw(in.kind, in.operands, attrs);
  }
  return std::move(b).build(p.results);
}

TEST(Autodiff, SymbolicShapesDifferentiate) {
  auto scope = SymbolicScope::create({});
  ASSERT_TRUE(scope.ok());
  ProgramBuilder b("sym", *scope);
  Shape bx = symbolic_shape("b, 4");
  ValueId x = b.add_parameter(AbstractValue{DType::kFloat64, bx});
  ValueId w = b.add_parameter(f64({4, 3}));
  ValueId bias = b.add_parameter(f64({3}));
  ValueId xw = b.emit_or_throw(OpKind::kDotGeneral, {x, w},
                               {{"lhs_batch", V{}}, {"rhs_batch", V{}}, {"lhs_contracting", V{1}}, {"rhs_contracting", V{0}}});
  ValueId h = b.unary(OpKind::kTanh, b.binary(OpKind::kAdd, xw, b.broadcast_in_dim(bias, symbolic_shape("b, 3"), {1})));
  // Strided slice over the symbolic axis, interior pad, concatenation and a max reduction.
  ValueId every_other = b.emit_or_throw(OpKind::kSlice, {h}, {{"start", concrete_shape({0, 0})},
                                                             {"limit", symbolic_shape("b, 3")},
                                                             {"strides", V{2, 1}}});
  ValueId padded = b.emit_or_throw(OpKind::kPad, {x, b.scalar_constant(DType::kFloat64, 0.0)},
                                   {{"low", concrete_shape({1, 0})}, {"high", concrete_shape({0, -1})}, {"interior", V{1, 0}}});
  ValueId cat = b.emit_or_throw(OpKind::kConcatenate, {h, h}, {{"dimension", int64_t{0}}});
  ValueId mx = b.emit_or_throw(OpKind::kReduceMax, {cat}, {{"dimensions", V{0}}});
  ValueId total = b.binary(OpKind::kAdd, b.reduce_sum(every_other, {0, 1}), b.reduce_sum(mx, {0}));
  total = b.binary(OpKind::kAdd, total, b.reduce_sum(b.binary(OpKind::kMul, padded, padded), {0, 1}));
  Program f = std::move(b).build({total});
  ASSERT_TRUE(ir::verify(f).ok()) << ir::verify(f);

  auto g = ir::value_and_grad_program(f, {0, 1, 2});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(ir::verify(*g).ok()) << ir::verify(*g);
  EXPECT_EQ(g->type(g->results[1]), (AbstractValue{DType::kFloat64, bx}));
  EXPECT_EQ(g->type(g->results[2]), f64({4, 3}));
  EXPECT_EQ(g->type(g->results[3]), f64({3}));
  auto vjp = ir::vjp_program(f, {0});
  ASSERT_TRUE(vjp.ok()) << vjp.status();
  EXPECT_EQ(vjp->type(vjp->results[1]), (AbstractValue{DType::kFloat64, bx}));

  // The symbolic gradient program, instantiated at b = 5 and b = 2, matches finite differences.
  for (int64_t bv : {5, 2}) {
    SCOPED_TRACE(bv);
    Program fc = specialize(f, {{"b", bv}});
    Program gc = specialize(*g, {{"b", bv}});
    expect_grads_match_fd(fc, gc, {rnd({bv, 4}, 1), rnd({4, 3}, 2), rnd({3}, 3)}, {}, {0, 1, 2});
  }
}

// ---- errors ------------------------------------------------------------------------------------------

TEST(Autodiff, IntegerParameterInWrtIsInvalidArgument) {
  ProgramBuilder b("ints");
  ValueId x = b.add_parameter(f64({2}));
  ValueId i = b.add_parameter(AbstractValue{DType::kInt32, concrete_shape({2})});
  Program f = std::move(b).build({b.binary(OpKind::kMul, x, b.convert(i, DType::kFloat64))});
  auto v = ir::vjp_program(f, {0, 1});
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(v.status().message()).find("[vjp_program] parameter 1"), std::string::npos) << v.status();
  EXPECT_NE(std::string(v.status().message()).find("i32[2]"), std::string::npos) << v.status();
  EXPECT_FALSE(ir::vjp_program(f, {2}).ok());
  // The float parameter alone is fine; the integer one simply gets no cotangent.
  EXPECT_TRUE(ir::vjp_program(f, {0}).ok());
}

TEST(Autodiff, ValueAndGradNeedsOneFloatingScalarResult) {
  Program vec = single_op_program(OpKind::kExp, {f64({3})});
  auto r = ir::value_and_grad_program(vec, {0});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(r.status().message()).find("f64[3]"), std::string::npos) << r.status();

  ProgramBuilder b;
  ValueId x = b.add_parameter(f64({}));
  Program two = std::move(b).build({x, x});
  EXPECT_FALSE(ir::value_and_grad_program(two, {0}).ok());

  Program arg = single_op_program(OpKind::kArgMax, {f64({3})}, {{"dimension", int64_t{0}}, {"index_dtype", DType::kInt32}});
  EXPECT_FALSE(ir::value_and_grad_program(arg, {0}).ok());
}

// ---- inline_program ----------------------------------------------------------------------------------

TEST(Autodiff, InlineProgramRoundTrips) {
  Program f = mlp_loss();
  ProgramBuilder b(f.name, f.scope);
  std::vector<ValueId> args;
  for (const AbstractValue& t : f.params) args.push_back(b.add_parameter(t));
  auto results = ir::inline_program(b, f, args);
  ASSERT_TRUE(results.ok()) << results.status();
  Program g = std::move(b).build(*results);
  EXPECT_TRUE(ir::structurally_equal(f, g));
}

TEST(Autodiff, InlineGradientIntoLargerProgram) {
  // step(x, w, b1, w2) = w1 - 0.5 * grad_w1(loss): a training step built by inlining value_and_grad.
  Program f = mlp_loss();
  auto g = ir::value_and_grad_program(f, {1});
  ASSERT_TRUE(g.ok());
  ProgramBuilder b("step");
  std::vector<ValueId> args;
  for (const AbstractValue& t : f.params) args.push_back(b.add_parameter(t));
  auto r = ir::inline_program(b, *g, args);
  ASSERT_TRUE(r.ok()) << r.status();
  ValueId w1 = b.binary(OpKind::kSub, args[1], b.binary(OpKind::kMul, b.full_like(args[1], 0.5), (*r)[1]));
  Program step = std::move(b).build({(*r)[0], w1});
  std::vector<Buffer> in = {rnd({4, 3}, 1), rnd({3, 5}, 2), rnd({5}, 3), rnd({5, 2}, 4)};
  auto out = reference_evaluate(step, in);
  auto gout = reference_evaluate(*g, in);
  ASSERT_TRUE(out.ok() && gout.ok());
  std::vector<double> want = in[1].to_doubles(), grad = (*gout)[1].to_doubles();
  for (size_t k = 0; k < want.size(); ++k) want[k] -= 0.5 * grad[k];
  expect_buffers_near((*out)[1], Buffer::from_vector<double>(want, {3, 5}), 1e-15, 1e-15);
}

TEST(Autodiff, InlineProgramChecksArguments) {
  Program f = single_op_program(OpKind::kExp, {f64({3})});
  ProgramBuilder b;
  ValueId wrong = b.add_parameter(f64({4}));
  auto r = ir::inline_program(b, f, std::vector<ValueId>{wrong});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("[inline_program]"), std::string::npos);
  EXPECT_FALSE(ir::inline_program(b, f, std::vector<ValueId>{}).ok());
}

}  // namespace
}  // namespace mcx::test
