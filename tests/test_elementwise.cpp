// Elementwise ops (unary, binary, where, clip, operators) against a naive
// double-precision reference computed from the inputs' own values.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/copy.h"
#include "test_util.h"

namespace {

using namespace kiln::test;  // NOLINT
using kiln::array;
using kiln::Dtype;
using kiln::Shape;
using kiln::astype;
using kiln::bool_;
using kiln::uint8;
using kiln::uint16;
using kiln::uint32;
using kiln::uint64;
using kiln::int16;
using kiln::int8;
using kiln::int32;
using kiln::int64;
using kiln::float16;
using kiln::bfloat16;
using kiln::float32;
using kiln::float64;

const std::vector<Dtype> kFloatDtypes = {float16, bfloat16, float32, float64};
const std::vector<Dtype> kIntDtypes = {int8, int16, int32, int64, uint8, uint16, uint32, uint64};

// ---------------------------------------------------------------- inputs

enum class Dom {
  Any,        // floats [-2, 2); ints [-10, 10) ([0, 10) unsigned)
  Pos,        // floats [0.1, 2); ints [1, 10)
  Unit,       // floats (-0.95, 0.95)
  NonZero,    // floats +-[0.25, 2); ints +-[1, 6) ([1, 10) unsigned)
  Quant,      // multiples of 0.25 in [-2, 2) (ties and zeros); ints [-3, 3) ([0, 3) unsigned)
  Log1p,      // floats [-0.9, 2)
  SmallBase,  // floats [0.1, 2); ints [-5, 5) ([0, 5) unsigned)
  SmallExp,   // floats [-2, 2); ints [0, 3)
};

// A fast generator (splitmix64) reseeded from the shared rng for each input,
// so that million-element inputs stay cheap to make.
uint64_t g_state = 0;
double uni(double lo, double hi) {
  uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return lo + (hi - lo) * (static_cast<double>(z >> 11) * 0x1.0p-53);
}

double gen_value(Dtype dt, Dom d) {
  bool is_int = kiln::is_integral(dt);
  bool uns = kiln::is_integral(dt) && !kiln::is_signed(dt) && dt != bool_;
  if (dt == bool_) return uni(0, 1) < 0.5 ? 0.0 : 1.0;
  auto sgn = [&] { return (!uns && uni(0, 1) < 0.5) ? -1.0 : 1.0; };
  if (is_int) {
    switch (d) {
      case Dom::Pos: return std::floor(uni(1, 10));
      case Dom::Log1p: return std::floor(uni(0, 10));
      case Dom::NonZero: return uns ? std::floor(uni(1, 10)) : sgn() * std::floor(uni(1, 6));
      case Dom::Quant: return std::floor(uni(uns ? 0 : -3, 3));
      case Dom::SmallBase: return std::floor(uni(uns ? 0 : -5, 5));
      case Dom::SmallExp: return std::floor(uni(0, 3));
      default: return std::floor(uni(uns ? 0 : -10, 10));
    }
  }
  switch (d) {
    case Dom::Pos:
    case Dom::SmallBase: return uni(0.1, 2);
    case Dom::Unit: return uni(-0.95, 0.95);
    case Dom::NonZero: return sgn() * uni(0.25, 2);
    case Dom::Quant: return std::floor(uni(-2, 2) * 4) / 4;
    case Dom::Log1p: return uni(-0.9, 2);
    default: return uni(-2, 2);
  }
}

array make(const Shape& shape, Dtype dt, Dom d = Dom::Any) {
  g_state = rng()();
  std::vector<double> v(numel(shape));
  for (auto& x : v) x = gen_value(dt, d);
  return astype(array(v, shape, float64), dt);
}

// ---------------------------------------------------------------- references

double erfinv_ref(double y) {
  if (y <= -1) return -std::numeric_limits<double>::infinity();
  if (y >= 1) return std::numeric_limits<double>::infinity();
  // Giles' single precision approximation, then Newton steps in double.
  double w = -std::log((1.0 - y) * (1.0 + y)), x;
  if (w < 5.0) {
    w -= 2.5;
    x = 2.81022636e-08;
    x = 3.43273939e-07 + x * w;
    x = -3.5233877e-06 + x * w;
    x = -4.39150654e-06 + x * w;
    x = 0.00021858087 + x * w;
    x = -0.00125372503 + x * w;
    x = -0.00417768164 + x * w;
    x = 0.246640727 + x * w;
    x = 1.50140941 + x * w;
  } else {
    w = std::sqrt(w) - 3.0;
    x = -0.000200214257;
    x = 0.000100950558 + x * w;
    x = 0.00134934322 + x * w;
    x = -0.00367342844 + x * w;
    x = 0.00573950773 + x * w;
    x = -0.0076224613 + x * w;
    x = 0.00943887047 + x * w;
    x = 1.00167406 + x * w;
    x = 2.83297682 + x * w;
  }
  x *= y;
  for (int i = 0; i < 4; ++i) {
    x -= (std::erf(x) - y) / (2.0 / std::sqrt(M_PI) * std::exp(-x * x));
  }
  return x;
}

double py_mod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Values of v (row-major in shape s) broadcast to shape out.
std::vector<double> bcast(const std::vector<double>& v, const Shape& s, const Shape& out) {
  if (s == out) return v;
  std::vector<double> r(numel(out));
  size_t off = out.size() - s.size();
  for (int64_t i = 0; i < static_cast<int64_t>(r.size()); ++i) {
    auto idx = unravel(i, out);
    int64_t k = 0;
    for (size_t d = 0; d < s.size(); ++d) k = k * s[d] + (s[d] == 1 ? 0 : idx[d + off]);
    r[i] = v[k];
  }
  return r;
}

Shape bshape(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    int da = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    int db = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// ---------------------------------------------------------------- unary table

using UFn = array (*)(const array&);
using URef = double (*)(double);

struct UnaryCase {
  const char* name;
  UFn fn;
  URef ref;
  Dom dom;
  bool floating;  // integer inputs compute in float32
  bool int_ok;    // also tested on integer inputs
};

#define UOP(NAME, REF, DOM, FLOATING, INT_OK) \
  UnaryCase{#NAME, [](const array& a) { return kiln::NAME(a); }, REF, DOM, FLOATING, INT_OK}

const UnaryCase kUnary[] = {
    UOP(abs, [](double x) { return std::fabs(x); }, Dom::Any, false, true),
    UOP(negative, [](double x) { return -x; }, Dom::Any, false, true),
    UOP(sign, [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }, Dom::Any, false, true),
    UOP(exp, [](double x) { return std::exp(x); }, Dom::Any, true, true),
    UOP(expm1, [](double x) { return std::expm1(x); }, Dom::Any, true, true),
    UOP(log, [](double x) { return std::log(x); }, Dom::Pos, true, true),
    UOP(log1p, [](double x) { return std::log1p(x); }, Dom::Log1p, true, true),
    UOP(sqrt, [](double x) { return std::sqrt(x); }, Dom::Pos, true, true),
    UOP(rsqrt, [](double x) { return 1.0 / std::sqrt(x); }, Dom::Pos, true, true),
    UOP(square, [](double x) { return x * x; }, Dom::Any, false, true),
    UOP(sin, [](double x) { return std::sin(x); }, Dom::Any, true, true),
    UOP(cos, [](double x) { return std::cos(x); }, Dom::Any, true, true),
    UOP(tanh, [](double x) { return std::tanh(x); }, Dom::Any, true, true),
    UOP(sigmoid, sigmoid_ref, Dom::Any, true, true),
    UOP(erf, [](double x) { return std::erf(x); }, Dom::Any, true, true),
    UOP(erfinv, erfinv_ref, Dom::Unit, true, false),
    UOP(floor, [](double x) { return std::floor(x); }, Dom::Any, false, false),
    UOP(ceil, [](double x) { return std::ceil(x); }, Dom::Any, false, false),
    UOP(round, [](double x) { return std::nearbyint(x); }, Dom::Any, false, false),
    UOP(relu, [](double x) { return x > 0 ? x : 0.0; }, Dom::Any, false, false),
    UOP(gelu, [](double x) { return x * 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); }, Dom::Any, true, true),
    UOP(gelu_approx,
        [](double x) {
          return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
        },
        Dom::Any, true, true),
    UOP(silu, [](double x) { return x * sigmoid_ref(x); }, Dom::Any, true, true),
};
#undef UOP

std::vector<double> map1(const std::vector<double>& x, URef f) {
  std::vector<double> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = f(x[i]);
  return r;
}

class UnaryOpTest : public ::testing::TestWithParam<UnaryCase> {
 protected:
  // Applies the op to x and checks dtype, shape and values.
  void check(const array& x, Dtype want_dtype, double tol) {
    const UnaryCase& c = GetParam();
    array y = c.fn(x);
    EXPECT_EQ(y.dtype(), want_dtype) << "input " << kiln::dtype_name(x.dtype());
    EXPECT_EQ(y.shape(), x.shape());
    EXPECT_TRUE(all_close(y, map1(to_double(x), c.ref), tol, tol)) << "input " << kiln::dtype_name(x.dtype());
  }
};

TEST_P(UnaryOpTest, FloatDtypes) {
  for (Dtype dt : kFloatDtypes) {
    for (const Shape& shape : {Shape{7, 13}, Shape{3, 5, 17}, Shape{1}, Shape{}}) {
      check(make(shape, dt, GetParam().dom), dt, tolerance(dt));
    }
  }
}

TEST_P(UnaryOpTest, IntegerInputs) {
  const UnaryCase& c = GetParam();
  if (!c.int_ok) GTEST_SKIP() << "not defined for integers";
  for (Dtype dt : {int8, int32, int64}) {
    array x = make({5, 11}, dt, c.dom);
    check(x, c.floating ? float32 : dt, c.floating ? tolerance(float32) : 0.0);
  }
}

TEST_P(UnaryOpTest, NonContiguousInputs) {
  const UnaryCase& c = GetParam();
  for (Dtype dt : {float32, bfloat16}) {
    double tol = tolerance(dt);
    check(kiln::transpose(make({13, 7}, dt, c.dom)), dt, tol);
    check(kiln::transpose(make({3, 5, 17}, dt, c.dom), {2, 0, 1}), dt, tol);
    check(kiln::slice(make({14, 27}, dt, c.dom), {1, 0}, {14, 27}, {2, 3}), dt, tol);
    check(kiln::slice(make({7, 26}, dt, c.dom), {6, 25}, {-8, -27}, {-1, -2}), dt, tol);
    check(kiln::flip(make({7, 13}, dt, c.dom), {0, 1}), dt, tol);
    check(kiln::broadcast_to(make({1, 13}, dt, c.dom), {7, 13}), dt, tol);
    check(kiln::broadcast_to(make({7, 1}, dt, c.dom), {7, 13}), dt, tol);
    check(kiln::broadcast_to(make({}, dt, c.dom), {4, 5}), dt, tol);
  }
}

TEST_P(UnaryOpTest, Large) {
  const UnaryCase& c = GetParam();
  check(make({(1 << 20) + 3}, float32, c.dom), float32, tolerance(float32));
  check(make({(1 << 16) + 1}, bfloat16, c.dom), bfloat16, tolerance(bfloat16));
  check(make({(1 << 16) + 5}, float16, c.dom), float16, tolerance(float16));
  check(make({1 << 16}, float64, c.dom), float64, tolerance(float64));
}

INSTANTIATE_TEST_SUITE_P(Elementwise, UnaryOpTest, ::testing::ValuesIn(kUnary),
                         [](const ::testing::TestParamInfo<UnaryCase>& info) { return info.param.name; });

// ---------------------------------------------------------------- binary table

using BFn = array (*)(const array&, const array&);
using BRef = double (*)(double, double);

enum class Kind { Arith, Divide, Compare, Logical };

struct BinaryCase {
  const char* name;
  BFn fn;
  BRef ref;
  Dom da, db;
  Kind kind;
  bool int_ok;
  bool unsigned_ok;
};

#define BOP(NAME, REF, DA, DB, KIND, INT_OK, UNS_OK)                                                     \
  BinaryCase{#NAME, [](const array& a, const array& b) { return kiln::NAME(a, b); }, REF, DA, DB, KIND, \
             INT_OK, UNS_OK}

const BinaryCase kBinary[] = {
    BOP(add, [](double a, double b) { return a + b; }, Dom::Any, Dom::Any, Kind::Arith, true, true),
    BOP(subtract, [](double a, double b) { return a - b; }, Dom::Any, Dom::Any, Kind::Arith, true, false),
    BOP(multiply, [](double a, double b) { return a * b; }, Dom::Any, Dom::Any, Kind::Arith, true, true),
    BOP(divide, [](double a, double b) { return a / b; }, Dom::Any, Dom::NonZero, Kind::Divide, true, true),
    BOP(power, [](double a, double b) { return std::pow(a, b); }, Dom::SmallBase, Dom::SmallExp, Kind::Arith,
        true, true),
    BOP(maximum, [](double a, double b) { return std::max(a, b); }, Dom::Quant, Dom::Quant, Kind::Arith, true,
        true),
    BOP(minimum, [](double a, double b) { return std::min(a, b); }, Dom::Quant, Dom::Quant, Kind::Arith, true,
        true),
    BOP(remainder, py_mod, Dom::Any, Dom::NonZero, Kind::Arith, true, true),
    BOP(equal, [](double a, double b) { return double(a == b); }, Dom::Quant, Dom::Quant, Kind::Compare, true,
        true),
    BOP(not_equal, [](double a, double b) { return double(a != b); }, Dom::Quant, Dom::Quant, Kind::Compare,
        true, true),
    BOP(less, [](double a, double b) { return double(a < b); }, Dom::Quant, Dom::Quant, Kind::Compare, true,
        true),
    BOP(less_equal, [](double a, double b) { return double(a <= b); }, Dom::Quant, Dom::Quant, Kind::Compare,
        true, true),
    BOP(greater, [](double a, double b) { return double(a > b); }, Dom::Quant, Dom::Quant, Kind::Compare, true,
        true),
    BOP(greater_equal, [](double a, double b) { return double(a >= b); }, Dom::Quant, Dom::Quant,
        Kind::Compare, true, true),
    BOP(logical_and, [](double a, double b) { return double(a != 0 && b != 0); }, Dom::Quant, Dom::Quant,
        Kind::Logical, true, true),
    BOP(logical_or, [](double a, double b) { return double(a != 0 || b != 0); }, Dom::Quant, Dom::Quant,
        Kind::Logical, true, true),
};
#undef BOP

Dtype binary_dtype(Kind k, Dtype a, Dtype b) {
  if (k == Kind::Compare || k == Kind::Logical) return bool_;
  Dtype t = kiln::promote_types(a, b);
  if (k == Kind::Divide && kiln::is_integral(t)) return float32;
  return t;
}

std::vector<double> map2(const std::vector<double>& a, const Shape& sa, const std::vector<double>& b,
                           const Shape& sb, BRef f) {
  Shape out = bshape(sa, sb);
  auto av = bcast(a, sa, out), bv = bcast(b, sb, out);
  std::vector<double> r(av.size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = f(av[i], bv[i]);
  return r;
}

class BinaryOpTest : public ::testing::TestWithParam<BinaryCase> {
 protected:
  void check(const array& a, const array& b, double tol) {
    const BinaryCase& c = GetParam();
    array y = c.fn(a, b);
    std::string what = std::string(kiln::dtype_name(a.dtype())) + " with " + kiln::dtype_name(b.dtype());
    EXPECT_EQ(y.dtype(), binary_dtype(c.kind, a.dtype(), b.dtype())) << what;
    EXPECT_EQ(y.shape(), bshape(a.shape(), b.shape())) << what;
    if (c.kind == Kind::Compare || c.kind == Kind::Logical) tol = 0;
    EXPECT_TRUE(all_close(y, map2(to_double(a), a.shape(), to_double(b), b.shape(), c.ref), tol, tol))
        << what;
  }
  array A(const Shape& s, Dtype dt) { return make(s, dt, GetParam().da); }
  array B(const Shape& s, Dtype dt) { return make(s, dt, GetParam().db); }
};

TEST_P(BinaryOpTest, FloatDtypes) {
  for (Dtype dt : kFloatDtypes) {
    for (const Shape& shape : {Shape{7, 13}, Shape{3, 5, 17}, Shape{}}) {
      check(A(shape, dt), B(shape, dt), tolerance(dt));
    }
  }
}

TEST_P(BinaryOpTest, IntegerDtypes) {
  const BinaryCase& c = GetParam();
  if (!c.int_ok) GTEST_SKIP();
  for (Dtype dt : kIntDtypes) {
    if (kiln::is_integral(dt) && !kiln::is_signed(dt) && !c.unsigned_ok) continue;
    check(A({7, 13}, dt), B({7, 13}, dt), c.kind == Kind::Divide ? tolerance(float32) : 0.0);
  }
  if (c.kind == Kind::Logical || c.kind == Kind::Compare) {
    check(A({7, 13}, bool_), B({7, 13}, bool_), 0.0);
  }
}

TEST_P(BinaryOpTest, MixedDtypes) {
  const BinaryCase& c = GetParam();
  check(A({4, 9}, float16), B({4, 9}, bfloat16), tolerance(float32));
  check(A({4, 9}, float32), B({4, 9}, float64), tolerance(float32));
  check(A({4, 9}, bfloat16), B({4, 9}, float32), tolerance(float32));
  if (c.int_ok) {
    check(A({4, 9}, int32), B({4, 9}, float16), tolerance(float16));
    check(A({4, 9}, float32), B({4, 9}, int8), tolerance(float32));
    double itol = c.kind == Kind::Divide ? tolerance(float32) : 0.0;
    check(A({4, 9}, uint8), B({4, 9}, int8), itol);
    check(A({4, 9}, int8), B({4, 9}, int64), itol);
    if (c.unsigned_ok) check(A({4, 9}, uint32), B({4, 9}, int32), itol);
  }
}

TEST_P(BinaryOpTest, Broadcasting) {
  const BinaryCase& c = GetParam();
  for (Dtype dt : {float32, bfloat16}) {
    double tol = tolerance(dt);
    check(A({3, 1, 5}, dt), B({4, 1}, dt), tol);
    check(A({4, 1}, dt), B({3, 1, 5}, dt), tol);
    check(A({7, 1}, dt), B({1, 13}, dt), tol);
    check(A({1}, dt), B({7, 13}, dt), tol);
    check(A({7, 13}, dt), B({13}, dt), tol);
    check(A({}, dt), B({3, 5, 17}, dt), tol);
    check(A({3, 5, 17}, dt), B({}, dt), tol);
    check(A({2, 1, 3, 1}, dt), B({1, 4, 1, 5}, dt), tol);
  }
  if (c.int_ok) check(A({3, 1, 5}, int32), B({4, 1}, int32), c.kind == Kind::Divide ? tolerance(float32) : 0.0);
}

TEST_P(BinaryOpTest, NonContiguousInputs) {
  for (Dtype dt : {float32, float16}) {
    double tol = tolerance(dt);
    array t = kiln::transpose(A({13, 7}, dt));
    array s = kiln::slice(B({14, 27}, dt), {0, 1}, {14, 27}, {2, 2});
    array f = kiln::flip(B({7, 13}, dt), {0, 1});
    array f1 = kiln::flip(A({7, 13}, dt), {1});
    array row = kiln::broadcast_to(B({1, 13}, dt), {7, 13});
    array col = kiln::broadcast_to(A({7, 1}, dt), {7, 13});
    check(t, s, tol);
    check(s, t, tol);
    check(f1, f, tol);
    check(col, row, tol);
    check(t, row, tol);
    check(col, f, tol);
    check(A({7, 13}, dt), kiln::slice(B({7, 39}, dt), {0, 38}, {7, -40}, {1, -3}), tol);
    // A non-contiguous view that also broadcasts.
    check(kiln::transpose(A({5, 3}, dt)), B({4, 1, 1}, dt), tol);
  }
}

TEST_P(BinaryOpTest, Large) {
  check(A({(1 << 20) + 3}, float32), B({(1 << 20) + 3}, float32), tolerance(float32));
  check(A({(1 << 16) + 1}, bfloat16), B({(1 << 16) + 1}, bfloat16), tolerance(bfloat16));
  check(A({(1 << 16) + 5}, float16), B({(1 << 16) + 5}, float16), tolerance(float16));
  check(A({256, 1023}, float32), B({1023}, float32), tolerance(float32));
  check(A({1 << 16}, float64), B({1 << 16}, float64), tolerance(float64));
  if (GetParam().int_ok) {
    check(A({(1 << 16) + 3}, int32), B({(1 << 16) + 3}, int32), GetParam().kind == Kind::Divide ? 2e-5 : 0.0);
  }
}

// The same with every output streamed past the caches (stream_store.h;
// by default only outputs larger than the last-level cache are): odd
// lengths leave unaligned heads and tails, the [256, 1023] case streams rows.
TEST_P(BinaryOpTest, LargeStreamed) {
  kiln::cpu::set_streaming_threshold(0);
  check(A({(1 << 20) + 3}, float32), B({(1 << 20) + 3}, float32), tolerance(float32));
  check(A({(1 << 16) + 1}, bfloat16), B({(1 << 16) + 1}, bfloat16), tolerance(bfloat16));
  check(A({256, 1023}, float32), B({1023}, float32), tolerance(float32));
  check(A({1}, float32), B({(1 << 16) + 7}, float32), tolerance(float32));
  if (GetParam().int_ok) check(A({(1 << 16) + 3}, int32), B({(1 << 16) + 3}, int32), GetParam().kind == Kind::Divide ? 2e-5 : 0.0);
  kiln::cpu::set_streaming_threshold(SIZE_MAX);
}

TEST(ElementwiseTest, StreamedCopyKeepsEveryElement) {
  kiln::cpu::set_streaming_threshold(0);
  array base = random_array({(1 << 18) + 11});
  for (int off : {0, 1, 5}) {
    array x = slice(base, {off}, {(1 << 18) + off});  // unaligned starts
    EXPECT_TRUE(array_equal(copy(x), x).item<bool>()) << off;
  }
  kiln::cpu::set_streaming_threshold(SIZE_MAX);
}

INSTANTIATE_TEST_SUITE_P(Elementwise, BinaryOpTest, ::testing::ValuesIn(kBinary),
                         [](const ::testing::TestParamInfo<BinaryCase>& info) { return info.param.name; });

// ---------------------------------------------------------------- specific cases

TEST(ElementwiseTest, RoundHalfToEven) {
  std::vector<double> v = {-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 4.5, 2.4375, -2.5625, 0.25, 1023.5};
  for (Dtype dt : kFloatDtypes) {
    array x = astype(array(v, {static_cast<int>(v.size())}), dt);
    std::vector<double> xv = to_double(x);
    std::vector<double> want(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) want[i] = std::nearbyint(xv[i]);
    EXPECT_TRUE(all_close(kiln::round(x), want, 0.0)) << kiln::dtype_name(dt);
  }
  EXPECT_TRUE(all_close(kiln::round(array({-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f})), {-2, -2, -0, 0, 2, 2}, 0.0));
  // Large magnitudes are already integers.
  EXPECT_TRUE(all_close(kiln::round(array({8388609.0f, -16777216.0f})), {8388609.0, -16777216.0}, 0.0));
}

TEST(ElementwiseTest, FloorCeilNegativeAndIntegral) {
  array x({-2.5f, -2.0f, -0.25f, 0.25f, 2.0f, 2.5f});
  EXPECT_TRUE(all_close(kiln::floor(x), {-3, -2, -1, 0, 2, 2}, 0.0));
  EXPECT_TRUE(all_close(kiln::ceil(x), {-2, -2, -0.0, 1, 2, 3}, 0.0));
}

TEST(ElementwiseTest, Expm1Log1pSmallInputsAreAccurate) {
  std::vector<double> v = {1e-3, -1e-3, 1e-5, -1e-5, 3e-7, -3e-7, 1e-10};
  for (Dtype dt : {float32, float64}) {
    array x = astype(array(v, {static_cast<int>(v.size())}), dt);
    std::vector<double> xv = to_double(x);
    EXPECT_TRUE(all_close(kiln::expm1(x), map1(xv, [](double t) { return std::expm1(t); }), tolerance(dt)))
        << kiln::dtype_name(dt);
    EXPECT_TRUE(all_close(kiln::log1p(x), map1(xv, [](double t) { return std::log1p(t); }), tolerance(dt)))
        << kiln::dtype_name(dt);
  }
}

TEST(ElementwiseTest, SpecialValuesAndSaturation) {
  const double inf = std::numeric_limits<double>::infinity();
  for (Dtype dt : {float16, float32, float64}) {
    SCOPED_TRACE(kiln::dtype_name(dt));
    array big = astype(array({-60.0f, -20.0f, 20.0f, 60.0f}), dt);
    EXPECT_TRUE(all_close(kiln::tanh(big), {-1, -1, 1, 1}, tolerance(dt)));
    // sigmoid(-60) ~ 9e-27 underflows in float16 only.
    EXPECT_TRUE(all_close(kiln::sigmoid(big), map1(to_double(big), sigmoid_ref), tolerance(dt),
                          dt == float16 ? 1e-7 : 1e-30));
    EXPECT_TRUE(all_close(kiln::silu(big), {0, -20 * sigmoid_ref(-20), 20, 60}, tolerance(dt), 1e-6));
    EXPECT_TRUE(all_close(kiln::gelu(big), {0, 0, 20, 60}, tolerance(dt), 1e-6));
    EXPECT_TRUE(all_close(kiln::gelu_approx(big), {0, 0, 20, 60}, tolerance(dt), 1e-6));
    EXPECT_TRUE(all_close(kiln::erf(big), {-1, -1, 1, 1}, tolerance(dt)));
    array edge = astype(array({0.0f, -1.0f, 1.0f}), dt);
    EXPECT_TRUE(all_close(kiln::log(edge), {-inf, NAN, 0}, tolerance(dt), tolerance(dt)));
    EXPECT_TRUE(all_close(kiln::log1p(edge), {0, -inf, std::log(2.0)}, tolerance(dt), tolerance(dt)));
    EXPECT_TRUE(all_close(kiln::erfinv(edge), {0, -inf, inf}, tolerance(dt), tolerance(dt)));
    EXPECT_TRUE(all_close(kiln::sqrt(edge), {0, NAN, 1}, tolerance(dt)));
    EXPECT_TRUE(all_close(kiln::rsqrt(edge), {inf, NAN, 1}, tolerance(dt)));
    array infs = astype(array({-INFINITY, INFINITY}), dt);
    EXPECT_TRUE(all_close(kiln::exp(infs), {0, inf}, 0.0));
    EXPECT_TRUE(all_close(kiln::expm1(infs), {-1, inf}, 0.0));
    EXPECT_TRUE(all_close(kiln::tanh(infs), {-1, 1}, tolerance(dt)));
    EXPECT_TRUE(all_close(kiln::sigmoid(infs), {0, 1}, tolerance(dt)));
    EXPECT_TRUE(all_close(kiln::relu(infs), {0, inf}, 0.0));
    EXPECT_TRUE(all_close(kiln::abs(infs), {inf, inf}, 0.0));
    EXPECT_TRUE(all_close(kiln::sign(astype(array({-0.0f, 0.0f, -3.0f}), dt)), {0, 0, -1}, 0.0));
    array n = astype(array({NAN}), dt);
    for (auto fn : {+[](const array& a) { return kiln::exp(a); }, +[](const array& a) { return kiln::tanh(a); },
                    +[](const array& a) { return kiln::sigmoid(a); }, +[](const array& a) { return kiln::abs(a); },
                    +[](const array& a) { return kiln::sqrt(a); }, +[](const array& a) { return kiln::sin(a); }}) {
      EXPECT_TRUE(std::isnan(to_double(fn(n))[0]));
    }
  }
  // exp overflows to inf in float32 but not in float64.
  EXPECT_TRUE(all_close(kiln::exp(array({100.0f})), {inf}, 0.0));
  EXPECT_TRUE(all_close(kiln::exp(array({100.0})), {std::exp(100.0)}, 1e-12));
}

TEST(ElementwiseTest, IntegerAbsNegativeSquareKeepDtype) {
  array x(std::vector<int32_t>{-7, 0, 5, -2147483647, 46340}, {5});
  EXPECT_TRUE(all_close(kiln::abs(x), {7, 0, 5, 2147483647, 46340}, 0.0));
  EXPECT_TRUE(all_close(kiln::negative(x), {7, 0, -5, 2147483647, -46340}, 0.0));
  EXPECT_TRUE(all_close(kiln::sign(x), {-1, 0, 1, -1, 1}, 0.0));
  EXPECT_TRUE(all_close(kiln::square(slice(x, {0}, {3})), {49, 0, 25}, 0.0));
  EXPECT_EQ(kiln::square(x).dtype(), int32);
  array u = astype(array({0, 3, 200}), uint8);
  EXPECT_EQ(kiln::abs(u).dtype(), uint8);
  EXPECT_TRUE(all_close(kiln::abs(u), {0, 3, 200}, 0.0));
  EXPECT_TRUE(all_close(kiln::sign(u), {0, 1, 1}, 0.0));
  array big(std::vector<int64_t>{-(int64_t{1} << 40), int64_t{3000000000}}, {2});
  EXPECT_EQ(kiln::abs(big).dtype(), int64);
  EXPECT_TRUE(all_close(kiln::abs(big), {std::ldexp(1.0, 40), 3e9}, 0.0));
}

TEST(ElementwiseTest, IntegerFloatingOpsGiveFloat32) {
  for (Dtype dt : {bool_, uint8, uint32, int8, int32, int64}) {
    array x = astype(array({1, 0, 1}), dt);
    EXPECT_EQ(kiln::exp(x).dtype(), float32) << kiln::dtype_name(dt);
    EXPECT_EQ(kiln::sin(x).dtype(), float32) << kiln::dtype_name(dt);
    EXPECT_EQ(kiln::sigmoid(x).dtype(), float32) << kiln::dtype_name(dt);
    EXPECT_TRUE(all_close(kiln::exp(x), {std::exp(1.0), 1.0, std::exp(1.0)}, 2e-5)) << kiln::dtype_name(dt);
  }
  array big(std::vector<int64_t>{int64_t{1} << 40}, {1});
  EXPECT_TRUE(all_close(kiln::sqrt(big), {std::ldexp(1.0, 20)}, 2e-5));
}

TEST(ElementwiseTest, RemainderHasSignOfDivisor) {
  array a({7, -7, 7, -7, 6, -6, 0, 1});
  array b({3, 3, -3, -3, 3, -3, 5, -5});
  std::vector<double> want = {1, 2, -2, -1, 0, 0, 0, -4};
  for (Dtype dt : {int8, int32, int64}) {
    array r = kiln::remainder(astype(a, dt), astype(b, dt));
    EXPECT_EQ(r.dtype(), dt);
    EXPECT_TRUE(all_close(r, want, 0.0)) << kiln::dtype_name(dt);
    EXPECT_TRUE(all_close(astype(a, dt) % astype(b, dt), want, 0.0)) << kiln::dtype_name(dt);
  }
  for (Dtype dt : kFloatDtypes) {
    array fa = astype(array({5.5f, -5.5f, 5.5f, -5.5f, 0.75f}), dt);
    array fb = astype(array({2.0f, 2.0f, -2.0f, -2.0f, -0.5f}), dt);
    EXPECT_TRUE(all_close(kiln::remainder(fa, fb), {1.5, 0.5, -0.5, -1.5, -0.25}, 0.0)) << kiln::dtype_name(dt);
  }
  array u = kiln::remainder(astype(array({7, 200, 9}), uint8), astype(array({3, 7, 10}), uint8));
  EXPECT_TRUE(all_close(u, {1, 4, 9}, 0.0));
  // Weak scalar form.
  EXPECT_TRUE(all_close(array({-7, 7}) % 3, {2, 1}, 0.0));
  EXPECT_TRUE(all_close(array({-7, 7}) % -3, {-1, -2}, 0.0));
}

TEST(ElementwiseTest, IntegerDivideGivesFloat32) {
  array a({7, -7, 1, 0});
  array b({2, 2, 3, 5});
  array q = kiln::divide(a, b);
  EXPECT_EQ(q.dtype(), float32);
  EXPECT_TRUE(all_close(q, {3.5, -3.5, 1.0 / 3.0, 0}, 2e-7));
  EXPECT_EQ((a / b).dtype(), float32);
  EXPECT_EQ((a / 2).dtype(), float32);
  EXPECT_TRUE(all_close(a / 2, {3.5, -3.5, 0.5, 0}, 0.0));
  EXPECT_EQ(kiln::divide(astype(a, int64), astype(b, uint8)).dtype(), float32);
  EXPECT_EQ(kiln::divide(astype(a, int8), astype(b, float16)).dtype(), float16);
}

TEST(ElementwiseTest, IntegerPowerIsExact) {
  array a(std::vector<int64_t>{3, -2, 10, 7, 2}, {5});
  array b(std::vector<int64_t>{4, 3, 15, 0, 62}, {5});
  array p = kiln::power(a, b);
  EXPECT_EQ(p.dtype(), int64);
  EXPECT_TRUE(all_close(p, {81, -8, 1e15, 1, std::ldexp(1.0, 62)}, 0.0));
}

TEST(ElementwiseTest, LogicalNot) {
  array b({true, false, true});
  array r = kiln::logical_not(b);
  EXPECT_EQ(r.dtype(), bool_);
  EXPECT_TRUE(all_close(r, {0, 1, 0}, 0.0));
  EXPECT_TRUE(all_close(!b, {0, 1, 0}, 0.0));
  for (Dtype dt : {uint8, int32, float16, bfloat16, float32, float64}) {
    array x = make({5, 7}, dt, Dom::Quant);
    std::vector<double> want = map1(to_double(x), [](double t) { return double(t == 0); });
    EXPECT_EQ(kiln::logical_not(x).dtype(), bool_);
    EXPECT_TRUE(all_close(kiln::logical_not(x), want, 0.0)) << kiln::dtype_name(dt);
    EXPECT_TRUE(all_close(!kiln::transpose(x), to_double(kiln::transpose(kiln::logical_not(x))), 0.0));
  }
  EXPECT_TRUE(all_close(kiln::logical_not(array({NAN, 0.0f, -0.0f})), {0, 1, 1}, 0.0));
}

TEST(ElementwiseTest, Where) {
  array cond = make({3, 1, 5}, bool_);
  array x = make({4, 1}, float32);
  array y = make({}, float32);
  array w = kiln::where(cond, x, y);
  EXPECT_EQ(w.shape(), (Shape{3, 4, 5}));
  EXPECT_EQ(w.dtype(), float32);
  Shape out = {3, 4, 5};
  auto cv = bcast(to_double(cond), cond.shape(), out);
  auto xv = bcast(to_double(x), x.shape(), out);
  auto yv = bcast(to_double(y), y.shape(), out);
  std::vector<double> want(cv.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = cv[i] != 0 ? xv[i] : yv[i];
  EXPECT_TRUE(all_close(w, want, 0.0));

  // Promotion of x and y; a non-bool condition is truthiness.
  array c2 = make({6, 7}, int32, Dom::Quant);
  array h = make({6, 7}, float16);
  array g = kiln::transpose(make({7, 6}, int8));
  array w2 = kiln::where(c2, h, g);
  EXPECT_EQ(w2.dtype(), float16);
  auto c2v = to_double(c2), hv = to_double(h), gv = to_double(g);
  std::vector<double> want2(c2v.size());
  for (size_t i = 0; i < want2.size(); ++i) want2[i] = c2v[i] != 0 ? hv[i] : gv[i];
  EXPECT_TRUE(all_close(w2, want2, 0.0));

  // Large, to cover the multi-threaded path.
  array cl = make({1 << 20}, bool_);
  array xl = make({1 << 20}, float32);
  array yl = make({1 << 20}, float32);
  auto clv = to_double(cl), xlv = to_double(xl), ylv = to_double(yl);
  std::vector<double> wl(clv.size());
  for (size_t i = 0; i < wl.size(); ++i) wl[i] = clv[i] != 0 ? xlv[i] : ylv[i];
  EXPECT_TRUE(all_close(kiln::where(cl, xl, yl), wl, 0.0));

  EXPECT_TRUE(throws_error([&] { kiln::where(make({3}, bool_), make({4}, float32), y); }, {"where"}));
}

TEST(ElementwiseTest, Clip) {
  for (Dtype dt : {float32, bfloat16, int32}) {
    SCOPED_TRACE(kiln::dtype_name(dt));
    array x = make({7, 13}, dt);
    auto xv = to_double(x);
    array lo = array(-0.5, dt), hi = array(1.0, dt);
    double l = to_double(lo)[0], h = to_double(hi)[0];
    array both = kiln::clip(x, lo, hi);
    EXPECT_EQ(both.dtype(), dt);
    std::vector<double> wb(xv.size()), wl(xv.size()), wh(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      wb[i] = std::min(std::max(xv[i], l), h);
      wl[i] = std::max(xv[i], l);
      wh[i] = std::min(xv[i], h);
    }
    EXPECT_TRUE(all_close(both, wb, 0.0));
    EXPECT_TRUE(all_close(kiln::clip(x, lo, std::nullopt), wl, 0.0));
    EXPECT_TRUE(all_close(kiln::clip(x, std::nullopt, hi), wh, 0.0));
  }
  // Array bounds broadcast.
  array x = make({4, 6}, float32);
  array lo = make({6}, float32, Dom::Any) - 1.0f;
  array hi = lo + 1.5f;
  auto xv = to_double(x), lv = bcast(to_double(lo), {6}, {4, 6}), hv = bcast(to_double(hi), {6}, {4, 6});
  std::vector<double> want(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) want[i] = std::min(std::max(xv[i], lv[i]), hv[i]);
  EXPECT_TRUE(all_close(kiln::clip(x, lo, hi), want, 0.0));
}

TEST(ElementwiseTest, Operators) {
  array a = make({7, 13}, float32, Dom::Quant);
  array b = make({7, 13}, float32, Dom::Quant);
  array nz = make({7, 13}, float32, Dom::NonZero);
  auto av = to_double(a), bv = to_double(b), nv = to_double(nz);
  auto ref = [&](const std::vector<double>& x, const std::vector<double>& y, BRef f) {
    return map2(x, {7, 13}, y, {7, 13}, f);
  };
  const double tol = tolerance(float32);
  EXPECT_TRUE(all_close(a + b, ref(av, bv, [](double x, double y) { return x + y; }), tol));
  EXPECT_TRUE(all_close(a - b, ref(av, bv, [](double x, double y) { return x - y; }), tol));
  EXPECT_TRUE(all_close(a * b, ref(av, bv, [](double x, double y) { return x * y; }), tol));
  EXPECT_TRUE(all_close(a / nz, ref(av, nv, [](double x, double y) { return x / y; }), tol));
  EXPECT_TRUE(all_close(a % nz, ref(av, nv, py_mod), tol, tol));
  EXPECT_TRUE(all_close(a == b, ref(av, bv, [](double x, double y) { return double(x == y); }), 0.0));
  EXPECT_TRUE(all_close(a != b, ref(av, bv, [](double x, double y) { return double(x != y); }), 0.0));
  EXPECT_TRUE(all_close(a < b, ref(av, bv, [](double x, double y) { return double(x < y); }), 0.0));
  EXPECT_TRUE(all_close(a <= b, ref(av, bv, [](double x, double y) { return double(x <= y); }), 0.0));
  EXPECT_TRUE(all_close(a > b, ref(av, bv, [](double x, double y) { return double(x > y); }), 0.0));
  EXPECT_TRUE(all_close(a >= b, ref(av, bv, [](double x, double y) { return double(x >= y); }), 0.0));
  EXPECT_TRUE(all_close(a && b, ref(av, bv, [](double x, double y) { return double(x != 0 && y != 0); }), 0.0));
  EXPECT_TRUE(all_close(a || b, ref(av, bv, [](double x, double y) { return double(x != 0 || y != 0); }), 0.0));
  EXPECT_TRUE(all_close(-a, map1(av, [](double x) { return -x; }), 0.0));
  EXPECT_TRUE(all_close(!a, map1(av, [](double x) { return double(x == 0); }), 0.0));
  EXPECT_EQ((a == b).dtype(), bool_);
  EXPECT_EQ((a && b).dtype(), bool_);
  EXPECT_EQ((!a).dtype(), bool_);
  // Scalar forms, both sides.
  EXPECT_TRUE(all_close(a + 1.5f, map1(av, [](double x) { return x + 1.5; }), tol));
  EXPECT_TRUE(all_close(1.5f - a, map1(av, [](double x) { return 1.5 - x; }), tol));
  EXPECT_TRUE(all_close(a - 1.5f, map1(av, [](double x) { return x - 1.5; }), tol));
  EXPECT_TRUE(all_close(3 * a, map1(av, [](double x) { return 3 * x; }), tol));
  EXPECT_TRUE(all_close(2.0 / nz, map1(nv, [](double x) { return 2.0 / x; }), tol));
  EXPECT_TRUE(all_close(nz / 4, map1(nv, [](double x) { return x / 4; }), tol));
  EXPECT_TRUE(all_close(a % 0.75, map1(av, [](double x) { return py_mod(x, 0.75); }), tol, tol));
  EXPECT_TRUE(all_close(1 % nz, map1(nv, [](double x) { return py_mod(1, x); }), tol, tol));
  EXPECT_TRUE(all_close(a < 0.5, map1(av, [](double x) { return double(x < 0.5); }), 0.0));
  EXPECT_TRUE(all_close(0.5 < a, map1(av, [](double x) { return double(0.5 < x); }), 0.0));
  EXPECT_TRUE(all_close(a >= 0, map1(av, [](double x) { return double(x >= 0); }), 0.0));
  EXPECT_TRUE(all_close(a != 0.25f, map1(av, [](double x) { return double(x != 0.25); }), 0.0));
  // Operators match the named ops on 0-d arrays too.
  EXPECT_DOUBLE_EQ((array(3.0f) * array(4.0f)).item<float>(), 12.0f);
  EXPECT_EQ((array(7) % array(-2)).item<int>(), -1);
}

TEST(ElementwiseTest, ScalarArrays) {
  array s(2.5f);
  array x = make({3, 5, 17}, float32);
  auto xv = to_double(x);
  EXPECT_TRUE(all_close(kiln::multiply(s, x), map1(xv, [](double t) { return 2.5 * t; }), 2e-7));
  EXPECT_TRUE(all_close(kiln::subtract(x, s), map1(xv, [](double t) { return t - 2.5; }), 2e-7));
  array r = kiln::add(array(1.0), array(2.0f));
  EXPECT_EQ(r.ndim(), 0);
  EXPECT_EQ(r.dtype(), float64);
  EXPECT_EQ(r.item<double>(), 3.0);
  EXPECT_EQ(kiln::exp(array(0.0f)).item<float>(), 1.0f);
  EXPECT_EQ(kiln::exp(array(0.0f)).shape(), Shape{});
}

TEST(ElementwiseTest, ShapeErrorNamesOpShapesAndDtypes) {
  array a = kiln::zeros({3, 4});
  array b = kiln::zeros({5});
  EXPECT_TRUE(throws_error([&] { kiln::add(a, b); }, {"add", "(3,4)", "(5)", "float32"}));
  EXPECT_TRUE(throws_error([&] { kiln::multiply(a, kiln::zeros({5}, int32)); },
                           {"multiply", "(3,4)", "(5)", "float32", "int32"}));
  EXPECT_TRUE(throws_error([&] { (void)(a + b); }, {"add", "(3,4)", "(5)"}));
  EXPECT_TRUE(throws_error([&] { kiln::less(kiln::zeros({2, 3}, bfloat16), kiln::zeros({3, 2}, bfloat16)); },
                           {"less", "(2,3)", "(3,2)", "bfloat16"}));
  EXPECT_TRUE(throws_error([&] { kiln::add(kiln::zeros({2, 3, 4}), kiln::zeros({2, 4})); }, {"add", "(2,3,4)", "(2,4)"}));
}

TEST(ElementwiseTest, OpsAreLazy) {
  array a = make({64, 64}, float32);
  array b = make({64, 64}, float32);
  array c = kiln::exp(a) * b + 1.0f;
  array d = kiln::less(c, b);
  // Shape and dtype are known without evaluating.
  EXPECT_EQ(c.shape(), (Shape{64, 64}));
  EXPECT_EQ(c.dtype(), float32);
  EXPECT_EQ(d.dtype(), bool_);
  EXPECT_FALSE(c.is_evaluated());
  EXPECT_FALSE(d.is_evaluated());
  c.eval();
  EXPECT_TRUE(c.is_evaluated());
  EXPECT_FALSE(d.is_evaluated());
  kiln::eval(d);
  EXPECT_TRUE(d.is_evaluated());
  array e = kiln::sigmoid(a);
  EXPECT_FALSE(e.is_evaluated());
  (void)e.data<float>();
  EXPECT_TRUE(e.is_evaluated());
  array f = kiln::sum(kiln::tanh(a));
  EXPECT_FALSE(f.is_evaluated());
  (void)f.item<float>();
  EXPECT_TRUE(f.is_evaluated());
}

template <typename T>
std::vector<T> raw(const array& a) {
  array c = kiln::contiguous(a);
  c.eval();
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.size());
}

TEST(ElementwiseTest, IntegerPrecisionAndPromotion) {
  // int64 math is exact beyond 2^53 (not done in double).
  const int64_t big = (int64_t{1} << 62) + 1;
  array a(std::vector<int64_t>{big, -big, big}, {3});
  array b(std::vector<int64_t>{1, -2, 5 - big}, {3});
  array c(std::vector<int64_t>{big - 1, -big, big}, {3});
  EXPECT_EQ(raw<int64_t>(a + b), (std::vector<int64_t>{big + 1, -big - 2, 5}));
  EXPECT_EQ(raw<int64_t>(a - b), (std::vector<int64_t>{big - 1, -big + 2, big + (big - 5)}));
  EXPECT_EQ(raw<int64_t>(kiln::maximum(a, b)), (std::vector<int64_t>{big, -2, big}));
  EXPECT_EQ(raw<bool>(kiln::equal(a, c)), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(raw<bool>(kiln::greater(a, c)), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(raw<bool>(kiln::greater(a, b)), (std::vector<bool>{true, false, true}));
  const int64_t m = 1000000007;
  EXPECT_EQ(raw<int64_t>(kiln::remainder(a, array(std::vector<int64_t>{m}, {1}))),
            (std::vector<int64_t>{big % m, m - big % m, big % m}));
  // uint32 values above 2^31 compare and add as unsigned.
  array u(std::vector<uint32_t>{4000000000u, 1u, 3000000000u}, {3});
  array v(std::vector<uint32_t>{1u, 4000000000u, 3000000000u}, {3});
  EXPECT_EQ(raw<bool>(u > v), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(raw<bool>(u <= v), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(raw<uint32_t>(kiln::maximum(u, v)), (std::vector<uint32_t>{4000000000u, 4000000000u, 3000000000u}));
  EXPECT_EQ(raw<uint32_t>(u + 5), (std::vector<uint32_t>{4000000005u, 6u, 3000000005u}));
  EXPECT_EQ(raw<uint32_t>(kiln::remainder(u, array(std::vector<uint32_t>{3000000001u}, {1}))),
            (std::vector<uint32_t>{999999999u, 1u, 3000000000u}));
  // Mixed signed/unsigned promote before computing: no wrap in the narrow type.
  array u8 = astype(array({200, 250, 0}), uint8);
  array i8 = astype(array({-100, 2, -128}), int8);
  EXPECT_EQ((u8 + i8).dtype(), int16);  // MLX's table
  EXPECT_EQ(raw<int16_t>(u8 + i8), (std::vector<int16_t>{100, 252, -128}));
  EXPECT_EQ(raw<int16_t>(u8 * i8), (std::vector<int16_t>{-20000, 500, 0}));
  EXPECT_EQ(raw<int16_t>(i8 - u8), (std::vector<int16_t>{-300, -248, -128}));
  EXPECT_EQ(raw<bool>(i8 < u8), (std::vector<bool>{true, true, true}));
  array i32(std::vector<int32_t>{-5, 7, -2147483647}, {3});
  array u32(std::vector<uint32_t>{4000000000u, 3u, 4294967295u}, {3});
  EXPECT_EQ((u32 - i32).dtype(), int64);
  EXPECT_EQ(raw<int64_t>(u32 - i32), (std::vector<int64_t>{4000000005LL, -4, 4294967295LL + 2147483647LL}));
  EXPECT_EQ(raw<bool>(i32 < u32), (std::vector<bool>{true, false, true}));
  // float64 keeps its precision.
  array d(std::vector<double>{9007199254740992.0, 1.0 + 1e-15}, {2});
  volatile double small = 1.0 + 1e-15;
  EXPECT_EQ(raw<double>(d + 2.0), (std::vector<double>{9007199254740994.0, small + 2.0}));
}

TEST(ElementwiseTest, InputsAreNotClobbered) {
  // An op may reuse a dying input's buffer, but never one still referenced.
  for (Dtype dt : {float32, bfloat16, float64}) {
    SCOPED_TRACE(kiln::dtype_name(dt));
    array a = make({257, 129}, dt);
    std::vector<double> before = to_double(a);
    array b = kiln::exp(a);
    array c = a + a;
    kiln::eval(b, c);
    EXPECT_TRUE(all_close(a, before, 0.0));
    EXPECT_TRUE(all_close(b, map1(before, [](double x) { return std::exp(x); }), tolerance(dt), tolerance(dt)));
    EXPECT_TRUE(all_close(c, map1(before, [](double x) { return 2 * x; }), tolerance(dt)));
    // A chain of temporaries.
    array y = a;
    for (int i = 0; i < 6; ++i) y = kiln::negative(y * 0.5f + 1.0f);
    std::vector<double> want = before;
    for (int i = 0; i < 6; ++i) {
      want = map1(want, [](double x) { return -(x * 0.5 + 1.0); });
      // Each step rounds to dt as the kernels do.
      std::vector<double> r = to_double(astype(array(want, {257, 129}, float64), dt));
      want = r;
    }
    EXPECT_TRUE(all_close(y, want, 4 * tolerance(dt), 4 * tolerance(dt)));
    EXPECT_TRUE(all_close(a, before, 0.0));
  }
}

TEST(ElementwiseTest, SharedSubgraphs) {
  array a = make({33, 65}, float32);
  auto av = to_double(a);
  array c = kiln::exp(a);
  array d = c + c;
  array e = c * 3.0f - d;  // = c
  array f = kiln::where(c > 1.0f, d, e);
  kiln::eval(d, e, f);
  auto cv = map1(av, [](double x) { return std::exp(x); });
  const double tol = 4 * tolerance(float32);
  EXPECT_TRUE(all_close(d, map1(cv, [](double x) { return 2 * x; }), tol));
  EXPECT_TRUE(all_close(e, cv, tol, tol));
  EXPECT_TRUE(all_close(f, map1(cv, [](double x) { return x > 1 ? 2 * x : x; }), tol, tol));
  EXPECT_TRUE(all_close(c, cv, tol));
  // async_eval then read.
  array g = kiln::sigmoid(a) * 2.0f;
  kiln::async_eval(g);
  EXPECT_TRUE(all_close(g, map1(av, [](double x) { return 2 * sigmoid_ref(x); }), tol, tol));
}

}  // namespace
