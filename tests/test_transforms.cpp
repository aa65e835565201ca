// The transformations end to end: vjp/jvp/grad against closed forms and
// finite differences, vmap against a loop, and their compositions (grad of
// grad, vmap of grad, compile of grad), custom_vjp, checkpoint,
// stop_gradient, multi-output nodes and graphs evaluated inside a
// transformed function. Per-primitive rules are checked op by op in the op
// harness (test_op_harness.cpp).
#include <cmath>

#include "core/array_desc.h"
#include "core/ops_util.h"
#include "core/primitives.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::random_array;
using test::to_double;

void expect_close(const array& a, const array& b, double tol = 1e-9) {
  ASSERT_EQ(a.shape(), b.shape());
  auto x = to_double(a), y = to_double(b);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(x[i], y[i], tol * (1 + std::abs(y[i]))) << "at " << i;
  }
}

TEST(Transforms, GradOfPolynomialAndChainRule) {
  // f(x) = sum(sin(x) * x^2) -> f'(x) = cos(x) x^2 + 2 x sin(x)
  array x = random_array({3, 5}, float64);
  auto f = [](const array& v) { return sum(sin(v) * square(v)); };
  array g = grad(f)(x);
  expect_close(g, cos(x) * square(x) + 2.0 * x * sin(x));
}

TEST(Transforms, ValueAndGradSeveralArguments) {
  array a = random_array({4, 3}, float64), b = random_array({3, 2}, float64);
  auto f = [](const std::vector<array>& in) { return sum(matmul(in[0], in[1])); };
  auto [v, g] = value_and_grad(f, std::vector<int>{0, 1})({a, b});
  expect_close(v, sum(matmul(a, b)));
  expect_close(g[0], matmul(ones({4, 2}, float64), transpose(b)));
  expect_close(g[1], matmul(transpose(a), ones({4, 2}, float64)));
}

TEST(Transforms, BroadcastedInputsSumTheirCotangent) {
  array a = random_array({4, 1}, float64), b = random_array({3}, float64);
  auto gs = grad([](const std::vector<array>& in) { return sum(in[0] * in[1]); }, std::vector<int>{0, 1})({a, b});
  expect_close(gs[0], broadcast_to(sum(b, true), {4, 1}));
  expect_close(gs[1], broadcast_to(sum(a), {3}));
}

TEST(Transforms, VjpAndJvpAgreeWithFiniteDifferences) {
  array x = random_array({6}, float64, 0.5, 2.0);
  auto f = [](const std::vector<array>& in) {
    return std::vector<array>{softmax(log(in[0]) * in[0] + sqrt(in[0])), sum(tanh(in[0]))};
  };
  array v = random_array({6}, float64);
  auto [outs, tans] = jvp(f, {x}, {v});
  const double h = 1e-6;
  auto fp = f({x + h * v});
  auto fm = f({x - h * v});
  for (int k = 0; k < 2; ++k) expect_close(tans[k], (fp[k] - fm[k]) / (2 * h), 1e-6);
  // <u, J v> == <J^T u, v>
  array u0 = random_array({6}, float64), u1 = random_array({}, float64);
  auto [o2, cots] = vjp(f, {x}, {u0, u1});
  double lhs = sum(u0 * tans[0]).item<double>() + (u1 * tans[1]).item<double>();
  double rhs = sum(cots[0] * v).item<double>();
  EXPECT_NEAR(lhs, rhs, 1e-9 * (1 + std::abs(lhs)));
}

TEST(Transforms, GradOfGrad) {
  array x = random_array({5}, float64);
  auto f = [](const array& v) { return sum(exp(v) * v); };  // f'' = e^x (x + 2)
  auto dfi = [f](const array& v) { return sum(grad(f)(v)); };
  expect_close(grad(dfi)(x), exp(x) * (x + 2.0));
}

TEST(Transforms, VmapMatchesLoop) {
  array xs = random_array({4, 3, 5}, float32);
  array w = random_array({5, 2}, float32);
  auto f = [w](const array& x) { return softmax(matmul(x, w) + 1.0f, -1); };
  // Map over axis 1 of xs, put the batch at axis 2 of the result.
  array got = vmap(f, 1, 2)(xs);
  ASSERT_EQ(got.shape(), (Shape{4, 2, 3}));
  for (int i = 0; i < 3; ++i) {
    array xi = squeeze(slice(xs, {0, i, 0}, {4, i + 1, 5}), 1);
    array gi = squeeze(slice(got, {0, 0, i}, {4, 2, i + 1}), 2);
    expect_close(gi, f(xi), 1e-5);
  }
}

TEST(Transforms, VmapOfGradAndGradOfVmap) {
  array xs = random_array({3, 4}, float64);
  auto f = [](const array& x) { return sum(sin(x) * x); };
  array per_row = vmap(grad(f))(xs);
  expect_close(per_row, cos(xs) * xs + sin(xs));
  auto total = [f](const array& x) { return sum(vmap(f)(x)); };
  expect_close(grad(total)(xs), cos(xs) * xs + sin(xs));
}

TEST(Transforms, VmapInAxesNoneAndTwoInputs) {
  array a = random_array({3, 4}, float32), b = random_array({4}, float32);
  auto f = [](const array& x, const array& y) { return sum(x * y); };
  array got = vmap(f, 0, -1)(a, b);
  expect_close(got, sum(a * b, 1), 1e-5);
  EXPECT_THROW(vmap(f, -1, -1)(a, b), Error);
  EXPECT_THROW(vmap(f, 0, 0)(a, random_array({5, 4}, float32)), Error);
}

TEST(Transforms, CompileOfGradMatchesGrad) {
  array x = random_array({7}, float32);
  auto g = grad([](const array& v) { return sum(square(v) * 3.0f + v); });
  auto cg = compile([g](const std::vector<array>& in) { return std::vector<array>{g(in[0])}; });
  expect_close(cg({x})[0], g(x), 1e-6);
  // grad of a compiled function sees the plain ops.
  auto cf = compile([](const std::vector<array>& in) { return std::vector<array>{sum(exp(in[0]))}; });
  array gx = grad([cf](const array& v) { return cf({v})[0]; })(x);
  expect_close(gx, exp(x), 1e-6);
}

TEST(Transforms, StopGradientAndCustomVjp) {
  array x = random_array({4}, float64);
  expect_close(grad([](const array& v) { return sum(stop_gradient(v) * v); })(x), x);
  auto clipped = custom_vjp(
      [](const std::vector<array>& in) { return std::vector<array>{exp(in[0])}; },
      [](const std::vector<array>&, const std::vector<array>& cot, const std::vector<array>&) {
        return std::vector<array>{cot[0] * 2.0};
      });
  array g = grad([clipped](const array& v) { return sum(clipped({v})[0]); })(x);
  expect_close(g, full({4}, 2.0, float64));
  // Forward value is fun's.
  expect_close(clipped({x})[0], exp(x));
}

TEST(Transforms, CheckpointGivesTheSameGradient) {
  array x = random_array({5}, float64);
  auto body = [](const std::vector<array>& in) { return std::vector<array>{tanh(in[0]) * exp(in[0])}; };
  auto ck = checkpoint(body);
  auto g1 = grad([body](const array& v) { return sum(body({v})[0]); })(x);
  auto g2 = grad([ck](const array& v) { return sum(ck({v})[0]); })(x);
  expect_close(g2, g1);
}

TEST(Transforms, EvalInsideTheFunctionKeepsTheGraph) {
  array x = random_array({3}, float64);
  auto f = [](const array& v) {
    array y = exp(v);
    eval(y);                     // evaluated while being traced
    double s = sum(y).item<double>();  // data-dependent Python-style control
    return s > -1 ? sum(y * v) : sum(v);
  };
  expect_close(grad(f)(x), exp(x) * (x + 1.0));
}

TEST(Transforms, GatherAndScatterGradients) {
  array a = random_array({5, 3}, float64);
  array idx = array({4, 0, 4, 2}, int32);
  // take along axis 0 with a repeated index: the cotangent adds up.
  array g = grad([idx](const array& v) { return sum(take(v, idx, 0) * 2.0); })(a);
  std::vector<double> want = {2, 2, 2, 0, 0, 0, 2, 2, 2, 0, 0, 0, 4, 4, 4};
  expect_close(g, array(want, {5, 3}));
  array ti = array({1, 0, 2, 2}, {4, 1}, int32);
  array ga = grad([ti](const array& v) { return sum(take_along_axis(v, broadcast_to(ti, {4, 3}), 1)); })(
      slice(a, {0, 0}, {4, 3}));
  std::vector<double> want2 = {0, 3, 0, 3, 0, 0, 0, 0, 3, 0, 0, 3};
  expect_close(ga, array(want2, {4, 3}));
}

TEST(Transforms, ScatterOps) {
  array a = zeros({3, 4}, float32);
  array idx = array({0, 2, 0}, {1, 3}, int32);
  array v = array({1.f, 2.f, 3.f}, {1, 3});
  array s = scatter_add_axis(a, broadcast_to(idx, {3, 3}), broadcast_to(v, {3, 3}), 1);
  std::vector<double> row = {4, 0, 2, 0};
  for (int r = 0; r < 3; ++r) {
    auto got = to_double(slice(s, {r, 0}, {r + 1, 4}));
    for (int c = 0; c < 4; ++c) EXPECT_EQ(got[c], row[c]);
  }
  array p = put_along_axis(a, array({3}, {1, 1}, int32), array(7.f), 1);
  auto got = to_double(p);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(got[r * 4 + 3], 7.0);
  EXPECT_THROW(put_along_axis(a, array({5}, {1, 1}, int32), array(1.f), 1).eval(), Error);
  EXPECT_THROW(put_along_axis(a, array({1.f}, {1, 1}), array(1.f), 1), Error);
}

// A two-output primitive built for the test: (a + b, a - b).
class SumDiff : public Primitive {
 public:
  using Primitive::Primitive;
  const char* name() const override { return "SumDiff"; }
  static int runs;
  // float64, row-major inputs only (what the test feeds it).
  void eval_cpu(const std::vector<array>& in, std::vector<array>& out) override {
    ++runs;
    for (auto& o : out) detail::allocate(o, "SumDiff");
    const double* a = reinterpret_cast<const double*>(detail::data_ptr(in[0]));
    const double* b = reinterpret_cast<const double*>(detail::data_ptr(in[1]));
    double* s = reinterpret_cast<double*>(detail::data_ptr(out[0]));
    double* d = reinterpret_cast<double*>(detail::data_ptr(out[1]));
    for (size_t i = 0; i < out[0].size(); ++i) {
      s[i] = a[i] + b[i];
      d[i] = a[i] - b[i];
    }
  }
  void eval_gpu(const std::vector<array>& in, std::vector<array>& out) override { eval_cpu(in, out); }
  std::vector<array> vjp(const std::vector<array>&, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    std::vector<array> r;
    for (int a : argnums) r.push_back(a == 0 ? cot[0] + cot[1] : cot[0] - cot[1]);
    return r;
  }
};
int SumDiff::runs = 0;

TEST(Transforms, MultiOutputNodesEvaluateOnceAndDifferentiate) {
  array a = random_array({3}, float64), b = random_array({3}, float64);
  auto make = [](const array& x, const array& y) {
    return array::make_arrays({x.shape(), x.shape()}, {x.dtype(), x.dtype()},
                              std::make_shared<SumDiff>(to_stream({})), {contiguous(x), contiguous(y)});
  };
  SumDiff::runs = 0;
  auto outs = make(a, b);
  ASSERT_EQ(outs[0].siblings().size(), 1u);
  eval(outs[1]);
  EXPECT_EQ(SumDiff::runs, 1);
  EXPECT_TRUE(outs[0].is_evaluated());
  expect_close(outs[0], a + b);
  expect_close(outs[1], a - b);
  // Only one output used: the other is scratch, the node still runs once.
  {
    auto o = make(a, b);
    array only = o[1];
    o.clear();
    eval(only);
    expect_close(only, a - b);
  }
  auto g = grad([&make](const std::vector<array>& in) {
    auto o = make(in[0], in[1]);
    return sum(o[0] * 3.0 + o[1]);
  }, std::vector<int>{0, 1})({a, b});
  expect_close(g[0], full({3}, 4.0, float64));
  expect_close(g[1], full({3}, 2.0, float64));
}

TEST(Transforms, ErrorsNameTheTransform) {
  array x = random_array({3}, float32);
  EXPECT_THROW(grad([](const array& v) { return v * 2.0f; })(x), Error);  // not a scalar
  EXPECT_THROW(vjp([](const array& v) { return v; }, x, zeros({4})), Error);
  EXPECT_THROW(jvp([](const array& v) { return v; }, x, zeros({4})), Error);
  EXPECT_THROW(grad(std::function<array(const array&)>())(x), Error);
  EXPECT_THROW(value_and_grad([](const std::vector<array>& in) { return sum(in[0]); }, std::vector<int>{3})({x}),
               Error);
  // A primitive without a jvp rule says so, by name.
  try {
    jvp([](const array& v) { return array::make_arrays({v.shape(), v.shape()}, {v.dtype(), v.dtype()}, std::make_shared<SumDiff>(to_stream({})), {v, v})[0]; }, x, x);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SumDiff"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
