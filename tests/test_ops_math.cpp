// The elementwise ops of issue 9 (new unary and binary op kinds, bitwise
// ops, predicates, nan_to_num, isclose, logaddexp, round to decimals, floor
// division) against double-precision references with numpy's semantics,
// on odd shapes and every input layout; and compile's two CPU backends
// against the unfused ops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/compiled.h"
#include "test_layouts.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using UnaryFn = array (*)(const array&, StreamOrDevice);
using BinaryFn = array (*)(const array&, const array&, StreamOrDevice);

struct UnaryMath {
  const char* name;
  UnaryFn fn;
  double (*ref)(double);
  double lo, hi;  // input range
};

const UnaryMath kUnaryMath[] = {
    {"tan", tan, [](double x) { return std::tan(x); }, -1.3, 1.3},
    {"arcsin", arcsin, [](double x) { return std::asin(x); }, -0.99, 0.99},
    {"arccos", arccos, [](double x) { return std::acos(x); }, -0.99, 0.99},
    {"arctan", arctan, [](double x) { return std::atan(x); }, -4, 4},
    {"sinh", sinh, [](double x) { return std::sinh(x); }, -3, 3},
    {"cosh", cosh, [](double x) { return std::cosh(x); }, -3, 3},
    {"arcsinh", arcsinh, [](double x) { return std::asinh(x); }, -4, 4},
    {"arccosh", arccosh, [](double x) { return std::acosh(x); }, 1.05, 6},
    {"arctanh", arctanh, [](double x) { return std::atanh(x); }, -0.95, 0.95},
    {"log2", log2, [](double x) { return std::log2(x); }, 0.05, 40},
    {"log10", log10, [](double x) { return std::log10(x); }, 0.05, 40},
    {"degrees", degrees, [](double x) { return x * 180.0 / M_PI; }, -4, 4},
    {"radians", radians, [](double x) { return x * M_PI / 180.0; }, -400, 400},
};

std::vector<double> map(const std::vector<double>& x, double (*f)(double)) {
  std::vector<double> r;
  for (double v : x) r.push_back(f(v));
  return r;
}

TEST(OpsMath, UnaryFloatingOpsEveryDtypeAndLayout) {
  for (const auto& op : kUnaryMath) {
    for (Dtype t : {float32, float16, bfloat16, float64}) {
      for (Layout layout : kLayouts) {
        array x = make_input({7, 13}, layout, [&](const Shape& s) { return random_array(s, t, op.lo, op.hi); });
        array y = op.fn(x, {});
        EXPECT_EQ(y.dtype(), t) << op.name;
        EXPECT_TRUE(all_close(y, map(to_double(x), op.ref), tolerance(t) * 2, tolerance(t)))
            << op.name << " " << dtype_name(t) << " " << layout_name(layout);
      }
    }
    // Integer inputs compute in float32.
    double lo = std::ceil(op.lo), hi = std::floor(op.hi) + 1;
    if (hi - lo >= 2) {
      array xi = random_array({5, 3}, int32, lo, hi);
      array yi = op.fn(xi, {});
      EXPECT_EQ(yi.dtype(), float32) << op.name;
      EXPECT_TRUE(all_close(yi, map(to_double(xi), op.ref), 4e-6, 1e-6)) << op.name << " int32";
    }
  }
  // Outside the domain: NaN (and the poles), as the C library gives.
  EXPECT_TRUE(std::isnan(arcsin(array(1.5f)).item<float>()));
  EXPECT_TRUE(std::isnan(arccosh(array(0.5)).item<double>()));
  EXPECT_EQ(arctanh(array(1.0f)).item<float>(), INFINITY);
  EXPECT_EQ(log2(array(0.0f)).item<float>(), -INFINITY);
}

double numpy_floor_divide(double x, double y) {
  if (y == 0) return x / y;
  double mod = std::fmod(x, y), div = (x - mod) / y;
  if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1;
  if (div == 0) return std::copysign(0.0, x / y);
  double fl = std::floor(div);
  return div - fl > 0.5 ? fl + 1 : fl;
}

TEST(OpsMath, Arctan2AndLogaddexp) {
  for (Dtype t : {float32, float16, bfloat16, float64}) {
    for (Layout layout : kLayouts) {
      auto gen = [&](const Shape& s) { return random_array(s, t, -3, 3); };
      array a = make_input({9, 11}, layout, gen);
      array b = transpose(gen({11, 9}));
      std::vector<double> va = to_double(a), vb = to_double(b), at, la;
      for (size_t i = 0; i < va.size(); ++i) {
        at.push_back(std::atan2(va[i], vb[i]));
        la.push_back(std::log(std::exp(va[i]) + std::exp(vb[i])));
      }
      EXPECT_TRUE(all_close(arctan2(a, b), at, tolerance(t) * 2, tolerance(t))) << dtype_name(t);
      EXPECT_TRUE(all_close(logaddexp(a, b), la, tolerance(t) * 2, tolerance(t))) << dtype_name(t);
    }
  }
  // Broadcast, integer promotion and the infinities.
  array col = random_array({4, 1}, int32, -5, 5), row = random_array({1, 3}, float32, -2, 2);
  EXPECT_EQ(arctan2(col, array(2)).dtype(), float32);
  std::vector<double> vc = to_double(col), vr = to_double(row), want;
  for (double c : vc)
    for (double r : vr) want.push_back(std::log(std::exp(c) + std::exp(r)));
  EXPECT_TRUE(all_close(logaddexp(col, row), want, 1e-6));
  EXPECT_TRUE(all_close(logaddexp(array({INFINITY, -INFINITY, -INFINITY, 1000.f}), array({1.f, 2.f, -INFINITY, 1000.f})),
                        {INFINITY, 2, -INFINITY, 1000 + std::log(2.0)}, 1e-6));
  EXPECT_TRUE(std::isnan(logaddexp(array(NAN), array(1.0f)).item<float>()));
}

TEST(OpsMath, FloorDivideAndDivmodFollowNumpy) {
  for (Dtype t : {int8, int32, int64, uint8, uint32}) {
    bool uns = t == uint8 || t == uint32;
    array a = random_array({8, 9}, t, uns ? 0 : -100, 100);
    array b = transpose(random_array({9, 8}, t, uns ? 0 : -7, 7));  // zeros included
    std::vector<double> va = to_double(a), vb = to_double(b), q, r;
    for (size_t i = 0; i < va.size(); ++i) {
      q.push_back(vb[i] == 0 ? 0 : std::floor(va[i] / vb[i]));
      r.push_back(vb[i] == 0 ? 0 : va[i] - vb[i] * std::floor(va[i] / vb[i]));
    }
    std::vector<array> dm = divmod(a, b);
    EXPECT_EQ(dm[0].dtype(), t);
    EXPECT_TRUE(all_close(floor_divide(a, b), q, 0.0)) << dtype_name(t);
    EXPECT_TRUE(all_close(dm[0], q, 0.0)) << dtype_name(t);
    EXPECT_TRUE(all_close(dm[1], r, 0.0)) << dtype_name(t);
  }
  for (Dtype t : {float32, float16, bfloat16, float64}) {
    array a = random_array({8, 9}, t, -20, 20);
    array b = broadcast_to(random_array({1, 9}, t, 0.3, 3), {8, 9});
    b = multiply(b, astype(sign(random_array({8, 9}, float32)), t));
    std::vector<double> va = to_double(a), vb = to_double(b), q;
    for (size_t i = 0; i < va.size(); ++i) q.push_back(vb[i] == 0 ? 0 : numpy_floor_divide(va[i], vb[i]));
    EXPECT_TRUE(all_close(floor_divide(a, b), q, tolerance(t))) << dtype_name(t);
  }
  // numpy's exact float rule: 1 // 0.1 is 9; MIN // -1 wraps; mixed dtypes promote.
  EXPECT_EQ(floor_divide(array(1.0), array(0.1)).item<double>(), 9.0);
  EXPECT_EQ(floor_divide(array(int8_t{-128}), array(int8_t{-1})).item<int>(), -128);
  EXPECT_EQ(floor_divide(array({7}, int32), array(2.0f)).dtype(), float32);
  EXPECT_TRUE(throws_error([] { floor_divide(array(true), array(true)); }, {"[floor_divide]", "bool"}));
}

// v << n or v >> n in a dtype of `bits` bits, from the arithmetic meaning.
double shift_ref(double v, double n, bool left, int bits, bool is_signed) {
  if (n < 0 || n >= bits) return left ? 0 : (v < 0 ? -1 : 0);
  if (!left) return std::floor(v / std::ldexp(1.0, static_cast<int>(n)));
  uint64_t mask = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  uint64_t u = (static_cast<uint64_t>(static_cast<int64_t>(v)) << static_cast<int>(n)) & mask;
  if (is_signed && bits < 64 && (u >> (bits - 1))) return static_cast<double>(static_cast<int64_t>(u) - (int64_t{1} << bits));
  return is_signed ? static_cast<double>(static_cast<int64_t>(u)) : static_cast<double>(u);
}

TEST(OpsMath, BitwiseOpsOnIntegersAndBool) {
  struct Type {
    Dtype t;
    int bits;
    bool is_signed;
  };
  for (Type ty : {Type{int8, 8, true}, Type{int32, 32, true}, Type{int64, 64, true}, Type{uint8, 8, false},
                  Type{uint32, 32, false}}) {
    for (Layout layout : kLayouts) {
      double lo = ty.is_signed ? -120 : 0;
      array a = make_input({6, 7}, layout, [&](const Shape& s) { return random_array(s, ty.t, lo, 120); });
      array b = random_array({6, 7}, ty.t, ty.is_signed ? -60 : 0, 120);
      array n = random_array({1, 7}, ty.t, ty.is_signed ? -2 : 0, ty.bits + 3);  // out-of-range counts too
      std::vector<double> va = to_double(a), vb = to_double(b), vn = to_double(broadcast_to(n, {6, 7}));
      std::vector<double> band, bor, bxor, binv, shl, shr;
      for (size_t i = 0; i < va.size(); ++i) {
        int64_t x = static_cast<int64_t>(va[i]), y = static_cast<int64_t>(vb[i]);
        band.push_back(static_cast<double>(x & y));
        bor.push_back(static_cast<double>(x | y));
        bxor.push_back(static_cast<double>(x ^ y));
        double inv = static_cast<double>(~x);
        if (!ty.is_signed) inv += std::ldexp(1.0, ty.bits);
        binv.push_back(inv);
        shl.push_back(shift_ref(va[i], vn[i], true, ty.bits, ty.is_signed));
        shr.push_back(shift_ref(va[i], vn[i], false, ty.bits, ty.is_signed));
      }
      std::string what = std::string(dtype_name(ty.t)) + " " + layout_name(layout);
      EXPECT_TRUE(all_close(bitwise_and(a, b), band, 0.0)) << what;
      EXPECT_TRUE(all_close(a | b, bor, 0.0)) << what;
      EXPECT_TRUE(all_close(bitwise_xor(a, b), bxor, 0.0)) << what;
      EXPECT_TRUE(all_close(~a, binv, 0.0)) << what;
      EXPECT_TRUE(all_close(left_shift(a, n), shl, 0.0)) << what;
      EXPECT_TRUE(all_close(a >> n, shr, 0.0)) << what;
      EXPECT_EQ(bitwise_and(a, b).dtype(), ty.t);
    }
  }
  array p = array({true, true, false, false}), q = array({true, false, true, false});
  EXPECT_EQ((p & q).dtype(), bool_);
  EXPECT_TRUE(all_close(p & q, {1, 0, 0, 0}, 0.0));
  EXPECT_TRUE(all_close(p | q, {1, 1, 1, 0}, 0.0));
  EXPECT_TRUE(all_close(p ^ q, {0, 1, 1, 0}, 0.0));
  EXPECT_TRUE(all_close(~p, {0, 0, 1, 1}, 0.0));
  EXPECT_EQ(left_shift(p, q).dtype(), uint8);
  EXPECT_TRUE(all_close(left_shift(p, q), {2, 1, 0, 0}, 0.0));
  // Mixed integer dtypes promote; a weak scalar keeps the array's type.
  EXPECT_EQ(bitwise_or(array({1}, uint8), array({1}, int32)).dtype(), int32);
  EXPECT_EQ((array({3}, uint8) << 2).dtype(), uint8);
  EXPECT_TRUE(throws_error([] { bitwise_and(array(1.0f), array(1)); }, {"[bitwise_and]", "float32"}));
  EXPECT_TRUE(throws_error([] { right_shift(array(1), array(1.0)); }, {"[right_shift]"}));
  EXPECT_TRUE(throws_error([] { bitwise_invert(array(1.0f)); }, {"[bitwise_invert]", "float32"}));
}

TEST(OpsMath, PredicatesAndNanToNum) {
  const float inf = INFINITY;
  for (Dtype t : {float32, float16, bfloat16, float64}) {
    array x = astype(array({1.f, NAN, inf, -inf, -0.f, 3.5f, NAN, -2.f}, {2, 4}), t);
    array xt = transpose(x);  // non-contiguous
    EXPECT_TRUE(all_close(isnan(x), {0, 1, 0, 0, 0, 0, 1, 0}, 0.0));
    EXPECT_TRUE(all_close(isinf(x), {0, 0, 1, 1, 0, 0, 0, 0}, 0.0));
    EXPECT_TRUE(all_close(isposinf(x), {0, 0, 1, 0, 0, 0, 0, 0}, 0.0));
    EXPECT_TRUE(all_close(isneginf(x), {0, 0, 0, 1, 0, 0, 0, 0}, 0.0));
    EXPECT_TRUE(all_close(isfinite(xt), {1, 1, 0, 1, 0, 0, 0, 1}, 0.0));
    double big = t == float16 ? 65504.0 : t == bfloat16 ? 3.3895313892515355e38
                 : t == float32 ? std::numeric_limits<float>::max() : std::numeric_limits<double>::max();
    EXPECT_TRUE(all_close(nan_to_num(x), {1, 0, big, -big, 0, 3.5, 0, -2}, 0.0)) << dtype_name(t);
    EXPECT_TRUE(all_close(nan_to_num(xt, 7.f, 100.f, -100.f), {1, 0, 7, 3.5, 100, 7, -100, -2}, 0.0));
    EXPECT_EQ(nan_to_num(x).dtype(), t);
  }
  array i = array({1, 2, 3}, int32);
  EXPECT_TRUE(all_close(isnan(i), {0, 0, 0}, 0.0));
  EXPECT_TRUE(all_close(isfinite(i), {1, 1, 1}, 0.0));
  EXPECT_EQ(isinf(i).dtype(), bool_);
  EXPECT_EQ(nan_to_num(i).id(), i.id());
}

TEST(OpsMath, IscloseAllcloseArrayEqual) {
  const float inf = INFINITY;
  array a = array({1.0f, 1.0f, 100.f, inf, inf, -inf, NAN, 0.f});
  array b = array({1.0f + 5e-6f, 1.1f, 100.001f, inf, -inf, 1.f, NAN, 1e-9f});
  // |a-b| <= 1e-8 + 1e-5 |b|, infinities only match themselves.
  EXPECT_TRUE(all_close(isclose(a, b), {1, 0, 1, 1, 0, 0, 0, 1}, 0.0));
  EXPECT_TRUE(all_close(isclose(a, b, 1e-5, 1e-8, true), {1, 0, 1, 1, 0, 0, 1, 1}, 0.0));
  EXPECT_TRUE(all_close(isclose(a, b, 0.2), {1, 1, 1, 1, 0, 0, 0, 1}, 0.0));
  // Random data against the formula, broadcast and transposed.
  array x = random_array({5, 6}), y = transpose(random_array({6, 1}));
  array yb = add(broadcast_to(y, {5, 6}), multiply(random_array({5, 6}), array(1e-3f)));
  std::vector<double> vx = to_double(x), vy = to_double(yb), want;
  for (size_t k = 0; k < vx.size(); ++k) want.push_back(std::fabs(vx[k] - vy[k]) <= 1e-3 + 0.1 * std::fabs(vy[k]));
  EXPECT_TRUE(all_close(isclose(x, yb, 0.1, 1e-3), want, 0.0));
  EXPECT_TRUE(isclose(array({3}, int32), array({3}, uint8)).item<bool>());
  EXPECT_TRUE(isclose(array(true), array(true)).item<bool>());

  EXPECT_TRUE(allclose(x, add(x, array(1e-9f))).item<bool>());
  EXPECT_FALSE(allclose(x, add(x, array(1e-2f))).item<bool>());
  EXPECT_EQ(allclose(x, x).ndim(), 0);
  EXPECT_TRUE(throws_error([&] { isclose(x, random_array({4})); }, {"[isclose]"}));

  EXPECT_TRUE(array_equal(x, transpose(transpose(x))).item<bool>());
  EXPECT_FALSE(array_equal(x, reshape(x, {6, 5})).item<bool>());
  EXPECT_TRUE(array_equal(array({1, 2}, int32), array({1.0f, 2.0f})).item<bool>());
  EXPECT_FALSE(array_equal(array({NAN, 1.f}), array({NAN, 1.f})).item<bool>());
  EXPECT_TRUE(array_equal(array({NAN, 1.f}), array({NAN, 1.f}), true).item<bool>());
}

TEST(OpsMath, RoundToDecimals) {
  for (Dtype t : {float32, float64, float16}) {
    array x = random_array({7, 9}, t, -50, 50);
    for (int d : {1, 2, -1}) {
      std::vector<double> want;
      double p = std::pow(10.0, std::abs(d));
      for (double v : to_double(x)) want.push_back(d > 0 ? std::nearbyint(v * p) / p : std::nearbyint(v / p) * p);
      array r = round(transpose(x), d);
      EXPECT_EQ(r.dtype(), t);
      std::vector<double> wt(want.size());
      for (int i = 0; i < 7; ++i)
        for (int j = 0; j < 9; ++j) wt[j * 7 + i] = want[i * 9 + j];
      EXPECT_TRUE(all_close(r, wt, tolerance(t), tolerance(t))) << dtype_name(t) << " decimals " << d;
    }
  }
  EXPECT_TRUE(all_close(round(array({15, 25, -35, 7}, int32), -1), {20, 20, -40, 10}, 0.0));
  EXPECT_EQ(round(array({15}, int32), 2).dtype(), int32);
}

// compile's interpreter and generated C++ give the unfused ops' bits.
struct UseBackend {
  explicit UseBackend(detail::CompileBackend b) { detail::set_compile_backend(b); }
  ~UseBackend() { detail::clear_compile_backend(); }
};

void expect_compiled_same(const ArrayFn& fn, const std::vector<array>& inputs) {
  for (auto backend : {detail::CompileBackend::interp, detail::CompileBackend::codegen}) {
    UseBackend use(backend);
    std::vector<array> got = compile(fn)(inputs);
    std::vector<array> want = fn(inputs);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].dtype(), want[i].dtype());
      EXPECT_TRUE(all_close(got[i], to_double(want[i]), 0.0))
          << "output " << i << (backend == detail::CompileBackend::interp ? " interp" : " codegen");
    }
  }
}

TEST(OpsMath, NewOpsFuseUnderCompile) {
  auto floating = [](const std::vector<array>& in) -> std::vector<array> {
    const array& x = in[0];
    const array& y = in[1];
    array a = tan(x) + arcsin(x * 0.5f) + arccos(y * 0.5f) + arctan(y) + sinh(x) + cosh(y);
    array b = arcsinh(x) + arccosh(abs(y) + 1.0f) + arctanh(x * 0.4f) + log2(abs(x) + 0.5f) + log10(abs(y) + 0.5f);
    return {a * b + arctan2(x, y) + floor_divide(x, y + 3.0f)};
  };
  for (Dtype t : {float32, float16, bfloat16, float64}) {
    SCOPED_TRACE(dtype_name(t));
    expect_compiled_same(floating, {random_array({17, 33}, t, -1.5, 1.5), random_array({17, 33}, t, -1.5, 1.5)});
  }
  auto integer = [](const std::vector<array>& in) -> std::vector<array> {
    const array& x = in[0];
    const array& y = in[1];
    array a = (x & y) + (x | y) - (x ^ ~y);
    return {a + left_shift(x, y % 9) - right_shift(x, y % 9) + floor_divide(x, y)};
  };
  for (Dtype t : {int32, int8, int64, uint8, uint32}) {
    SCOPED_TRACE(dtype_name(t));
    bool uns = t == uint8 || t == uint32;
    expect_compiled_same(integer, {random_array({9, 21}, t, uns ? 0 : -100, 100), random_array({9, 21}, t, uns ? 0 : -12, 12)});
  }
}

}  // namespace
}  // namespace kiln::test
