// cumsum, cumprod, cummax, cummin, logcumsumexp: against loops in double
// on random data, every axis, reverse and exclusive, sizes 0 to 100000,
// non-contiguous and broadcast inputs, every dtype; precision of long
// float32 sums; NaN; errors; gradients (through zeros for cumprod, ties
// for cummax) against finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "test_layouts.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::to_double;
const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

using Fold = std::function<double(double, double)>;

std::vector<double> scan_ref(const std::vector<double>& x, const Shape& s, int axis, bool reverse, bool inclusive,
                             double ident, const Fold& f) {
  int64_t outer = 1, inner = 1, n = s[axis];
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  std::vector<double> out(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double acc = ident;
      for (int64_t k = 0; k < n; ++k) {
        int64_t j = (o * n + (reverse ? n - 1 - k : k)) * inner + i;
        if (inclusive) {
          acc = f(acc, x[j]);
          out[j] = acc;
        } else {
          out[j] = acc;
          acc = f(acc, x[j]);
        }
      }
    }
  return out;
}

double add(double a, double b) { return a + b; }
double mul(double a, double b) { return a * b; }
double mx(double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b); }
double mn(double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b); }
double lae(double a, double b) {
  double hi = std::max(a, b), lo = std::min(a, b);
  return std::isinf(hi) ? hi : hi + std::log1p(std::exp(lo - hi));
}

struct Kind {
  const char* name;
  std::function<array(const array&, int, bool, bool)> op;
  double ident;
  Fold f;
};
const Kind kKinds[] = {
    {"cumsum", [](const array& a, int ax, bool r, bool i) { return cumsum(a, ax, r, i); }, 0.0, add},
    {"cumprod", [](const array& a, int ax, bool r, bool i) { return cumprod(a, ax, r, i); }, 1.0, mul},
    {"cummax", [](const array& a, int ax, bool r, bool i) { return cummax(a, ax, r, i); }, -kInf, mx},
    {"cummin", [](const array& a, int ax, bool r, bool i) { return cummin(a, ax, r, i); }, kInf, mn},
    {"logcumsumexp", [](const array& a, int ax, bool r, bool i) { return logcumsumexp(a, ax, r, i); }, -kInf, lae},
};

void check(const Kind& k, const array& a, int axis, bool reverse, bool inclusive, double rtol) {
  int ax = axis < 0 ? axis + a.ndim() : axis;
  array out = k.op(a, axis, reverse, inclusive);
  auto want = scan_ref(to_double(a), a.shape(), ax, reverse, inclusive, k.ident, k.f);
  // Exclusive integer extremes start from the dtype's limits, not
  // infinities: checked in IntegerIdentitiesAndWrap.
  if (!is_floating_point(a.dtype()) && !inclusive && std::isinf(k.ident)) return;
  EXPECT_TRUE(test::all_close(out, want, rtol, rtol)) << k.name << " " << dtype_name(a.dtype()) << " axis " << axis
                                                     << (reverse ? " reverse" : "") << (inclusive ? "" : " exclusive");
}

TEST(Scan, EveryOpAxisAndDirection) {
  array a = test::random_array({3, 4, 5}, float64);
  array pos = test::random_array({3, 4, 5}, float64, 0.5, 1.5);
  for (const auto& k : kKinds) {
    array x = std::string(k.name) == "cumprod" ? pos : a;
    for (int axis : {0, 1, 2, -1, -3})
      for (bool reverse : {false, true})
        for (bool inclusive : {true, false}) check(k, x, axis, reverse, inclusive, 1e-12);
  }
}

TEST(Scan, Dtypes) {
  for (Dtype t : {float16, bfloat16, float32}) {
    for (const auto& k : kKinds) {
      array x = test::random_array({4, 9}, t, 0.5, 1.5);
      check(k, x, 1, false, true, test::tolerance(t) * 2);
      check(k, x, 0, true, false, test::tolerance(t) * 2);
    }
  }
  for (Dtype t : {uint8, uint16, uint32, uint64, int8, int16, int32, int64}) {
    array x = test::random_array({4, 6}, t, 0, 3);  // products stay below 2^6
    for (int i = 0; i < 4; ++i) check(kKinds[i], x, 1, i % 2 == 1, true, 0.0);
    EXPECT_EQ(cumsum(x).dtype(), t);  // kept, as MLX
  }
  array b = test::random_array({4, 9}, bool_);
  EXPECT_EQ(cumsum(b, 1).dtype(), int32);
  EXPECT_TRUE(test::all_close(cumsum(b, 1), scan_ref(to_double(b), {4, 9}, 1, false, true, 0.0, add), 0.0));
  EXPECT_EQ(cumprod(b, 1).dtype(), bool_);
  EXPECT_TRUE(test::all_close(cumprod(b, 1), scan_ref(to_double(b), {4, 9}, 1, false, true, 1.0, mul), 0.0));
  EXPECT_TRUE(test::all_close(cummax(b, 1), scan_ref(to_double(b), {4, 9}, 1, false, true, 0.0, mx), 0.0));
  EXPECT_TRUE(test::all_close(cummin(b, 1), scan_ref(to_double(b), {4, 9}, 1, false, true, 1.0, mn), 0.0));
  // The dtype argument casts first.
  EXPECT_EQ(cumsum(b, 1, false, true, float32).dtype(), float32);
  EXPECT_EQ(cumprod(test::random_array({3}, int32), false, true, float64).dtype(), float64);
}

TEST(Scan, IntegerIdentitiesAndWrap) {
  array x = array({5, -3, 7}, {3}, int32);
  EXPECT_EQ(to_double(cummax(x, 0, false, false)), (std::vector<double>{INT32_MIN, 5, 5}));
  EXPECT_EQ(to_double(cummin(x, 0, true, false)), (std::vector<double>{-3, 7, INT32_MAX}));
  EXPECT_EQ(to_double(cumsum(x, 0, false, false)), (std::vector<double>{0, 5, 2}));
  EXPECT_EQ(to_double(cumprod(x, 0, true, false)), (std::vector<double>{-21, 7, 1}));
  // int8 sums wrap (MLX keeps the dtype).
  array w = array({100, 100}, {2}, int8);
  EXPECT_EQ(to_double(cumsum(w)), (std::vector<double>{100, -56}));
}

TEST(Scan, SizesLayoutsAndFlattened) {
  for (int n : {0, 1, 7, 1025, 100000}) {
    array x = test::random_array({2, n}, float64);
    // The reference's plain running sum drifts by ~n eps itself.
    check(kKinds[0], x, 1, false, true, 1e-10);
    check(kKinds[2], x, 1, true, false, 0.0);
    check(kKinds[4], x, 1, false, true, 1e-12);
  }
  for (auto layout : test::kLayouts) {
    array x = test::make_input({6, 9}, layout, [](const Shape& s) { return test::random_array(s, float32); });
    for (const auto& k : {kKinds[0], kKinds[3], kKinds[4]}) {
      check(k, x, 0, false, true, 1e-5);
      check(k, x, 1, true, false, 1e-5);
    }
  }
  array x = test::random_array({3, 4, 5});
  EXPECT_EQ(cumsum(x).shape(), Shape{60});
  EXPECT_TRUE(test::all_close(cumsum(x, true, false), scan_ref(to_double(x), {60}, 0, true, false, 0.0, add), 1e-5, 1e-5));
  EXPECT_TRUE(test::all_close(cummax(x), scan_ref(to_double(x), {60}, 0, false, true, -kInf, mx), 0.0));
  EXPECT_TRUE(test::all_close(logcumsumexp(x, true), scan_ref(to_double(x), {60}, 0, true, true, -kInf, lae), 1e-5));
}

TEST(Scan, LongFloat32SumsStayAccurate) {
  // A plain float32 running sum of 10^5 values near 1 drifts by ~n * eps
  // relative; the compensated one stays within a few ulps.
  array x = test::random_array({1, 100000}, float32, 0.0, 2.0);
  auto got = to_double(cumsum(x, 1));
  auto want = scan_ref(to_double(x), {1, 100000}, 1, false, true, 0.0, add);
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]) / want[i]);
  EXPECT_LT(worst, 1.2e-7) << "worst relative error " << worst;
  // Down an axis too (the vectorized path).
  array y = test::random_array({20000, 3}, float32, 0.0, 2.0);
  EXPECT_TRUE(test::all_close(cumsum(y, 0), scan_ref(to_double(y), {20000, 3}, 0, false, true, 0.0, add), 1.2e-7));
}

TEST(Scan, NaNAndInfinities) {
  array x = array({1.0, kNaN, 3.0, -kInf, kInf}, {5}, float64);
  auto m = to_double(cummax(x));
  EXPECT_EQ(m[0], 1.0);
  EXPECT_TRUE(std::isnan(m[1]) && std::isnan(m[4]));
  array y = array({-kInf, -kInf, 0.0, kInf}, {4}, float32);
  auto l = to_double(logcumsumexp(y));
  EXPECT_EQ(l[0], -kInf);
  EXPECT_EQ(l[1], -kInf);
  EXPECT_NEAR(l[2], 0.0, 1e-7);
  EXPECT_EQ(l[3], kInf);
  EXPECT_EQ(to_double(logcumsumexp(y, false, false))[0], -kInf);
  // Large values do not overflow.
  array big = array({1000.0f, 1000.0f}, {2});
  EXPECT_NEAR(to_double(logcumsumexp(big))[1], 1000.0 + std::log(2.0), 1e-3);
}

TEST(Scan, Errors) {
  array a = test::random_array({3, 4});
  EXPECT_TRUE(test::throws_error([&] { cumsum(a, 2); }, {"[cumsum]", "axis 2", "(3,4) float32"}));
  EXPECT_TRUE(test::throws_error([&] { cumprod(a, -3); }, {"[cumprod]", "axis -3"}));
  EXPECT_TRUE(test::throws_error([&] { cummax(a, 5); }, {"[cummax]"}));
  EXPECT_TRUE(test::throws_error([&] { cummin(a, -5); }, {"[cummin]"}));
  EXPECT_TRUE(test::throws_error([&] { logcumsumexp(astype(a, int32), 0); }, {"[logcumsumexp]", "int32"}));
}

// <u, d f / dx v> by central differences in float64.
double directional(const std::function<array(const array&)>& f, const array& x, const array& v, const array& u) {
  double h = 1e-6;
  auto p = to_double(f(x + v * h)), m = to_double(f(x - v * h)), uu = to_double(u);
  double s = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (std::isfinite(p[i]) && std::isfinite(m[i])) s += uu[i] * (p[i] - m[i]) / (2 * h);  // -inf: empty exclusive
  }
  return s;
}

void check_grad(const std::function<array(const array&)>& f, const array& x, const char* what) {
  array v = test::random_array(x.shape(), float64);
  array u = test::random_array(x.shape(), float64);
  double fd = directional(f, x, v, u);
  auto [out, g] = vjp(f, x, u);
  double via_vjp = to_double(sum(g * v)).front();
  auto [out2, t] = jvp(f, x, v);
  double via_jvp = to_double(sum(t * u)).front();
  double tol = 1e-6 * (1 + std::fabs(fd));
  EXPECT_NEAR(via_vjp, fd, tol) << what << " vjp";
  EXPECT_NEAR(via_jvp, fd, tol) << what << " jvp";
}

TEST(Scan, Gradients) {
  array x = test::random_array({3, 6}, float64);
  for (const auto& k : kKinds) {
    for (int axis : {0, 1})
      for (bool reverse : {false, true})
        for (bool inclusive : {true, false}) {
          check_grad([&](const array& v) { return k.op(v, axis, reverse, inclusive); }, x,
                     (std::string(k.name) + " axis " + std::to_string(axis) + (reverse ? " reverse" : "") +
                      (inclusive ? "" : " exclusive")).c_str());
        }
  }
  // cumprod through zeros: the first zero's gradient is the product of the
  // others, later ones get none from it (checked where the function is
  // smooth in the direction: only nonzero entries move).
  array z = array({1.5, 0.0, 2.0, 0.0, -1.0, 0.7}, {6}, float64);
  auto [out, g] = vjp([](const array& v) { return cumprod(v); }, z, ones_like(z));
  auto gv = to_double(g);
  // d/dz1 of sum_i cumprod_i = z0 + z0*z2 + z0*z2*z3 + ... (z3 = 0) = 1.5 + 3.0.
  EXPECT_NEAR(gv[1], 4.5, 1e-12);
  EXPECT_NEAR(gv[3], 0.0, 1e-12);  // a second zero: the product stays zero
  EXPECT_NEAR(gv[0], 1.0, 1e-12);  // only cumprod_0 depends on z0 without a zero
  auto [o2, t] = jvp([](const array& v) { return cumprod(v); }, z, ones_like(z));
  // The jvp agrees with the vjp's transpose: <1, J 1> = <J^T 1, 1>.
  EXPECT_NEAR(to_double(sum(t)).front(), to_double(sum(g)).front(), 1e-12);
  // cummax with ties: the gradient goes to the latest tied element.
  array tie = array({1.0, 3.0, 3.0, 2.0}, {4}, float64);
  auto [o3, gm] = vjp([](const array& v) { return cummax(v); }, tie, ones_like(tie));
  EXPECT_EQ(to_double(gm), (std::vector<double>{1, 1, 2, 0}));
}

TEST(Scan, VmapMatchesALoop) {
  array x = test::random_array({3, 5, 6});
  for (int in_axis : {0, 1, 2}) {
    auto f = vmap([](const array& v) { return cumsum(v, 0, true, false); }, in_axis);
    auto g = vmap([](const array& v) { return cummax(v, -1); }, in_axis);
    array y = f(x), z = g(x);
    for (int b = 0; b < x.shape(in_axis); ++b) {
      Shape start(3, 0), stop = x.shape();
      start[in_axis] = b;
      stop[in_axis] = b + 1;
      array xb = squeeze(slice(x, start, stop), in_axis);
      EXPECT_TRUE(test::all_close(take(y, array(b), 0), to_double(cumsum(xb, 0, true, false)), 1e-6));
      EXPECT_EQ(to_double(take(z, array(b), 0)), to_double(cummax(xb, -1)));
    }
  }
}

}  // namespace
}  // namespace kiln
