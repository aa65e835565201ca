// numpy's results where Kiln used to differ (issue 13): signed zeros of abs,
// negative and remainder; tanh reaching +-1; integer scalars that do not fit
// the array's dtype; integers to negative integer powers; empty randint
// ranges. Elementwise results are checked unfused and through both compile
// backends (interpreter and generated code), which share the op math.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/compiled.h"
#include "kiln/compile.h"
#include "test_util.h"

namespace kiln::test {
namespace {

struct UseBackend {
  explicit UseBackend(detail::CompileBackend b) { detail::set_compile_backend(b); }
  ~UseBackend() { detail::clear_compile_backend(); }
};

// fn unfused, then compiled with each backend (a leading `+ 0` keeps the
// chain at two ops so that it is fused); every result is returned in order.
std::vector<array> unfused_and_fused(const std::function<array(const array&, const array&)>& fn, const array& x,
                                     const array& y) {
  std::vector<array> out = {fn(x, y)};
  for (auto b : {detail::CompileBackend::interp, detail::CompileBackend::codegen}) {
    UseBackend use(b);
    auto f = compile([&](const std::vector<array>& in) -> std::vector<array> {
      return {fn(in[0] * array(1, in[0].dtype()), in[1])};
    });
    out.push_back(f({x, y})[0]);
  }
  return out;
}

// Exact values, signs of zeros included.
void expect_bits(const array& got, const std::vector<double>& want, const std::string& what) {
  std::vector<double> g = to_double(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " element " << i;
      continue;
    }
    EXPECT_EQ(g[i], want[i]) << what << " element " << i;
    EXPECT_EQ(std::signbit(g[i]), std::signbit(want[i])) << what << " element " << i << " (sign of zero)";
  }
}

TEST(NumericsTest, SignedZeros) {
  for (Dtype dt : {float32, float64, float16, bfloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    array x = array({-0.0, 0.0, -4.0, 4.0, -3.0, 5.0}, {6}, dt);
    array y = array({2.0, 2.0, 2.0, -2.0, -2.0, 2.0}, {6}, dt);
    auto abs_fn = [](const array& a, const array&) { return abs(a); };
    auto neg_fn = [](const array& a, const array&) { return negative(a); };
    auto rem_fn = [](const array& a, const array& b) { return remainder(a, b); };
    for (const array& r : unfused_and_fused(abs_fn, x, y)) expect_bits(r, {0.0, 0.0, 4.0, 4.0, 3.0, 5.0}, "abs");
    for (const array& r : unfused_and_fused(neg_fn, x, y)) expect_bits(r, {0.0, -0.0, 4.0, -4.0, 3.0, -5.0}, "negative");
    // numpy: a zero remainder takes the sign of the divisor.
    for (const array& r : unfused_and_fused(rem_fn, x, y)) {
      expect_bits(r, {0.0, 0.0, 0.0, -0.0, -1.0, 1.0}, "remainder");
    }
  }
  // Division by zero stays NaN.
  EXPECT_TRUE(std::isnan(remainder(array(3.0f), array(0.0f)).item<float>()));
  EXPECT_TRUE(std::isnan(remainder(array(-0.0f), array(0.0f)).item<float>()));
}

TEST(NumericsTest, TanhReachesOne) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> xs = {8.0, 9.0, 9.0109, 9.0109138, 9.02, 12.0, 50.0, 1e30, inf, 0.5, 3.0, 7.0};
  const size_t n = xs.size();
  for (size_t i = 0; i < n; ++i) xs.push_back(-xs[i]);
  array x = array(xs, {static_cast<int>(xs.size())}, float32);
  std::vector<double> xf = to_double(x);
  auto tanh_fn = [](const array& a, const array&) { return tanh(a); };
  for (const array& r : unfused_and_fused(tanh_fn, x, x)) {
    std::vector<double> got = to_double(r);
    for (size_t i = 0; i < xs.size(); ++i) {
      // The float nearest tanh(x): +-1 from |x| = 9.0109138 on.
      double want = static_cast<float>(std::tanh(xf[i]));
      double ulp = std::nextafter(static_cast<float>(std::fabs(want)), 0.0f) - std::fabs(want);
      EXPECT_LE(std::fabs(got[i] - want), 4 * std::fabs(ulp)) << "tanh(" << xf[i] << ") = " << got[i];
      if (std::fabs(xf[i]) >= 9.0109138) EXPECT_EQ(got[i], std::copysign(1.0, xf[i])) << "tanh(" << xf[i] << ")";
    }
  }
  for (Dtype dt : {float64, bfloat16, float16}) {
    EXPECT_EQ(tanh(array(inf, dt)).item<double>(), 1.0) << dtype_name(dt);
    EXPECT_EQ(tanh(array(-inf, dt)).item<double>(), -1.0) << dtype_name(dt);
  }
}

TEST(NumericsTest, IntegerScalarMustFitTheDtype) {
  array i8 = array({1, -2, 3}, {3}, int8);
  EXPECT_TRUE(throws_error([&] { (i8 + 300).eval(); }, {"[add]", "300", "int8"}));
  EXPECT_TRUE(throws_error([&] { (i8 * -129).eval(); }, {"[multiply]", "-129", "int8"}));
  EXPECT_TRUE(throws_error([&] { (200 - i8).eval(); }, {"[subtract]", "200", "int8"}));
  EXPECT_TRUE(throws_error([&] { (i8 == 1000).eval(); }, {"[equal]", "1000", "int8"}));
  array i32 = array({1, 2}, {2}, int32);
  EXPECT_TRUE(throws_error([&] { (i32 + 3000000000LL).eval(); }, {"[add]", "3000000000", "int32"}));
  EXPECT_TRUE(throws_error([&] { (i32 + 3000000000u).eval(); }, {"[add]", "3000000000", "int32"}));
  array u8 = array({1, 2}, {2}, uint8);
  EXPECT_TRUE(throws_error([&] { (u8 + -1).eval(); }, {"[add]", "-1", "uint8"}));
  EXPECT_TRUE(throws_error([&] { (u8 % 256).eval(); }, {"[remainder]", "256", "uint8"}));
  array u32 = array({1u, 2u}, {2}, uint32);
  EXPECT_TRUE(throws_error([&] { (u32 + (int64_t{1} << 32)).eval(); }, {"4294967296", "uint32"}));
  array i64 = array({int64_t{1}}, {1}, int64);
  EXPECT_TRUE(throws_error([&] { (i64 + ~uint64_t{0}).eval(); }, {"[add]", "int64"}));
  // Values that fit are exact, at both ends of each range.
  EXPECT_TRUE(all_close(i8 + 127, {-128.0, 125.0, -126.0}, 0.0));  // wraps as int8 arithmetic does
  EXPECT_TRUE(all_close(i8 + -128, {-127.0, 126.0, -125.0}, 0.0));
  EXPECT_TRUE(all_close(u8 + 253, {254.0, 255.0}, 0.0));
  EXPECT_EQ((i64 + int64_t{9007199254740993}).item<int64_t>(), int64_t{9007199254740994});  // above 2^53
  EXPECT_EQ((i64 + (uint64_t{1} << 62)).item<int64_t>(), (int64_t{1} << 62) + 1);
  // Float arrays take any integer; bool arrays promote to int32 (checked there).
  EXPECT_EQ((array(1.0f, float16) + 3000000000LL).dtype(), float16);
  EXPECT_EQ((array(true) + 300).item<int32_t>(), 301);
  EXPECT_TRUE(throws_error([&] { (array(true) + 3000000000LL).eval(); }, {"[add]", "int32"}));
}

TEST(NumericsTest, IntegerToNegativePowerThrows) {
  for (Dtype dt : {int8, int32, int64}) {
    SCOPED_TRACE(dtype_name(dt));
    array base = array({2, 3, -1}, {3}, dt);
    // Known exponents: at graph build.
    EXPECT_TRUE(throws_error([&] { power(base, array(-1, dt)); }, {"[power]", "negative", "-1"}));
    EXPECT_TRUE(throws_error([&] { power(base, array({1, -2, 0}, {3}, dt)); }, {"[power]", "-2"}));
    // Exponents computed by the graph: at eval, as an error of the node.
    array e = array({1, 2, 2}, {3}, dt) - array(3, dt);
    array p = power(base, e);
    EXPECT_TRUE(throws_error([&] { p.eval(); }, {"[power]", "negative", "(3)"}));
    array q = power(base, broadcast_to(reshape(e, {3, 1}), {3, 3}));
    EXPECT_TRUE(throws_error([&] { q.eval(); }, {"[power]", "negative", "(3,3)"}));
    // ... also inside a compiled function (the power is not fused).
    auto f = compile([](const std::vector<array>& in) -> std::vector<array> {
      return {power(in[0] + in[0], in[1] - in[1] - in[1])};
    });
    EXPECT_TRUE(throws_error([&] { f({base, array({1, 0, 2}, {3}, dt)})[0].eval(); }, {"[power]"}));
    EXPECT_TRUE(all_close(f({base, array({0, 0, 0}, {3}, dt)})[0], {1.0, 1.0, 1.0}, 0.0));
    // Non-negative exponents work, lazy or not.
    EXPECT_TRUE(all_close(power(base, array({3, 0, 3}, {3}, dt)), {8.0, 1.0, -1.0}, 0.0));
    EXPECT_TRUE(all_close(power(base, array({4, 4, 4}, {3}, dt) - array(2, dt)), {4.0, 9.0, 1.0}, 0.0));
  }
  // Floats and unsigned integers are not affected.
  EXPECT_EQ(power(array(2.0f), array(-1.0f)).item<float>(), 0.5f);
  EXPECT_EQ(power(array(2u), array(3u)).item<uint32_t>(), 8u);
}

TEST(NumericsTest, RandintNeedsANonEmptyRange) {
  EXPECT_TRUE(throws_error([] { random::randint(array(5), array(5), {3}); }, {"[random.randint]", "5"}));
  EXPECT_TRUE(throws_error([] { random::randint(array(5), array(4), {3}); }, {"[random.randint]", "low"}));
  EXPECT_TRUE(throws_error([] { random::randint(array({0, 7}, {2}), array({3, 7}, {2}), {2}); },
                           {"[random.randint]"}));
  array r = random::randint(array(4), array(5), {100});
  for (double v : to_double(r)) EXPECT_EQ(v, 4.0);
}

}  // namespace
}  // namespace kiln::test
