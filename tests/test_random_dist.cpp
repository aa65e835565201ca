// The distributions composed from uniform bits: truncated_normal, gumbel,
// categorical, laplace, permutation. Moments and frequencies against the
// distributions' closed forms, bounds, determinism, shapes and errors.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "test_util.h"

namespace {

using namespace kiln;        // NOLINT
using namespace kiln::test;  // NOLINT
using kiln::array;

constexpr int kN = 1 << 17;

double mean_of(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / v.size(); }
double var_of(const std::vector<double>& v) {
  double m = mean_of(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / v.size();
}
// Five standard errors of a mean of kN samples with variance var.
double tol(double var) { return 5 * std::sqrt(var / kN); }

TEST(RandomDist, TruncatedNormalBoundsAndMoments) {
  // [-1, 2]: the truncated standard normal's mean (phi(a) - phi(b)) / Z.
  const double a = -1, b = 2;
  auto phi = [](double x) { return std::exp(-x * x / 2) / std::sqrt(2 * M_PI); };
  auto cdf = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  double z = cdf(b) - cdf(a), mean = (phi(a) - phi(b)) / z;
  double var = 1 + (a * phi(a) - b * phi(b)) / z - mean * mean;
  for (Dtype dt : {float32, float64}) {
    SCOPED_TRACE(dtype_name(dt));
    array x = random::truncated_normal(array(a), array(b), {kN}, dt, random::key(3));
    ASSERT_EQ(x.dtype(), dt);
    auto v = to_double(x);
    for (double t : v) ASSERT_TRUE(t >= a && t <= b) << t;
    EXPECT_NEAR(mean_of(v), mean, tol(var));
    EXPECT_NEAR(var_of(v), var, 0.02);
  }
  // Per-position bounds broadcast; the second form takes their shape.
  array lo = array({-3.0f, 0.0f, 5.0f}), hi = array({-2.0f, 0.1f, 6.0f});
  array y = random::truncated_normal(lo, hi, float32, random::key(4));
  EXPECT_EQ(y.shape(), (Shape{3}));
  array big = random::truncated_normal(lo, hi, {1000, 3}, float32, random::key(5));
  auto bv = to_double(big);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_TRUE(bv[3 * i] >= -3 && bv[3 * i] <= -2);
    EXPECT_TRUE(bv[3 * i + 1] >= 0 && bv[3 * i + 1] <= 0.1);
    EXPECT_TRUE(bv[3 * i + 2] >= 5 && bv[3 * i + 2] <= 6);
  }
  // Deterministic per key.
  EXPECT_EQ(to_double(random::truncated_normal(lo, hi, float32, random::key(4))), to_double(y));
  EXPECT_THROW(random::truncated_normal(array(0.f), array(1.f), {2}, int32), Error);
  EXPECT_THROW(random::truncated_normal(lo, array(1.f), {4, 2}), Error);
}

TEST(RandomDist, GumbelMoments) {
  for (Dtype dt : {float32, float64, bfloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    auto v = to_double(random::gumbel({kN}, dt, random::key(7)));
    for (double t : v) ASSERT_TRUE(std::isfinite(t));
    double slack = dt == bfloat16 ? 0.02 : 0;
    EXPECT_NEAR(mean_of(v), 0.5772156649, tol(M_PI * M_PI / 6) + slack);
    EXPECT_NEAR(var_of(v), M_PI * M_PI / 6, 0.03 + slack * 10);
  }
  EXPECT_THROW(random::gumbel({3}, int32), Error);
}

TEST(RandomDist, CategoricalFrequencies) {
  // Frequencies match softmax(logits), per row, along either axis.
  std::vector<float> lv = {0.0f, 1.0f, -1.0f, 2.0f, -INFINITY};
  array logits = array(lv, {5});
  std::vector<double> p(5);
  double zs = 0;
  for (int i = 0; i < 5; ++i) zs += std::exp(static_cast<double>(lv[i]));
  for (int i = 0; i < 5; ++i) p[i] = std::exp(static_cast<double>(lv[i])) / zs;
  array s = random::categorical(logits, 0, Shape{kN}, random::key(9));
  EXPECT_EQ(s.dtype(), uint32);
  std::vector<double> count(5, 0);
  for (double t : to_double(s)) count.at(static_cast<size_t>(t)) += 1;
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(count[i] / kN, p[i], tol(p[i] * (1 - p[i])) + 1e-9) << i;
  EXPECT_EQ(count[4], 0);  // -inf never drawn

  // 2-d logits along axis 0 with num_samples: shape [3, n].
  array l2 = transpose(stack({array({0.0f, 3.0f, 0.0f}), array({3.0f, 0.0f, 0.0f})}));  // [3, 2]
  array t = random::categorical(l2, 0, 4000, random::key(10));
  EXPECT_EQ(t.shape(), (Shape{2, 4000}));
  auto tv = to_double(t);
  double ones = 0, zeros = 0;
  for (int j = 0; j < 4000; ++j) {
    ones += tv[j] == 1;          // column 0 favours category 1
    zeros += tv[4000 + j] == 0;  // column 1 favours category 0
  }
  double pf = std::exp(3.0) / (std::exp(3.0) + 2);
  EXPECT_NEAR(ones / 4000, pf, 0.03);
  EXPECT_NEAR(zeros / 4000, pf, 0.03);
  // Default: one sample per row; shapes are checked.
  EXPECT_EQ(random::categorical(l2, -1, random::key(1)).shape(), (Shape{3}));
  EXPECT_EQ(random::categorical(l2, 1, Shape{6, 3}, random::key(1)).shape(), (Shape{6, 3}));
  EXPECT_THROW(random::categorical(l2, 1, Shape{6, 2}, random::key(1)), Error);
  EXPECT_THROW(random::categorical(l2, 2, std::optional<array>(random::key(1))), Error);
  EXPECT_THROW(random::categorical(zeros_like(l2), 0, -1, random::key(1)), Error);
}

TEST(RandomDist, LaplaceMoments) {
  for (Dtype dt : {float32, float64}) {
    SCOPED_TRACE(dtype_name(dt));
    auto v = to_double(random::laplace({kN}, dt, 1.5f, 2.0f, random::key(12)));
    for (double t : v) ASSERT_TRUE(std::isfinite(t));
    EXPECT_NEAR(mean_of(v), 1.5, tol(8.0));
    EXPECT_NEAR(var_of(v), 8.0, 0.25);  // 2 scale^2
    // Median = loc, and the mean absolute deviation = scale.
    std::vector<double> w = v;
    std::nth_element(w.begin(), w.begin() + kN / 2, w.end());
    EXPECT_NEAR(w[kN / 2], 1.5, 0.03);
    double mad = 0;
    for (double t : v) mad += std::fabs(t - 1.5);
    EXPECT_NEAR(mad / kN, 2.0, 0.03);
  }
  EXPECT_EQ(random::laplace({3, 2}).shape(), (Shape{3, 2}));
  EXPECT_THROW(random::laplace({3}, int32), Error);
}

TEST(RandomDist, Permutation) {
  array p = random::permutation(1000, random::key(21));
  EXPECT_EQ(p.dtype(), uint32);
  auto v = to_double(p);
  std::vector<double> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_NE(v, sorted);  // not the identity
  EXPECT_EQ(to_double(random::permutation(1000, random::key(21))), v);
  EXPECT_NE(to_double(random::permutation(1000, random::key(22))), v);
  // Along an axis: each row keeps its values, columns move together.
  array x = reshape(arange(20.0f), {4, 5});
  array y = random::permutation(x, 1, random::key(23));
  auto yv = to_double(y);
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 5; ++c) EXPECT_EQ(yv[r * 5 + c] - yv[c], 5.0 * r);
  }
  EXPECT_EQ(random::permutation(0, random::key(1)).size(), 0u);
  EXPECT_THROW(random::permutation(-1), Error);
  EXPECT_THROW(random::permutation(x, 2), Error);
}

}  // namespace
