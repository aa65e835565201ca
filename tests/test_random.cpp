// Counter-based random numbers: keys, split, bits, uniform, normal, randint,
// bernoulli. Determinism, statistics, dtypes, broadcasting and independence
// from the CPU thread count.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "test_util.h"

namespace {

using namespace kiln;        // NOLINT
using namespace kiln::test;  // NOLINT
using kiln::array;

constexpr int kN = 1 << 17;  // samples for statistics

array key_row(const array& keys, int i) { return reshape(slice(keys, {i, 0}, {i + 1, 2}), {2}); }

struct Stats {
  double mean, var, min, max;
};
Stats stats(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m += x;
  m /= v.size();
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return {m, s / v.size(), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

bool same(const array& a, const array& b) {
  auto av = to_double(a), bv = to_double(b);
  return av.size() == bv.size() && std::equal(av.begin(), av.end(), bv.begin());
}

// Fraction of positions where the two arrays differ.
double diff_fraction(const array& a, const array& b) {
  auto av = to_double(a), bv = to_double(b);
  size_t d = 0;
  for (size_t i = 0; i < av.size(); ++i) d += av[i] != bv[i];
  return static_cast<double>(d) / av.size();
}

TEST(RandomTest, Key) {
  array k = random::key(42);
  EXPECT_EQ(k.shape(), Shape{2});
  EXPECT_EQ(k.dtype(), uint32);
  EXPECT_TRUE(same(k, random::key(42)));
  EXPECT_FALSE(same(k, random::key(43)));
  EXPECT_FALSE(same(random::key(0), random::key(1)));
  // Seeds that differ only in the high 32 bits give different keys.
  EXPECT_FALSE(same(random::key(1), random::key((uint64_t{1} << 32) | 1)));
}

TEST(RandomTest, Split) {
  array k = random::key(7);
  array two = random::split(k);
  EXPECT_EQ(two.shape(), (Shape{2, 2}));
  EXPECT_EQ(two.dtype(), uint32);
  array keys = random::split(k, 5);
  EXPECT_EQ(keys.shape(), (Shape{5, 2}));
  EXPECT_TRUE(same(keys, random::split(k, 5)));  // deterministic
  std::set<std::pair<double, double>> seen;
  auto kv = to_double(k);
  seen.insert({kv[0], kv[1]});
  auto v = to_double(keys);
  for (int i = 0; i < 5; ++i) seen.insert({v[2 * i], v[2 * i + 1]});
  EXPECT_EQ(seen.size(), 6u) << "split keys must be distinct from each other and the parent";
  EXPECT_FALSE(same(random::split(random::key(8), 5), keys));
  // Keys from split give different streams.
  array a = random::uniform(Shape{1000}, float32, key_row(keys, 0));
  array b = random::uniform(Shape{1000}, float32, key_row(keys, 1));
  EXPECT_GT(diff_fraction(a, b), 0.99);
  // Splitting a split key works too.
  array sub = random::split(key_row(keys, 2), 3);
  EXPECT_EQ(sub.shape(), (Shape{3, 2}));
  EXPECT_FALSE(same(key_row(sub, 0), key_row(keys, 2)));
}

TEST(RandomTest, Bits) {
  array k = random::key(1);
  array b = random::bits({kN}, k);
  EXPECT_EQ(b.dtype(), uint32);
  EXPECT_EQ(b.shape(), Shape{kN});
  EXPECT_TRUE(same(b, random::bits({kN}, k)));
  EXPECT_GT(diff_fraction(b, random::bits({kN}, random::key(2))), 0.99);
  b.eval();
  const uint32_t* p = b.data<uint32_t>();
  // Every bit position is set about half the time.
  const double se = 0.5 / std::sqrt(static_cast<double>(kN));
  for (int bit = 0; bit < 32; ++bit) {
    int64_t ones = 0;
    for (int i = 0; i < kN; ++i) ones += (p[i] >> bit) & 1u;
    EXPECT_NEAR(static_cast<double>(ones) / kN, 0.5, 5 * se) << "bit " << bit;
  }
  // Few repeats among 2^17 32-bit values (expected ~2).
  std::vector<uint32_t> sorted(p, p + kN);
  std::sort(sorted.begin(), sorted.end());
  EXPECT_GT(std::unique(sorted.begin(), sorted.end()) - sorted.begin(), kN - 20);
  // Odd and multi-dimensional shapes.
  array m = random::bits({3, 5, 7}, k);
  EXPECT_EQ(m.shape(), (Shape{3, 5, 7}));
  EXPECT_TRUE(same(m, random::bits({3, 5, 7}, k)));
  auto mv = to_double(m);
  EXPECT_GT(std::set<double>(mv.begin(), mv.end()).size(), 100u);
}

TEST(RandomTest, UniformStatisticsAndRange) {
  for (Dtype dt : {float32, float16, bfloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    array u = random::uniform(Shape{kN}, dt, random::key(3));
    EXPECT_EQ(u.dtype(), dt);
    EXPECT_EQ(u.shape(), Shape{kN});
    Stats s = stats(to_double(u));
    EXPECT_GE(s.min, 0.0);
    EXPECT_LT(s.max, 1.0);
    double se = std::sqrt(1.0 / 12.0 / kN);
    double quant = dt == bfloat16 ? 4e-3 : 0.0;  // rounding to 8 bits
    EXPECT_NEAR(s.mean, 0.5, 5 * se + quant);
    EXPECT_NEAR(s.var, 1.0 / 12.0, 5 * std::sqrt(1.0 / 180.0 / kN) + quant);
    EXPECT_LT(s.min, 1e-3);
    EXPECT_GT(s.max, 0.99);
  }
  // [low, high) with arrays for low and high, in every dtype.
  for (Dtype dt : {float32, float16, bfloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    array u = random::uniform(array(-3.0f), array(5.0f), Shape{kN}, dt, random::key(4));
    EXPECT_EQ(u.dtype(), dt);
    Stats s = stats(to_double(u));
    EXPECT_GE(s.min, -3.0);
    EXPECT_LT(s.max, 5.0);
    EXPECT_NEAR(s.mean, 1.0, 5 * 8 * std::sqrt(1.0 / 12.0 / kN) + (dt == bfloat16 ? 0.03 : 0.0));
    EXPECT_NEAR(s.var, 64.0 / 12.0, 64.0 * 5 * std::sqrt(1.0 / 180.0 / kN) + (dt == bfloat16 ? 0.1 : 0.0));
  }
  // Deterministic; different keys differ.
  array a = random::uniform(Shape{1000}, float32, random::key(5));
  EXPECT_TRUE(same(a, random::uniform(Shape{1000}, float32, random::key(5))));
  EXPECT_GT(diff_fraction(a, random::uniform(Shape{1000}, float32, random::key(6))), 0.99);
  // Values are not all distinct-by-accident: many different values.
  auto av = to_double(a);
  EXPECT_GT(std::set<double>(av.begin(), av.end()).size(), 990u);
}

TEST(RandomTest, UniformBroadcastsLowAndHigh) {
  array low(std::vector<float>{0.0f, 10.0f, -20.0f}, {3, 1});
  array high(std::vector<float>{1.0f, 30.0f, 50.0f, 100.0f}, {1, 4});
  const int n = 4000;
  array u = random::uniform(low, high, Shape{n, 3, 4}, float32, random::key(9));
  ASSERT_EQ(u.shape(), (Shape{n, 3, 4}));
  auto v = to_double(u);
  const double lo[3] = {0, 10, -20}, hi[4] = {1, 30, 50, 100};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) {
      if (lo[i] >= hi[j]) continue;
      std::vector<double> cell;
      for (int s = 0; s < n; ++s) cell.push_back(v[(s * 3 + i) * 4 + j]);
      Stats st = stats(cell);
      double w = hi[j] - lo[i];
      EXPECT_GE(st.min, lo[i]) << i << "," << j;
      EXPECT_LT(st.max, hi[j]) << i << "," << j;
      EXPECT_NEAR(st.mean, (lo[i] + hi[j]) / 2, 5 * w * std::sqrt(1.0 / 12.0 / n)) << i << "," << j;
    }
  }
  // Shape incompatible with low/high is an error.
  EXPECT_TRUE(throws_error([&] { random::uniform(low, high, Shape{5, 2}, float32, random::key(1)); }, {}));
}

TEST(RandomTest, NormalStatistics) {
  for (Dtype dt : {float32, float16, bfloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    array x = random::normal(Shape{kN}, dt, 0.0f, 1.0f, random::key(11));
    EXPECT_EQ(x.dtype(), dt);
    auto v = to_double(x);
    Stats s = stats(v);
    double slack = dt == bfloat16 ? 5e-3 : 0.0;
    EXPECT_NEAR(s.mean, 0.0, 5 / std::sqrt(static_cast<double>(kN)));
    EXPECT_NEAR(s.var, 1.0, 5 * std::sqrt(2.0 / kN) + slack);
    size_t gt1 = 0, gt2 = 0, gt3 = 0;
    for (double t : v) {
      ASSERT_TRUE(std::isfinite(t));
      gt1 += std::fabs(t) > 1;
      gt2 += std::fabs(t) > 2;
      gt3 += std::fabs(t) > 3;
    }
    auto near_frac = [&](size_t count, double p) {
      EXPECT_NEAR(static_cast<double>(count) / kN, p, 5 * std::sqrt(p * (1 - p) / kN) + slack);
    };
    near_frac(gt1, 0.31731);
    near_frac(gt2, 0.04550);
    near_frac(gt3, 0.00270);
    // Skewness about zero.
    double m3 = 0;
    for (double t : v) m3 += t * t * t;
    EXPECT_NEAR(m3 / kN, 0.0, 5 * std::sqrt(15.0 / kN));
  }
  // loc and scale.
  array y = random::normal(Shape{kN}, float32, 2.0f, 3.0f, random::key(12));
  Stats s = stats(to_double(y));
  EXPECT_NEAR(s.mean, 2.0, 5 * 3 / std::sqrt(static_cast<double>(kN)));
  EXPECT_NEAR(s.var, 9.0, 9 * 5 * std::sqrt(2.0 / kN));
  // Deterministic; keys matter; multi-dimensional shape.
  array a = random::normal(Shape{10, 33}, float32, 0.0f, 1.0f, random::key(13));
  EXPECT_EQ(a.shape(), (Shape{10, 33}));
  EXPECT_TRUE(same(a, random::normal(Shape{10, 33}, float32, 0.0f, 1.0f, random::key(13))));
  EXPECT_GT(diff_fraction(a, random::normal(Shape{10, 33}, float32, 0.0f, 1.0f, random::key(14))), 0.99);
}

TEST(RandomTest, Randint) {
  array r = random::randint(array(-3), array(7), Shape{kN}, int32, random::key(21));
  EXPECT_EQ(r.dtype(), int32);
  EXPECT_EQ(r.shape(), Shape{kN});
  std::map<int, int> counts;
  for (double v : to_double(r)) counts[static_cast<int>(v)]++;
  ASSERT_EQ(counts.size(), 10u);
  EXPECT_EQ(counts.begin()->first, -3);
  EXPECT_EQ(counts.rbegin()->first, 6);
  for (auto [v, c] : counts) {
    EXPECT_NEAR(static_cast<double>(c) / kN, 0.1, 5 * std::sqrt(0.09 / kN)) << "value " << v;
  }
  EXPECT_TRUE(same(r, random::randint(array(-3), array(7), Shape{kN}, int32, random::key(21))));
  EXPECT_GT(diff_fraction(r, random::randint(array(-3), array(7), Shape{kN}, int32, random::key(22))), 0.8);

  // Other dtypes and a large range.
  array u = random::randint(array(0), array(200), Shape{20000}, uint8, random::key(23));
  EXPECT_EQ(u.dtype(), uint8);
  Stats su = stats(to_double(u));
  EXPECT_GE(su.min, 0);
  EXPECT_LE(su.max, 199);
  EXPECT_EQ(su.max, 199);
  // Broadcast bounds: each column has its own range.
  array lo({0, 10, 100});
  array hi({2, 15, 101});
  array b = random::randint(lo, hi, Shape{1000, 3}, int32, random::key(25));
  auto bv = to_double(b);
  std::set<double> col[3];
  for (int i = 0; i < 1000; ++i)
    for (int j = 0; j < 3; ++j) col[j].insert(bv[i * 3 + j]);
  EXPECT_EQ(col[0], (std::set<double>{0, 1}));
  EXPECT_EQ(col[1], (std::set<double>{10, 11, 12, 13, 14}));
  EXPECT_EQ(col[2], (std::set<double>{100}));
}

TEST(RandomTest, RandintLargeRangeIsUniform) {
  // A span of 2e9 is close to 2^32: reducing 32 random bits modulo the span
  // would make the lowest ~3e8 values 1.5x as likely as the rest.
  const int n = 40000;
  array w = random::randint(array(-1000000000), array(1000000000), Shape{n}, int64, random::key(24));
  EXPECT_EQ(w.dtype(), int64);
  auto wv = to_double(w);
  Stats sw = stats(wv);
  EXPECT_GE(sw.min, -1e9);
  EXPECT_LT(sw.max, 1e9);
  EXPECT_NEAR(sw.mean, 0.0, 5 * 2e9 * std::sqrt(1.0 / 12.0 / n));
  // Each fifth of the range holds about a fifth of the samples.
  int fifths[5] = {0, 0, 0, 0, 0};
  for (double v : wv) fifths[std::min(4, static_cast<int>((v + 1e9) / 4e8))]++;
  for (int f = 0; f < 5; ++f) EXPECT_NEAR(fifths[f] / double(n), 0.2, 5 * std::sqrt(0.16 / n)) << "fifth " << f;
}

TEST(RandomTest, RandintBeyond32Bits) {
  // int64 ranges wider than 2^32 reach their whole range.
  const int64_t hi = int64_t{1} << 40;
  array w = random::randint(array(int64_t{0}), array(hi), Shape{20000}, int64, random::key(26));
  auto wv = to_double(w);
  Stats sw = stats(wv);
  EXPECT_GE(sw.min, 0.0);
  EXPECT_LT(sw.max, std::ldexp(1.0, 40));
  EXPECT_GT(sw.max, std::ldexp(1.0, 39));
  EXPECT_NEAR(sw.mean, std::ldexp(1.0, 39), 5 * std::ldexp(1.0, 40) * std::sqrt(1.0 / 12.0 / 20000));
  for (double v : wv) ASSERT_EQ(v, std::floor(v));
}

TEST(RandomTest, Bernoulli) {
  array b = random::bernoulli(array(0.3f), Shape{kN}, random::key(31));
  EXPECT_EQ(b.dtype(), bool_);
  EXPECT_EQ(b.shape(), Shape{kN});
  Stats s = stats(to_double(b));
  EXPECT_NEAR(s.mean, 0.3, 5 * std::sqrt(0.21 / kN));
  EXPECT_TRUE(same(b, random::bernoulli(array(0.3f), Shape{kN}, random::key(31))));
  // p broadcast over the shape, with the extremes.
  array p({0.0f, 0.25f, 0.5f, 1.0f});
  const int n = 20000;
  array c = random::bernoulli(p, Shape{n, 4}, random::key(32));
  ASSERT_EQ(c.shape(), (Shape{n, 4}));
  auto cv = to_double(c);
  double sums[4] = {0, 0, 0, 0};
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < 4; ++j) sums[j] += cv[i * 4 + j];
  EXPECT_EQ(sums[0], 0.0);
  EXPECT_EQ(sums[3], static_cast<double>(n));
  EXPECT_NEAR(sums[1] / n, 0.25, 5 * std::sqrt(0.1875 / n));
  EXPECT_NEAR(sums[2] / n, 0.5, 5 * std::sqrt(0.25 / n));
  // Without a shape the result has p's shape.
  array d = random::bernoulli(p, std::optional<array>(random::key(33)));
  EXPECT_EQ(d.shape(), Shape{4});
  auto dv = to_double(d);
  EXPECT_EQ(dv[0], 0.0);
  EXPECT_EQ(dv[3], 1.0);
}

TEST(RandomTest, GlobalSeed) {
  random::seed(1234);
  array a = random::uniform(Shape{100});
  array b = random::uniform(Shape{100});
  random::seed(1234);
  array c = random::uniform(Shape{100});
  array d = random::uniform(Shape{100});
  EXPECT_TRUE(same(a, c));
  EXPECT_TRUE(same(b, d));
  EXPECT_GT(diff_fraction(a, b), 0.99);  // the global key advances
  random::seed(1235);
  EXPECT_GT(diff_fraction(a, random::uniform(Shape{100})), 0.99);
}

TEST(RandomTest, IndependentOfThreadCount) {
  const int saved = cpu_threads();
  const Shape shape = {(1 << 20) + 7};
  auto run = [&] {
    array k = random::key(77);
    std::vector<array> out = {random::bits(shape, k),
                              random::uniform(shape, float32, k),
                              random::uniform(shape, bfloat16, k),
                              random::normal(shape, float32, 0.0f, 1.0f, k),
                              random::randint(array(0), array(1000), shape, int32, k),
                              random::bernoulli(array(0.5f), shape, k),
                              random::split(k, 1000)};
    eval(out);
    return out;
  };
  set_cpu_threads(1);
  EXPECT_EQ(cpu_threads(), 1);
  auto one = run();
  set_cpu_threads(2);
  EXPECT_EQ(cpu_threads(), 2);
  auto two = run();
  set_cpu_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(same(one[i], two[i])) << "output " << i;
}

}  // namespace
