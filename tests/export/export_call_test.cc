// export_fn and Exported::call: shape polymorphism end to end, the per-shape cache, calls from inside
// jit/grad/another export, the exported VJP, and the call-time errors.
#include <cmath>
#include <random>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/mcx.h"
#include "mcx/ir/passes.h"
#include "mcx/trace/export.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing_util::error_of;
using testing_util::expect_allclose;
using testing_util::random_array;
using testing_util::expect_same_values;

Tree mlp_params(uint64_t seed) {
  return Tree{{"w1", Tree(random_array({6, 5}, seed))}, {"b1", Tree(random_array({5}, seed + 1))},
              {"w2", Tree(random_array({5, 3}, seed + 2))}};
}

Array mlp(const Tree& p, const Array& x) {
  Array h = relu(matmul(x, p.at("w1")) + p.at("b1"));
  return tanh(matmul(h, p.at("w2")));
}

AbstractValue f32(std::string_view shape) { return {DType::kFloat32, symbolic_shape(shape)}; }

Exported export_mlp(ExportOptions options = {}) {
  options.name = "mlp";
  options.creation_time_unix_ms = 1;
  return export_fn(mlp, options)(mlp_params(1), f32("b, 6"));
}

TEST(Export, SignatureHasNamesSymbolicShapesAndVersions) {
  Exported e = export_mlp();
  const auto& a = e.artifact();
  EXPECT_EQ(a.fun_name, "mlp");
  EXPECT_EQ(a.in_names, (std::vector<std::string>{"args[0]['b1']", "args[0]['w1']", "args[0]['w2']", "args[1]"}));
  EXPECT_EQ(a.in_avals[3].to_string(), "f32[b,6]");
  EXPECT_EQ(a.out_avals.at(0).to_string(), "f32[b,3]");
  EXPECT_EQ(a.in_tree.to_string(), "tuple(dict{b1: *, w1: *, w2: *}, *)");
  EXPECT_EQ(a.out_tree.to_string(), "*");
  EXPECT_EQ(a.dim_vars(), std::vector<std::string>{"b"});
  EXPECT_EQ(a.opset_version, 1u);  // the lowest opset that reads the program: no SPMD ops here
  EXPECT_EQ(a.platforms, std::vector<std::string>{"cpu"});
  EXPECT_EQ(a.creation_time_unix_ms, 1);
  EXPECT_TRUE(e.has_vjp());
}

TEST(Export, OneArtifactServesManyBatchSizesAndMatchesEager) {
  Exported e = Exported::deserialize(export_mlp().serialize());
  Tree p = mlp_params(1);
  for (int64_t b : {1, 3, 17}) {
    Array x = random_array({b, 6}, 100 + b);
    std::vector<Array> out = e.call(p, x);
    ASSERT_EQ(out.size(), 1u);
    expect_same_values(out[0], mlp(p, x), 1e-5, 1e-6, "b = " + std::to_string(b));
    // Independent oracle: the naive reference evaluator on the specialised program.
    ir::Program spec = value_or_throw(ir::specialize(e.artifact().program, {{"b", b}}));
    std::vector<Buffer> args = {p.at("b1").array().to_host(), p.at("w1").array().to_host(),
                                p.at("w2").array().to_host(), x.to_host()};
    auto ref = value_or_throw(test::reference_evaluate(spec, args));
    expect_allclose(out[0], ref[0].to_doubles(), 1e-5, 1e-6);
  }
  EXPECT_EQ(e.cache_stats().size, 3);
}

TEST(Export, CacheIsPerConcreteShape) {
  Exported e = export_mlp();
  Tree p = mlp_params(1);
  e.call(p, random_array({4, 6}, 1));
  e.call(p, random_array({4, 6}, 2));
  e.call(p, random_array({5, 6}, 3));
  ExportedCacheStats s = e.cache_stats();
  EXPECT_EQ(s.size, 2);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.hits, 1);
  Tree t = e.call_tree(p, random_array({2, 6}, 4));
  EXPECT_TRUE(t.is_leaf());
  EXPECT_EQ(t.array().dims(), (std::vector<int64_t>{2, 3}));
}

TEST(Export, CalledInsideJitIsInlined) {
  Exported e = export_mlp();
  Tree p = mlp_params(1);
  auto f = jit([&](const Tree& params, const Array& x) { return e.call(params, x)[0] * 2.0f; });
  Array x = random_array({3, 6}, 5);
  expect_allclose(f(p, x), (mlp(p, x) * 2.0f).to_host().to_doubles(), 1e-5, 1e-6);
  ir::Program lowered = f.lower(p, x);
  for (const ir::Instr& in : lowered.instrs) {
    if (in.kind == ir::OpKind::kConstant) {
      EXPECT_LE(value_or_throw(in.attrs.get_buffer("value")).num_elements(), 1) << "weights must stay inputs";
    }
  }
}

TEST(Export, GradThroughExportedCall) {
  Exported e = export_mlp();
  Tree p = mlp_params(1);
  Array x = random_array({3, 6}, 6);
  auto via_export = grad([&](const Array& xx) { return sum(e.call(p, xx)[0]); })(x);
  auto direct = grad([&](const Array& xx) { return sum(mlp(p, xx)); })(x);
  expect_same_values(via_export, direct, 1e-5, 1e-6);
}

TEST(Export, ExportOfAFunctionCallingAnExportedOneSolvesSymbolically) {
  Exported inner = export_mlp();
  Tree p = mlp_params(1);
  auto outer_fn = [&](const Array& x) { return inner.call(p, concatenate({x, x}, 0))[0]; };
  Exported outer = export_fn(outer_fn, {.name = "outer"})(f32("n, 6"));
  EXPECT_EQ(outer.artifact().out_avals[0].to_string(), "f32[2*n,3]");
  Array x = random_array({2, 6}, 7);
  expect_same_values(outer.call(x)[0], mlp(p, concatenate({x, x}, 0)), 1e-5, 1e-6);
}

TEST(Export, SymbolicCallerDecidesShapeRulesUnderItsOwnConstraints) {
  // The inner program slices two rows: its shape rule needs b >= 2, which the caller's scope must give.
  auto first_two = [](const Array& x) { return slice(x, symbolic_shape("0, 0"), symbolic_shape("2, 6")); };
  Exported inner = export_fn(first_two, {.name = "first_two", .constraints = {"b >= 2"}})(f32("b, 6"));
  auto outer_fn = [&](const Array& x) { return inner.call(x)[0] * 2.0f; };
  Exported outer = export_fn(outer_fn, {.name = "outer", .constraints = {"n >= 3"}})(f32("n, 6"));
  Array x = random_array({3, 6}, 13);
  expect_same_values(outer.call(x)[0], first_two(x) * 2.0f);
  EXPECT_THAT(error_of([&] { export_fn(outer_fn, {.name = "outer"})(f32("n, 6")); }),
              AllOf(HasSubstr("[Exported.call] instantiating the exported program for symbolic shapes failed"),
                    HasSubstr("inconclusive")));
}

TEST(Export, VjpMatchesGrad) {
  Exported e = Exported::deserialize(export_mlp().serialize());
  ASSERT_TRUE(e.has_vjp());
  Exported v = e.vjp();
  EXPECT_EQ(e.artifact().vjp_wrt, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(v.artifact().in_names.back(), "cotangent");
  EXPECT_EQ(v.artifact().in_avals.back().to_string(), "f32[b,3]");
  Tree p = mlp_params(1);
  Array x = random_array({4, 6}, 8);
  Array ct = random_array({4, 3}, 9);
  std::vector<Array> g = v.call_flat({p.at("b1"), p.at("w1"), p.at("w2"), x, ct});
  ASSERT_EQ(g.size(), 4u);
  auto loss = [&](const Tree& params, const Array& xx) { return sum(mlp(params, xx) * ct); };
  Tree gp = grad(loss)(p, x);
  Array gx = grad([&](const Array& xx) { return loss(p, xx); })(x);
  expect_same_values(g[0], gp.at("b1"), 1e-5, 1e-6, "b1");
  expect_same_values(g[1], gp.at("w1"), 1e-5, 1e-6, "w1");
  expect_same_values(g[2], gp.at("w2"), 1e-5, 1e-6, "w2");
  expect_same_values(g[3], gx, 1e-5, 1e-6, "x");
  e.vjp().call_flat({p.at("b1"), p.at("w1"), p.at("w2"), x, ct});
  EXPECT_EQ(e.vjp().cache_stats().hits, 1) << "vjp() handles share one cache";
}

TEST(Export, ConcurrentCallsFromFourThreads) {
  Exported e = export_mlp();
  Tree p = mlp_params(1);
  std::vector<std::vector<Array>> results(4);
  std::vector<Array> inputs;
  for (int t = 0; t < 4; ++t) inputs.push_back(random_array({1 + t % 2, 6}, 400 + t));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) results[t] = e.call(p, inputs[t]);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) expect_same_values(results[t][0], mlp(p, inputs[t]), 1e-5, 1e-6);
  EXPECT_EQ(e.cache_stats().size, 2);
  EXPECT_EQ(e.cache_stats().hits + e.cache_stats().misses, 80);
}

TEST(Export, StaticArgumentsAreBakedInAndIntegerInputsGetNoCotangent) {
  auto f = [](const Array& x, const Array& idx, double scale) { return take(x, idx) * scale; };
  Exported e = export_fn(f, {.name = "gather"})(f32("n, 4"), AbstractValue{DType::kInt32, symbolic_shape("k")}, 3.0);
  EXPECT_EQ(e.artifact().in_tree.to_string(), "tuple(*, *)");
  EXPECT_EQ(e.artifact().vjp_wrt, std::vector<int>{0});
  Array x = random_array({5, 4}, 10);
  Array idx = array({4, 0, 2});
  expect_same_values(e.call(x, idx)[0], take(x, idx) * 3.0);
  EXPECT_EQ(e.vjp().artifact().out_avals.size(), 1u);
}

TEST(Export, ConstraintsTravelWithTheArtifact) {
  // The shape rules need no constraint here; the constraints are checked when called.
  auto f = [](const Array& x, const Array& y) { return sum(x) + sum(y); };
  Exported e = export_fn(f, {.name = "pair", .constraints = {"b >= 2", "b == 2*c"}})(f32("b, 3"), f32("c, 6"));
  Exported back = Exported::deserialize(e.serialize());
  EXPECT_EQ(back.artifact().constraints, (std::vector<std::string>{"b >= 2", "b == 2*c"}));
  Array y = random_array({2, 6}, 11);
  Array x = random_array({4, 3}, 12);
  expect_same_values(back.call(x, y)[0], sum(x) + sum(y));
  std::string err = error_of([&] { back.call(random_array({2, 3}, 1), random_array({2, 6}, 2)); });
  EXPECT_THAT(err, AllOf(HasSubstr("[Exported.call] 'pair'"), HasSubstr("dimension 0 of args[0]")));
}

// What the digits example does with --export: the prediction function with the trained weights captured
// (they become constants), a symbolic batch, written to a file; the file classifies any number of images.
TEST(Export, PredictWithCapturedWeightsClassifiesAnyBatch) {
  Tree p = mlp_params(3);
  auto predict = [p](const Array& x) { return argmax(mlp(p, x), 1); };
  std::string bytes = export_fn(predict, {.name = "predict"})(f32("b, 6")).serialize();
  Exported e = Exported::deserialize(bytes);
  EXPECT_EQ(e.artifact().in_avals.size(), 1u);
  EXPECT_EQ(e.artifact().out_avals[0].to_string(), "i32[b]");
  // argmax is piecewise constant: its exported VJP gives zero cotangents for the images.
  ASSERT_TRUE(e.has_vjp());
  Array x3 = random_array({3, 6}, 300);
  std::vector<Array> g = e.vjp().call_flat({x3, array({1, 2, 3})});
  expect_allclose(g.at(0), std::vector<double>(18, 0.0));
  for (int64_t b : {1, 2, 50}) {
    Array x = random_array({b, 6}, 200 + b);
    EXPECT_EQ(e.call(x)[0].to_vector<int32_t>(), predict(x).to_vector<int32_t>()) << "b = " << b;
  }
}

TEST(ExportErrors, DtypeRankStructureAndConstraint) {
  Exported e = export_mlp({.constraints = {"b >= 2"}});
  Tree p = mlp_params(1);
  EXPECT_THAT(error_of([&] { e.call(p, astype(random_array({3, 6}, 1), DType::kFloat64)); }),
              AllOf(HasSubstr("[Exported.call] 'mlp': argument args[1] must have dtype float32"), HasSubstr("f64[3,6]")));
  EXPECT_THAT(error_of([&] { e.call(p, random_array({18}, 1)); }), HasSubstr("argument args[1] must have rank 2"));
  EXPECT_THAT(error_of([&] { e.call(p, random_array({3, 7}, 1)); }),
              HasSubstr("dimension 1 of args[1] (specification '6', found 7)"));
  EXPECT_THAT(error_of([&] { e.call(random_array({3, 6}, 1), random_array({3, 6}, 1)); }),
              AllOf(HasSubstr("the arguments have structure tuple(*, *)"), HasSubstr("exported for tuple(dict{")));
  EXPECT_THAT(error_of([&] { e.call(p, random_array({1, 6}, 1)); }),
              HasSubstr("Input shapes do not match the symbolic shape constraint 'b >= 2': found 1 >= 2 false"));
}

TEST(ExportErrors, PlatformAndDeviceCount) {
  Tree p = mlp_params(1);
  Array x = random_array({2, 6}, 1);
  Exported tpu = export_mlp({.platforms = {"tpu"}});
  EXPECT_THAT(error_of([&] { tpu.call(p, x); }),
              HasSubstr("Function 'mlp' was exported for platforms 'tpu' but it is used on 'cpu'."));
  Exported any = export_mlp({.platforms = {"tpu"}, .disabled_safety_checks = {"platform"}});
  expect_same_values(any.call(p, x)[0], mlp(p, x));
  Exported eight = export_mlp({.nr_devices = 8});
  EXPECT_THAT(error_of([&] { eight.call(p, x); }),
              HasSubstr("Function 'mlp' was exported for 8 devices and is called in a context with 4 devices"));
  EXPECT_THAT(error_of([&] { export_mlp({.disabled_safety_checks = {"custom_call"}}); }),
              HasSubstr("unknown safety check 'custom_call'"));
  Exported no_vjp = export_mlp({.with_vjp = false});
  EXPECT_THAT(error_of([&] { no_vjp.vjp(); }), HasSubstr("[Exported.vjp] 'mlp' was exported without a VJP"));
}

// An artifact exported with shardings for N devices runs on a mesh of N devices with the recorded shardings
// (it used to be refused with "needs the sharding runtime").
TEST(ExportSharded, RunsWithTheRecordedShardingsOnNDevices) {
  const exporting::ShardingSpec rows{false, {"data"}, {4}, {{"data"}}};
  ExportOptions o;
  o.in_shardings = {exporting::ShardingSpec{}, exporting::ShardingSpec{}, exporting::ShardingSpec{}, rows};
  o.out_shardings = {rows};
  o.nr_devices = 4;
  const Exported e = Exported::deserialize(export_mlp(o).serialize());
  const Tree p = mlp_params(1);
  for (int64_t b : {4, 12}) {
    const Array x = random_array({b, 6}, 200 + b);
    const Array out = e.call(p, x).at(0);
    EXPECT_EQ(out.sharding(), NamedSharding(make_mesh({4}, {"data"}), P("data")));
    ASSERT_EQ(out.addressable_shards().size(), 4u);
    EXPECT_EQ(out.addressable_shards()[1].index.to_string(), "[" + std::to_string(b / 4) + ":" + std::to_string(b / 2) + ", 0:3]");
    expect_same_values(out, mlp(p, x), 1e-5, 1e-6, "b = " + std::to_string(b));
  }
  // Arguments committed to a mesh with the recorded axes choose the devices.
  const Mesh last = make_mesh({4}, {"data"}, {devices()[3], devices()[2], devices()[1], devices()[0]});
  const Array x = device_put(random_array({8, 6}, 300), NamedSharding(last, P("data")));
  const Array out = e.call(p, x).at(0);
  EXPECT_EQ(out.sharding(), NamedSharding(last, P("data")));
  expect_same_values(out, mlp(p, x), 1e-5, 1e-6, "reversed devices");
  // A batch the recorded sharding does not divide is the placement's clear error.
  EXPECT_THAT(error_of([&] { e.call(p, random_array({6, 6}, 1)); }),
              AllOf(HasSubstr("size 6"), HasSubstr("divisible by 4")));
  // Unspecified shardings on a 2-device artifact: replicated over the first two devices.
  const Exported two = export_mlp({.nr_devices = 2});
  const Array y = two.call(p, random_array({3, 6}, 2)).at(0);
  EXPECT_EQ(y.sharding().num_devices(), 2);
  EXPECT_TRUE(y.is_fully_replicated());
  expect_same_values(y, mlp(p, random_array({3, 6}, 2)), 1e-5, 1e-6, "two devices");
}

// export_fn of a jitted function records what the jit was given (as jax.export of a jax.jit): the
// shardings per flat input and output, the device count, the donation and the name; Exported::call runs with
// them and donates. Before, the jit inlined into the export's trace and the artifact said 1 device, unspecified.
TEST(ExportSharded, AJittedFunctionsShardingsDonationAndNameReachTheArtifact) {
  const Mesh mesh = make_mesh({4}, {"data"});
  const Sharding rows = NamedSharding(mesh, P("data", None)), replicated = NamedSharding(mesh, P());
  const auto step = jit(mlp, {.name = "mlp_step", .in_shardings = {replicated, rows}, .out_shardings = {rows},
                              .donate_argnums = {1}});
  const Exported e = Exported::deserialize(export_fn(step, {.creation_time_unix_ms = 1})(mlp_params(1), f32("b, 6")).serialize());
  const exporting::Artifact& a = e.artifact();
  EXPECT_EQ(a.fun_name, "mlp_step");
  EXPECT_EQ(a.nr_devices, 4u);
  ASSERT_EQ(a.in_shardings.size(), 4u);  // b1, w1, w2 (dict order), then x
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.in_shardings[i], to_sharding_spec(replicated)) << i;
  EXPECT_EQ(a.in_shardings[3], to_sharding_spec(rows));
  EXPECT_EQ(a.in_shardings[3].to_string(), "{data: 4} P('data', None)");
  ASSERT_EQ(a.out_shardings.size(), 1u);
  EXPECT_EQ(a.out_shardings[0], to_sharding_spec(rows));
  EXPECT_EQ(a.donated_inputs, std::vector<int>{3});
  EXPECT_THAT(exporting::describe(a), HasSubstr("donated inputs: 3"));
  // The call runs on the recorded layout and donates x, as the jitted function does.
  const Tree p = mlp_params(1);
  const Array x = random_array({8, 6}, 7);
  const Array expected = mlp(p, x);
  const Array x_copy = device_put(x, rows);
  const Array out = e.call(p, x_copy).at(0);
  EXPECT_EQ(out.sharding(), rows);
  expect_same_values(out, expected, 1e-5, 1e-6, "exported jit");
  EXPECT_THAT(error_of([&] { (void)x_copy.to_host(); }), HasSubstr("delete"));
  // A layout is written once: shardings given both to the jit and to the export are refused.
  ExportOptions twice;
  twice.in_shardings.assign(4, to_sharding_spec(rows));
  EXPECT_THAT(error_of([&] { export_fn(step, twice)(mlp_params(1), f32("b, 6")); }),
              HasSubstr("shardings given twice"));
  // to_sharding_spec: a single device has nothing to record.
  EXPECT_TRUE(to_sharding_spec(SingleDeviceSharding(devices()[0])).unspecified);
}

// JAX's serialize(vjp_order=N): an artifact with its VJP's VJP, through serialisation, against closed forms of
// f(x) = x sin(x): the VJP gives ct (x cos x + sin x); the second-order one, with cotangent ct2 for that,
// gives (ct2 ct (2 cos x - x sin x), ct2 (x cos x + sin x)).
TEST(ExportVjpOrder, SecondOrderVjpMatchesTheClosedForm) {
  auto f = [](const Array& x) { return x * sin(x); };
  const Exported e = Exported::deserialize(export_fn(f, {.name = "xsinx", .vjp_order = 2})(f32("n")).serialize());
  ASSERT_TRUE(e.has_vjp());
  const Exported first = e.vjp();
  ASSERT_TRUE(first.has_vjp());
  const Exported second = first.vjp();
  EXPECT_FALSE(second.has_vjp());
  const std::vector<float> xs = {-1.5f, 0.25f, 2.0f}, cts = {0.5f, -2.0f, 1.25f}, ct2s = {3.0f, 0.75f, -1.0f};
  const Array x = array(xs), ct = array(cts), ct2 = array(ct2s);
  const std::vector<float> g = first.call(x, ct).at(0).to_vector<float>();
  const std::vector<Array> h = second.call(x, ct, std::make_tuple(ct2));  // its cotangent: a tuple, as the VJP's outputs
  ASSERT_EQ(h.size(), 2u);
  const std::vector<float> dx = h[0].to_vector<float>(), dct = h[1].to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double xv = xs[i], c = cts[i], c2 = ct2s[i];
    EXPECT_NEAR(g[i], c * (xv * std::cos(xv) + std::sin(xv)), 1e-5) << i;
    EXPECT_NEAR(dx[i], c2 * c * (2 * std::cos(xv) - xv * std::sin(xv)), 1e-5) << i;
    EXPECT_NEAR(dct[i], c2 * (xv * std::cos(xv) + std::sin(xv)), 1e-5) << i;
  }
  EXPECT_FALSE(export_mlp().vjp().has_vjp()) << "order 1 (the default) stores the VJP only";
  EXPECT_THAT(error_of([&] { export_fn(f, {.name = "deep", .vjp_order = 5})(f32("n")); }),
              HasSubstr("vjp_order 5 is above the 4 nested VJPs a reader accepts"));
}

// JAX's Exported.ordered_effects / unordered_effects: a function that prints records "debug_print" as an
// ordered effect, through serialisation; one that does not records none (and its bytes do not carry the field);
// an artifact whose recorded effects disagree with its program is refused.
TEST(ExportEffects, DebugPrintIsAnOrderedEffect) {
  auto printing = [](const Array& x) {
    debug_print("x = {}", x);
    return x * 2.0f;
  };
  const Exported e = Exported::deserialize(export_fn(printing, {.name = "printing"})(f32("n")).serialize());
  EXPECT_EQ(e.ordered_effects(), std::vector<std::string>{"debug_print"});
  EXPECT_TRUE(e.unordered_effects().empty());
  EXPECT_THAT(exporting::describe(e.artifact()), HasSubstr("effects: ordered debug_print"));
  ASSERT_TRUE(e.has_vjp());
  EXPECT_TRUE(e.vjp().ordered_effects().empty()) << "the VJP does not print";
  const Exported plain = export_mlp();
  EXPECT_TRUE(plain.ordered_effects().empty());
  exporting::Artifact forged = e.artifact();
  forged.ordered_effects.clear();
  EXPECT_THAT(exporting::validate(forged).message(), HasSubstr("ordered effects [] differ from the program's [debug_print]"));
  forged = plain.artifact();
  forged.unordered_effects = {"io"};
  EXPECT_THAT(exporting::validate(forged).message(), HasSubstr("unknown unordered effects [io]"));
}

// JAX's jax_export_calling_convention_version and older readers: the calling convention written is requested
// within the supported range, and an opset ceiling keeps the artifact readable by older readers or names the op
// that prevents it.
TEST(ExportVersions, RequestedCallingConventionAndOpsetCeiling) {
  const Exported e = export_mlp({.calling_convention_version = exporting::kCallingConventionVersion,
                                 .max_opset_version = 1});
  EXPECT_EQ(e.artifact().calling_convention_version, exporting::kCallingConventionVersion);
  EXPECT_EQ(e.artifact().opset_version, 1u);  // the MLP and its VJP use opset-1 ops only
  EXPECT_THAT(error_of([] { export_mlp({.calling_convention_version = exporting::kCallingConventionVersion + 1}); }),
              AllOf(HasSubstr("calling convention version"), HasSubstr("outside the supported range [")));
  EXPECT_THAT(error_of([] { export_mlp({.max_opset_version = 0}); }), HasSubstr("outside the supported range [1, "));
  auto special = [](const Array& x) { return erf(x); };  // erf came with opset 4
  EXPECT_THAT(error_of([&] { export_fn(special, {.name = "erf", .max_opset_version = 3})(f32("n")); }),
              AllOf(HasSubstr("readers of opset 3 cannot run it"), HasSubstr("erf (opset 4)")));
  EXPECT_EQ(export_fn(special, {.name = "erf", .max_opset_version = 4})(f32("n")).artifact().opset_version, 4u);
}

// ExportOptions takes mcx::Sharding directly (its device count becomes nr_devices), and the recorded shardings
// come back over any mesh of the recorded layout (JAX's in_shardings_jax / out_shardings_jax), axis names taken
// positionally; a mesh of another size or layout is refused naming both.
TEST(ExportSharded, ShardingsFromMcxShardingsAndBackOverAMesh) {
  const Mesh mesh = make_mesh({4}, {"data"});
  const Sharding rows = NamedSharding(mesh, P("data", None)), replicated = NamedSharding(mesh, P());
  ExportOptions options{.name = "mlp_rows"};
  options.in_shardings = {replicated, replicated, replicated, rows};
  options.out_shardings = {rows};
  const Exported e = Exported::deserialize(export_fn(mlp, options)(mlp_params(1), f32("b, 6")).serialize());
  EXPECT_EQ(e.artifact().nr_devices, 4u);
  EXPECT_EQ(e.artifact().in_shardings[3].to_string(), "{data: 4} P('data', None)");

  const Mesh other = make_mesh({4}, {"batch"});  // the same layout under another axis name
  const std::vector<std::optional<Sharding>> in = e.in_shardings_jax(other);
  ASSERT_EQ(in.size(), 4u);
  ASSERT_TRUE(in[3].has_value());
  EXPECT_EQ(*in[3], NamedSharding(other, P("batch", None)));
  EXPECT_EQ(*in[0], NamedSharding(other, P()));
  const std::vector<std::optional<Sharding>> out = e.out_shardings_jax(other);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(*out[0], NamedSharding(other, P("batch", None)));
  // The call accepts arguments placed by those shardings.
  const Tree p = mlp_params(1);
  const Array x = random_array({8, 6}, 3);
  const Array y = e.call(p, device_put(x, *in[3])).at(0);
  expect_same_values(y, mlp(p, x), 1e-5, 1e-6, "placed by in_shardings_jax");
  EXPECT_THAT(error_of([&] { (void)e.in_shardings_jax(make_mesh({2}, {"data"})); }),
              AllOf(HasSubstr("exported for 4 devices"), HasSubstr("has 2")));
  EXPECT_THAT(error_of([&] { (void)e.in_shardings_jax(make_mesh({2, 2}, {"a", "b"})); }),
              HasSubstr("other axis sizes"));
  // Unspecified shardings stay unspecified.
  const Exported plain = export_mlp();
  for (const auto& s : plain.in_shardings_jax(make_mesh({1}, {"x"}))) EXPECT_FALSE(s.has_value());
}

// JAX documents that an artifact exported for one device may be called with sharded arguments: the call then
// runs partitioned over their mesh and gives the same values.
TEST(ExportSharded, AOneDeviceArtifactCalledWithShardedArguments) {
  const Exported e = Exported::deserialize(export_mlp().serialize());
  ASSERT_EQ(e.artifact().nr_devices, 1u);
  const Mesh mesh = make_mesh({4}, {"data"});
  const Tree p = mlp_params(1);
  const Array x = random_array({8, 6}, 5);
  const Array y = e.call(p, device_put(x, NamedSharding(mesh, P("data", None)))).at(0);
  expect_same_values(y, mlp(p, x), 1e-5, 1e-6, "1-device artifact, sharded argument");
  EXPECT_EQ(y.sharding().num_devices(), 4);
}

// A function that calls shard_map exports with its mesh recorded (inputs replicated on it, nr_devices its
// size): the deserialised artifact runs on a mesh of that shape and its VJP is the global gradient.
TEST(ExportSharded, AShardMapRecordsItsMeshAndDifferentiates) {
  const Mesh mesh = make_mesh({4}, {"data"});
  auto body = shard_map([](const Array& w, const Array& x) { return psum(sum(tanh(matmul(x, w))), "data"); }, mesh,
                        {P(), P("data")}, {P()});
  auto f = [&](const Array& w, const Array& x) { return body(w, x); };
  const Exported e = Exported::deserialize(
      export_fn(f, {.name = "sharded_loss"})(AbstractValue{DType::kFloat32, concrete_shape({6, 3})},
                                             AbstractValue{DType::kFloat32, concrete_shape({8, 6})})
          .serialize());
  EXPECT_EQ(e.artifact().nr_devices, 4u);
  EXPECT_EQ(e.artifact().in_shardings[1].to_string(), "{data: 4} P()");
  EXPECT_EQ(e.artifact().opset_version, 9u);
  const Array w = random_array({6, 3}, 40), x = random_array({8, 6}, 41);
  auto plain = [](const Array& a, const Array& b) { return sum(tanh(matmul(b, a))); };
  expect_same_values(e.call(w, x).at(0), plain(w, x), 1e-5, 1e-5);
  ASSERT_TRUE(e.has_vjp());
  const std::vector<Array> g = e.vjp().call_flat({w, x, Array(1.0f)});
  auto [gw, gx] = grad(plain, argnums<0, 1>)(w, x);
  expect_same_values(g.at(0), gw, 1e-5, 1e-6, "w");
  expect_same_values(g.at(1), gx, 1e-5, 1e-6, "x");
}

TEST(ExportErrors, ShardingsMustMatchTheDeviceCount) {
  exporting::ShardingSpec s{false, {"data"}, {4}, {{"data"}}};
  ExportOptions o;
  o.in_shardings = {exporting::ShardingSpec{}, exporting::ShardingSpec{}, exporting::ShardingSpec{}, s};
  o.nr_devices = 2;
  EXPECT_THAT(error_of([&] { export_mlp(o); }), HasSubstr("spans 4 devices, but nr_devices is 2"));
  o.nr_devices = 4;
  Exported e = export_mlp(o);
  EXPECT_EQ(Exported::deserialize(e.serialize()).artifact().in_shardings[3].to_string(), "{data: 4} P('data')");
  o.in_shardings.pop_back();
  EXPECT_THAT(error_of([&] { export_mlp(o); }), HasSubstr("3 input shardings for 4 inputs"));
}

TEST(ExportErrors, FlatCallsWithWrongCountOrEmptyArrays) {
  Exported e = export_mlp();
  Tree p = mlp_params(1);
  // The pytree call counts the arguments first, as call_flat counts leaves.
  EXPECT_THAT(error_of([&] { e.call(p); }), HasSubstr("[Exported.call] 'mlp': expected 2 arguments, found 1"));
  EXPECT_THAT(error_of([&] { e.call_flat({p.at("b1"), p.at("w1"), p.at("w2")}); }),
              HasSubstr("[Exported.call] 'mlp': expected 4 arguments, found 3"));
  EXPECT_THAT(error_of([&] { e.call_flat({p.at("b1"), p.at("w1"), p.at("w2"), Array()}); }),
              HasSubstr("an argument is an empty Array"));
  // An inconsistent artifact cannot be wrapped.
  exporting::Artifact bad = e.artifact();
  bad.in_names.clear();
  EXPECT_THAT(error_of([&] { Exported{bad}; }), HasSubstr("[export] 'mlp': 0 input names for 4 inputs"));
}

TEST(ExportErrors, DeserializeThrowsCleanly) {
  EXPECT_THAT(error_of([&] { Exported::deserialize("garbage"); }), HasSubstr("[deserialize] not an mcx export artifact"));
}

}  // namespace
}  // namespace mcx
