// Derivatives of the issue 9 ops: the vjp (grad) and jvp of every new
// unary and binary op kind against central finite differences in float64,
// and of the composite ops through the rules of the ops they are built
// from.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "kiln/transforms.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using Fn = std::function<array(const array&)>;

// grad of sum(f) and the jvp of f along a random direction, against
// central differences of f in float64.
void expect_derivatives(const Fn& f, const array& x, const std::string& what) {
  const double h = 1e-6;
  std::vector<double> xv = to_double(x);
  auto f_at = [&](const std::vector<double>& v) { return to_double(f(array(v, x.shape(), float64))); };
  auto total = [](const std::vector<double>& v) {
    double s = 0;
    for (double e : v) s += e;
    return s;
  };
  std::vector<double> g = to_double(grad([&](const array& v) { return sum(f(v)); })(x));
  ASSERT_EQ(g.size(), xv.size()) << what;
  for (size_t i = 0; i < xv.size(); ++i) {
    std::vector<double> p = xv, m = xv;
    p[i] += h;
    m[i] -= h;
    double fd = (total(f_at(p)) - total(f_at(m))) / (2 * h);
    EXPECT_NEAR(g[i], fd, 1e-5 * (1 + std::fabs(fd))) << what << " grad at " << i;
  }
  array t = random_array(x.shape(), float64);
  std::vector<double> tv = to_double(t), p = xv, m = xv;
  for (size_t i = 0; i < xv.size(); ++i) {
    p[i] += h * tv[i];
    m[i] -= h * tv[i];
  }
  std::vector<double> fp = f_at(p), fm = f_at(m);
  std::vector<double> jt = to_double(jvp(f, x, t).second);
  ASSERT_EQ(jt.size(), fp.size()) << what;
  for (size_t i = 0; i < jt.size(); ++i) {
    double fd = (fp[i] - fm[i]) / (2 * h);
    EXPECT_NEAR(jt[i], fd, 1e-5 * (1 + std::fabs(fd))) << what << " jvp at " << i;
  }
}

TEST(OpsGrad, NewUnaryAndBinaryKinds) {
  struct Case {
    const char* name;
    Fn f;
    double lo, hi;
  };
  const Case cases[] = {
      {"tan", [](const array& x) { return tan(x); }, -1.2, 1.2},
      {"arcsin", [](const array& x) { return arcsin(x); }, -0.9, 0.9},
      {"arccos", [](const array& x) { return arccos(x); }, -0.9, 0.9},
      {"arctan", [](const array& x) { return arctan(x); }, -3, 3},
      {"sinh", [](const array& x) { return sinh(x); }, -2, 2},
      {"cosh", [](const array& x) { return cosh(x); }, -2, 2},
      {"arcsinh", [](const array& x) { return arcsinh(x); }, -3, 3},
      {"arccosh", [](const array& x) { return arccosh(x); }, 1.2, 4},
      {"arctanh", [](const array& x) { return arctanh(x); }, -0.9, 0.9},
      {"log2", [](const array& x) { return log2(x); }, 0.2, 5},
      {"log10", [](const array& x) { return log10(x); }, 0.2, 5},
      {"degrees", [](const array& x) { return degrees(x); }, -3, 3},
      {"radians", [](const array& x) { return radians(x); }, -300, 300},
      {"arctan2 a", [](const array& x) { return arctan2(x, array({0.7, -1.3, 2.0})); }, -2, 2},
      {"arctan2 b", [](const array& x) { return arctan2(array({0.7, -1.3, 2.0}), x); }, -2, 2},
      {"logaddexp", [](const array& x) { return logaddexp(x, array({0.5, -1.0, 3.0})); }, -3, 3},
  };
  for (const auto& c : cases) expect_derivatives(c.f, random_array({2, 3}, float64, c.lo, c.hi), c.name);
  // Step functions and bitwise ops have zero derivatives.
  array x = random_array({4}, float64, 1, 5);
  EXPECT_TRUE(all_close(grad([](const array& v) { return sum(floor_divide(v, array(2.0))); })(x), {0, 0, 0, 0}, 0.0));
}

TEST(OpsGrad, CompositeOps) {
  array m = random_array({3, 4}, float64);
  expect_derivatives([](const array& v) { return tril(v, 1); }, m, "tril");
  expect_derivatives([](const array& v) { return diagonal(v, 1); }, m, "diagonal");
  expect_derivatives([](const array& v) { return trace(v); }, m, "trace");
  expect_derivatives([](const array& v) { return diag(reshape(v, {-1})); }, random_array({3}, float64), "diag");
  expect_derivatives([](const array& v) { return roll(v, 2, 1); }, m, "roll");
  expect_derivatives([](const array& v) { return square(kron(v, array({1.0, -2.0}))); }, m, "kron");
  array b = random_array({4, 2}, float64);
  expect_derivatives([&](const array& v) { return tensordot(v, b, 1); }, m, "tensordot");
  expect_derivatives([&](const array& v) { return addmm(array({1.0, 2.0}), v, b, 0.5f, 2.0f); }, m, "addmm");
  expect_derivatives([](const array& v) { return round(v, 1) + v; }, m, "round");
}

}  // namespace
}  // namespace kiln::test
