// Dtypes: promotion, sizes, names, the 16-bit float storage types, astype
// between every pair of dtypes and weakly typed C++ scalars.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/compiled.h"
#include "kiln/compile.h"
#include "kiln/utils.h"
#include "test_util.h"

namespace {

using namespace kiln;        // NOLINT
using namespace kiln::test;  // NOLINT
using kiln::array;

// In the order of MLX's promotion table (mlx/dtype.cpp).
const std::vector<Dtype> kAllDtypes = {bool_, uint8,   uint16,  uint32,  uint64,  int8,    int16,
                                       int32, int64,   float16, float32, float64, bfloat16};

bool is_unsigned_int(Dtype t) { return t == uint8 || t == uint16 || t == uint32 || t == uint64; }

// Reads an array through its typed data pointer and strides (no astype), so
// that astype can be checked independently of itself.
template <typename T>
std::vector<double> read_impl(const array& a) {
  const T* p = a.data<T>();
  const Strides& st = a.strides();
  const Shape& sh = a.shape();
  std::vector<double> out(a.size());
  for (size_t i = 0; i < out.size(); ++i) {
    auto idx = unravel(static_cast<int64_t>(i), sh);
    int64_t off = 0;
    for (size_t d = 0; d < sh.size(); ++d) off += idx[d] * st[d];
    if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
      out[i] = static_cast<double>(static_cast<float>(p[off]));
    } else {
      out[i] = static_cast<double>(p[off]);
    }
  }
  return out;
}

std::vector<double> read_typed(const array& a) {
  a.eval();
  switch (a.dtype()) {
    case Dtype::bool_: return read_impl<bool>(a);
    case Dtype::uint8: return read_impl<uint8_t>(a);
    case Dtype::uint16: return read_impl<uint16_t>(a);
    case Dtype::uint32: return read_impl<uint32_t>(a);
    case Dtype::uint64: return read_impl<uint64_t>(a);
    case Dtype::int8: return read_impl<int8_t>(a);
    case Dtype::int16: return read_impl<int16_t>(a);
    case Dtype::int32: return read_impl<int32_t>(a);
    case Dtype::int64: return read_impl<int64_t>(a);
    case Dtype::float16: return read_impl<float16_t>(a);
    case Dtype::bfloat16: return read_impl<bfloat16_t>(a);
    case Dtype::float32: return read_impl<float>(a);
    case Dtype::float64: return read_impl<double>(a);
  }
  return {};
}

// |value| = mant * 2^exp2 rounded to nearest even on a binary format of p
// significant bits, normal exponents from emin (subnormals below) to emax
// (inf above), in exact integer arithmetic.
double round_on_integers(uint64_t mant, int exp2, bool negative, int p, int emin, int emax) {
  if (mant == 0) return negative ? -0.0 : 0.0;
  int lead = exp2 + 63 - __builtin_clzll(mant);  // floor(log2 |value|)
  int q = std::max(lead, emin) - (p - 1);         // exponent of the format's last digit there
  int shift = q - exp2;
  uint64_t r = mant;
  if (shift >= 64) {
    r = 0;  // below half of the smallest step
  } else if (shift > 0) {
    r = mant >> shift;
    uint64_t rem = mant & ((uint64_t{1} << shift) - 1), half = uint64_t{1} << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
  } else {
    q = exp2;  // exact
  }
  double out = std::ldexp(static_cast<double>(r), q);  // r has at most p + 1 bits: exact
  if (out >= std::ldexp(1.0, emax + 1)) out = INFINITY;
  return negative ? -out : out;
}

double round_on_integers(double v, int p, int emin, int emax) {
  if (std::isnan(v) || std::isinf(v)) return v;
  int e;
  double m = std::frexp(std::fabs(v), &e);
  return round_on_integers(static_cast<uint64_t>(std::ldexp(m, 53)), e - 53, std::signbit(v), p, emin, emax);
}
double round_on_integers(int64_t v, int p, int emin, int emax) {
  uint64_t mag = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  return round_on_integers(mag, 0, v < 0, p, emin, emax);
}
double f16_ref(double v) { return round_on_integers(v, 11, -14, 15); }
double bf16_ref(double v) { return round_on_integers(v, 8, -126, 127); }

// What casting the double v to dtype t gives (v in range of t).
double cast_ref(double v, Dtype t) {
  switch (t) {
    case Dtype::bool_: return v != 0.0 ? 1.0 : 0.0;
    case Dtype::uint8:
    case Dtype::uint16:
    case Dtype::uint32:
    case Dtype::uint64:
    case Dtype::int8:
    case Dtype::int16:
    case Dtype::int32:
    case Dtype::int64: return std::trunc(v);
    case Dtype::float16: return f16_ref(v);
    case Dtype::bfloat16: return bf16_ref(v);
    case Dtype::float32: return static_cast<float>(v);
    case Dtype::float64: return v;
  }
  return 0;
}

float bits_to_float(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
uint32_t float_to_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}

// ---------------------------------------------------------------- promotion

TEST(DtypeTest, PromotionTable) {
  const Dtype b = bool_, u8 = uint8, u16 = uint16, u32 = uint32, u64 = uint64, i8 = int8, i16 = int16, i32 = int32,
              i64 = int64, f16 = float16, f32 = float32, f64 = float64, bf = bfloat16;
  // MLX's table; rows and columns in the order of kAllDtypes.
  const Dtype table[13][13] = {
      /* bool    */ {b, u8, u16, u32, u64, i8, i16, i32, i64, f16, f32, f64, bf},
      /* uint8   */ {u8, u8, u16, u32, u64, i16, i16, i32, i64, f16, f32, f64, bf},
      /* uint16  */ {u16, u16, u16, u32, u64, i32, i32, i32, i64, f16, f32, f64, bf},
      /* uint32  */ {u32, u32, u32, u32, u64, i64, i64, i64, i64, f16, f32, f64, bf},
      /* uint64  */ {u64, u64, u64, u64, u64, f32, f32, f32, f32, f16, f32, f64, bf},
      /* int8    */ {i8, i16, i32, i64, f32, i8, i16, i32, i64, f16, f32, f64, bf},
      /* int16   */ {i16, i16, i32, i64, f32, i16, i16, i32, i64, f16, f32, f64, bf},
      /* int32   */ {i32, i32, i32, i64, f32, i32, i32, i32, i64, f16, f32, f64, bf},
      /* int64   */ {i64, i64, i64, i64, f32, i64, i64, i64, i64, f16, f32, f64, bf},
      /* float16 */ {f16, f16, f16, f16, f16, f16, f16, f16, f16, f16, f32, f64, f32},
      /* float32 */ {f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f64, f32},
      /* float64 */ {f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, f64},
      /* bf16    */ {bf, bf, bf, bf, bf, bf, bf, bf, bf, f32, f32, f64, bf},
  };
  for (int i = 0; i < 13; ++i) {
    for (int j = 0; j < 13; ++j) {
      Dtype a = kAllDtypes[i], c = kAllDtypes[j];
      EXPECT_EQ(promote_types(a, c), table[i][j])
          << dtype_name(a) << " + " << dtype_name(c) << " gave " << dtype_name(promote_types(a, c))
          << ", want " << dtype_name(table[i][j]);
      EXPECT_EQ(promote_types(a, c), promote_types(c, a));
    }
  }
}

TEST(DtypeTest, PromotionThroughBinaryOps) {
  // The result dtype of add follows promote_types for every pair.
  for (Dtype a : kAllDtypes) {
    for (Dtype c : kAllDtypes) {
      array x = zeros({2}, a);
      array y = zeros({2}, c);
      EXPECT_EQ(add(x, y).dtype(), promote_types(a, c)) << dtype_name(a) << " + " << dtype_name(c);
    }
  }
}

TEST(DtypeTest, SizeOfAndNames) {
  const size_t sizes[13] = {1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8, 2};
  const char* names[13] = {"bool",  "uint8", "uint16",  "uint32",  "uint64",  "int8",    "int16",
                           "int32", "int64", "float16", "float32", "float64", "bfloat16"};
  for (int i = 0; i < 13; ++i) {
    Dtype t = kAllDtypes[i];
    EXPECT_EQ(size_of(t), sizes[i]) << dtype_name(t);
    EXPECT_STREQ(dtype_name(t), names[i]);
  }
  // All names are distinct.
  for (int i = 0; i < 13; ++i)
    for (int j = i + 1; j < 13; ++j) EXPECT_STRNE(dtype_name(kAllDtypes[i]), dtype_name(kAllDtypes[j]));
}

TEST(DtypeTest, Categories) {
  for (Dtype t : kAllDtypes) {
    bool fp = t == float16 || t == bfloat16 || t == float32 || t == float64;
    EXPECT_EQ(is_floating_point(t), fp) << dtype_name(t);
    EXPECT_EQ(is_integral(t), !fp) << dtype_name(t);
  }
  EXPECT_TRUE(is_signed(int8));
  EXPECT_TRUE(is_signed(int32));
  EXPECT_TRUE(is_signed(int64));
  EXPECT_TRUE(is_signed(int16));
  EXPECT_FALSE(is_signed(uint8));
  EXPECT_FALSE(is_signed(uint16));
  EXPECT_FALSE(is_signed(uint32));
  EXPECT_FALSE(is_signed(uint64));
  EXPECT_EQ(dtype_of<int16_t>, int16);
  EXPECT_EQ(dtype_of<uint16_t>, uint16);
  EXPECT_EQ(dtype_of<uint64_t>, uint64);
  EXPECT_EQ(dtype_of<float16_t>, float16);
  EXPECT_EQ(dtype_of<bfloat16_t>, bfloat16);
  EXPECT_EQ(dtype_of<int64_t>, int64);
}

// ---------------------------------------------------------------- float16_t

double half_bits_value(uint16_t h) {
  int sign = (h & 0x8000) ? -1 : 1;
  int e = (h >> 10) & 0x1f;
  int m = h & 0x3ff;
  if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}

// Correctly rounded (nearest, ties to even) float -> half bits.
uint16_t half_ref(float f) {
  static const std::vector<double> pos = [] {
    std::vector<double> v;
    for (int h = 0; h <= 0x7bff; ++h) v.push_back(half_bits_value(static_cast<uint16_t>(h)));
    return v;
  }();
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a) || a >= 65520.0) return sign | 0x7c00;
  auto it = std::upper_bound(pos.begin(), pos.end(), a);  // first > a
  int hi = static_cast<int>(it - pos.begin());
  int lo = hi - 1;
  if (pos[lo] == a) return sign | lo;
  if (hi > 0x7bff) return sign | lo;  // cannot happen below 65520 except exact max
  double dlo = a - pos[lo], dhi = pos[hi] - a;
  int pick = dlo < dhi ? lo : (dhi < dlo ? hi : ((lo & 1) ? hi : lo));
  return sign | pick;
}

TEST(DtypeTest, Float16AllBitPatternsRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float16_t x;
    x.bits = static_cast<uint16_t>(h);
    float f = x;
    double want = half_bits_value(static_cast<uint16_t>(h));
    bool is_nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff);
    if (is_nan) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      uint16_t back = float16_t(f).bits;
      EXPECT_EQ(back & 0x7c00, 0x7c00) << std::hex << h;
      EXPECT_NE(back & 0x3ff, 0) << std::hex << h;
      EXPECT_EQ(back & 0x8000, h & 0x8000) << std::hex << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
    ASSERT_EQ(float16_t(f).bits, h) << std::hex << h;
  }
}

TEST(DtypeTest, Float16RoundingCases) {
  struct Case {
    float in;
    uint16_t bits;
  };
  const float ulp1 = std::ldexp(1.0f, -10);  // spacing at 1
  const Case cases[] = {
      {1.0f, 0x3c00},
      {1.0f + ulp1 / 2, 0x3c00},                          // tie -> even (down)
      {1.0f + 3 * ulp1 / 2, 0x3c02},                      // tie -> even (up)
      {1.0f + ulp1 / 2 + std::ldexp(1.0f, -20), 0x3c01},  // just above the tie
      {1.0f + ulp1 / 2 - std::ldexp(1.0f, -20), 0x3c00},  // just below the tie
      {-2.0f, 0xc000},
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {65504.0f, 0x7bff},
      {65519.0f, 0x7bff},
      {65520.0f, 0x7c00},  // tie between max and 2^16 -> inf
      {1e10f, 0x7c00},
      {-1e10f, 0xfc00},
      {INFINITY, 0x7c00},
      {-INFINITY, 0xfc00},
      // subnormals
      {std::ldexp(1.0f, -24), 0x0001},
      {-std::ldexp(1.0f, -24), 0x8001},
      {std::ldexp(1.0f, -25), 0x0000},                                // tie with 0 -> 0
      {std::ldexp(1.0f, -25) + std::ldexp(1.0f, -40), 0x0001},        // above the tie
      {std::ldexp(3.0f, -25), 0x0002},                                // 1.5 ulp -> 2
      {std::ldexp(5.0f, -25), 0x0002},                                // 2.5 ulp -> 2
      {std::ldexp(1.0f, -26), 0x0000},
      {std::ldexp(1.0f, -14), 0x0400},                                // smallest normal
      {std::ldexp(1.0f, -14) - std::ldexp(1.0f, -24), 0x03ff},        // largest subnormal
      {std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25), 0x0400},        // tie -> even (normal)
      {1e-30f, 0x0000},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(float16_t(c.in).bits, c.bits) << c.in;
    EXPECT_EQ(half_ref(c.in), c.bits) << "reference disagrees for " << c.in;
  }
  EXPECT_TRUE(std::isnan(static_cast<float>(float16_t(NAN))));
  EXPECT_TRUE(std::isnan(static_cast<float>(float16_t(-NAN))));
}

TEST(DtypeTest, Float16MatchesCorrectRoundingOnRandomFloats) {
  std::mt19937 gen(7);
  for (int i = 0; i < 200000; ++i) {
    // Exponents from 2^-30 to 2^17, random mantissa and sign.
    uint32_t e = 97 + gen() % 48;
    uint32_t x = (gen() & 0x80000000u) | (e << 23) | (gen() & 0x7fffffu);
    float f = bits_to_float(x);
    ASSERT_EQ(float16_t(f).bits, half_ref(f)) << f;
  }
}

// ---------------------------------------------------------------- bfloat16_t

uint16_t bf16_ref(float f) {
  uint32_t x = float_to_bits(f);
  uint32_t lo = x & 0xffff0000u;
  uint32_t hi = lo + 0x10000u;
  if ((x & 0xffffu) == 0) return static_cast<uint16_t>(x >> 16);
  double a = std::fabs(static_cast<double>(f));
  double alo = std::fabs(static_cast<double>(bits_to_float(lo)));
  // The next magnitude up may be inf (0x7f800000).
  double ahi = (hi & 0x7fffffffu) == 0x7f800000u ? std::ldexp(1.0, 128)
                                                   : std::fabs(static_cast<double>(bits_to_float(hi)));
  double dlo = a - alo, dhi = ahi - a;
  uint32_t pick = dlo < dhi ? lo : (dhi < dlo ? hi : (((lo >> 16) & 1) ? hi : lo));
  return static_cast<uint16_t>(pick >> 16);
}

TEST(DtypeTest, BFloat16AllBitPatternsRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    bfloat16_t x;
    x.bits = static_cast<uint16_t>(h);
    float f = x;
    ASSERT_EQ(float_to_bits(f), h << 16);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16_t(f)))) << std::hex << h;
      continue;
    }
    ASSERT_EQ(bfloat16_t(f).bits, h) << std::hex << h;
  }
}

TEST(DtypeTest, BFloat16RoundingCases) {
  const float ulp1 = std::ldexp(1.0f, -7);
  EXPECT_EQ(bfloat16_t(1.0f).bits, 0x3f80);
  EXPECT_EQ(bfloat16_t(1.0f + ulp1 / 2).bits, 0x3f80);  // tie -> even
  EXPECT_EQ(bfloat16_t(1.0f + 3 * ulp1 / 2).bits, 0x3f82);
  EXPECT_EQ(bfloat16_t(1.0f + ulp1 / 2 + std::ldexp(1.0f, -20)).bits, 0x3f81);
  EXPECT_EQ(bfloat16_t(-0.0f).bits, 0x8000);
  EXPECT_EQ(bfloat16_t(INFINITY).bits, 0x7f80);
  EXPECT_EQ(bfloat16_t(-INFINITY).bits, 0xff80);
  EXPECT_EQ(bfloat16_t(FLT_MAX).bits, 0x7f80);  // rounds up past the largest bfloat16
  EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16_t(NAN))));
  // A nan whose payload sits in the low half must stay nan.
  EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16_t(bits_to_float(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16_t(bits_to_float(0xff800001u)))));
  std::mt19937 gen(11);
  for (int i = 0; i < 200000; ++i) {
    uint32_t x = gen();
    float f = bits_to_float(x);
    if (std::isnan(f)) continue;
    ASSERT_EQ(bfloat16_t(f).bits, bf16_ref(f)) << std::hex << x;
  }
}

// ---------------------------------------------------------------- astype

TEST(DtypeTest, AstypeEveryPairOnRandomData) {
  const Shape shape = {37, 5};
  for (Dtype src : kAllDtypes) {
    for (Dtype dst : kAllDtypes) {
      SCOPED_TRACE(std::string(dtype_name(src)) + " -> " + dtype_name(dst));
      double lo = -120.0, hi = 120.0;
      if (is_unsigned_int(src) || is_unsigned_int(dst)) lo = 0.0;
      array x = random_array(shape, src, lo, hi);
      std::vector<double> xv = read_typed(x);
      array y = astype(x, dst);
      ASSERT_EQ(y.dtype(), dst);
      ASSERT_EQ(y.shape(), shape);
      std::vector<double> want(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) want[i] = cast_ref(xv[i], dst);
      EXPECT_TRUE(all_close(read_typed(y), want, 0.0));
      // The same through a transposed (non-contiguous) view.
      array xt = transpose(x);
      std::vector<double> xtv = read_typed(xt);
      std::vector<double> want_t(xtv.size());
      for (size_t i = 0; i < xtv.size(); ++i) want_t[i] = cast_ref(xtv[i], dst);
      EXPECT_TRUE(all_close(read_typed(astype(xt, dst)), want_t, 0.0));
    }
  }
}

TEST(DtypeTest, AstypeFloatToIntTruncatesTowardZero) {
  array x({-2.9f, -2.5f, -1.0f, -0.7f, 0.7f, 1.5f, 2.5f, 2.9f, 100.99f, -100.99f});
  std::vector<double> want = {-2, -2, -1, 0, 0, 1, 2, 2, 100, -100};
  for (Dtype src : {float16, bfloat16, float32, float64}) {
    array xs = astype(x, src);
    std::vector<double> xv = read_typed(xs);
    for (Dtype dst : {int8, int32, int64}) {
      std::vector<double> w(xv.size());
      for (size_t i = 0; i < w.size(); ++i) w[i] = std::trunc(xv[i]);
      EXPECT_TRUE(all_close(read_typed(astype(xs, dst)), w, 0.0)) << dtype_name(src) << "->" << dtype_name(dst);
    }
  }
  EXPECT_TRUE(all_close(read_typed(astype(astype(x, float32), int32)), want, 0.0));
  array u({0.3f, 1.7f, 199.9f, 255.5f});
  EXPECT_TRUE(all_close(read_typed(astype(u, uint8)), {0, 1, 199, 255}, 0.0));
}

TEST(DtypeTest, AstypeWideRange) {
  // float64 -> int32 / int64 near the limits.
  array d(std::vector<double>{-2147483648.0, 2147483647.9, -1e9 - 0.5, 4e12 + 0.75, -4e12 - 0.75}, {5});
  EXPECT_TRUE(all_close(read_typed(astype(slice(d, {0}, {3}), int32)), {-2147483648.0, 2147483647.0, -1e9}, 0.0));
  EXPECT_TRUE(all_close(read_typed(astype(d, int64)), {-2147483648.0, 2147483647.0, -1e9, 4e12, -4e12}, 0.0));
  // Large integers to floats round to nearest.
  array i32(std::vector<int32_t>{16777217, -16777217, 2147483647}, {3});
  EXPECT_TRUE(all_close(read_typed(astype(i32, float32)), {16777216.0, -16777216.0, 2147483648.0}, 0.0));
  EXPECT_TRUE(all_close(read_typed(astype(i32, float64)), {16777217.0, -16777217.0, 2147483647.0}, 0.0));
  array i64(std::vector<int64_t>{int64_t{1} << 53, -(int64_t{1} << 40) - 1, 9007199254740993LL}, {3});
  EXPECT_TRUE(all_close(read_typed(astype(i64, float64)),
                        {9007199254740992.0, -1099511627777.0, 9007199254740992.0}, 0.0));
  array u32(std::vector<uint32_t>{4294967295u, 2147483648u, 7u}, {3});
  EXPECT_TRUE(all_close(read_typed(astype(u32, int64)), {4294967295.0, 2147483648.0, 7.0}, 0.0));
  EXPECT_TRUE(all_close(read_typed(astype(u32, float64)), {4294967295.0, 2147483648.0, 7.0}, 0.0));
  EXPECT_TRUE(all_close(read_typed(astype(u32, float32)), {4294967296.0, 2147483648.0, 7.0}, 0.0));
  // Out of range floats to float16 overflow to inf; tiny ones underflow.
  array big(std::vector<double>{1e5, -1e5, 65504.0, 1e-9}, {4});
  std::vector<double> h = read_typed(astype(big, float16));
  EXPECT_TRUE(std::isinf(h[0]) && h[0] > 0);
  EXPECT_TRUE(std::isinf(h[1]) && h[1] < 0);
  EXPECT_EQ(h[2], 65504.0);
  EXPECT_EQ(h[3], 0.0);
}

TEST(DtypeTest, AstypeToBool) {
  array x(std::vector<double>{0.0, -0.0, 0.5, -2.0, NAN, INFINITY, 1e-300}, {7});
  for (Dtype src : {float16, bfloat16, float32, float64}) {
    std::vector<double> got = read_typed(astype(astype(x, src), bool_));
    // 1e-300 is zero in every type but float64.
    std::vector<double> want = {0, 0, 1, 1, 1, 1, src == float64 ? 1.0 : 0.0};
    EXPECT_TRUE(all_close(got, want, 0.0)) << dtype_name(src);
  }
  array n(std::vector<int32_t>{0, 3, -1, 0, 256}, {5});
  for (Dtype src : {uint8, int8, int32, int64}) {
    std::vector<double> vals = read_typed(astype(n, src));
    std::vector<double> want(vals.size());
    for (size_t i = 0; i < vals.size(); ++i) want[i] = vals[i] != 0;
    EXPECT_TRUE(all_close(read_typed(astype(astype(n, src), bool_)), want, 0.0)) << dtype_name(src);
  }
  EXPECT_TRUE(all_close(read_typed(astype(array({true, false, true}), int32)), {1, 0, 1}, 0.0));
  EXPECT_TRUE(all_close(read_typed(astype(array({true, false, true}), float16)), {1, 0, 1}, 0.0));
}

TEST(DtypeTest, AstypeFloat32ToHalfMatchesStorageTypes) {
  // Bulk conversions (possibly vectorized) must round exactly like
  // float16_t / bfloat16_t, across normal, subnormal and overflowing ranges.
  std::mt19937 gen(3);
  const int n = 100003;
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) {
    uint32_t e = 97 + gen() % 48;  // 2^-30 .. 2^17
    v[i] = bits_to_float((gen() & 0x80000000u) | (e << 23) | (gen() & 0x7fffffu));
  }
  v[0] = INFINITY;
  v[1] = -INFINITY;
  v[2] = 0.0f;
  v[3] = -0.0f;
  array x(v, {n});
  array h = astype(x, float16);
  array b = astype(x, bfloat16);
  h.eval();
  b.eval();
  const float16_t* hp = h.data<float16_t>();
  const bfloat16_t* bp = b.data<bfloat16_t>();
  int bad_h = 0, bad_b = 0;
  for (int i = 0; i < n; ++i) {
    if (hp[i].bits != float16_t(v[i]).bits && bad_h++ < 5)
      ADD_FAILURE() << "float16 of " << v[i] << ": got bits " << hp[i].bits << " want " << float16_t(v[i]).bits;
    if (bp[i].bits != bfloat16_t(v[i]).bits && bad_b++ < 5)
      ADD_FAILURE() << "bfloat16 of " << v[i] << ": got bits " << bp[i].bits << " want "
                    << bfloat16_t(v[i]).bits;
  }
  EXPECT_EQ(bad_h, 0);
  EXPECT_EQ(bad_b, 0);
  // NaN stays NaN.
  std::vector<double> nn = read_typed(astype(astype(array({NAN, -NAN}), float16), float32));
  EXPECT_TRUE(std::isnan(nn[0]) && std::isnan(nn[1]));
  nn = read_typed(astype(astype(array({NAN, -NAN}), bfloat16), float32));
  EXPECT_TRUE(std::isnan(nn[0]) && std::isnan(nn[1]));
}

TEST(DtypeTest, AstypeHalfToFloatAllBitPatterns) {
  std::vector<float16_t> hv(65536);
  std::vector<bfloat16_t> bv(65536);
  for (int i = 0; i < 65536; ++i) {
    hv[i].bits = static_cast<uint16_t>(i);
    bv[i].bits = static_cast<uint16_t>(i);
  }
  array h(hv, {256, 256});
  array b(bv, {256, 256});
  ASSERT_EQ(h.dtype(), float16);
  ASSERT_EQ(b.dtype(), bfloat16);
  for (Dtype dst : {float32, float64}) {
    std::vector<double> hf = read_typed(astype(h, dst));
    std::vector<double> bf = read_typed(astype(b, dst));
    int bad = 0;
    for (int i = 0; i < 65536; ++i) {
      double wh = static_cast<float>(hv[i]);
      double wb = static_cast<float>(bv[i]);
      bool ok_h = std::isnan(wh) ? std::isnan(hf[i]) : hf[i] == wh;
      bool ok_b = std::isnan(wb) ? std::isnan(bf[i]) : bf[i] == wb;
      if ((!ok_h || !ok_b) && bad++ < 5)
        ADD_FAILURE() << dtype_name(dst) << " bits " << i << ": f16 " << hf[i] << " vs " << wh << ", bf16 "
                      << bf[i] << " vs " << wb;
    }
    EXPECT_EQ(bad, 0);
  }
  // float16 <-> bfloat16 goes through float.
  std::vector<double> hb = read_typed(astype(astype(array({1.0f / 3.0f, 1000.5f, 1e-6f}), float16), bfloat16));
  std::vector<double> want;
  for (float f : {1.0f / 3.0f, 1000.5f, 1e-6f}) {
    want.push_back(static_cast<float>(bfloat16_t(static_cast<float>(float16_t(f)))));
  }
  EXPECT_TRUE(all_close(hb, want, 0.0));
}

TEST(DtypeTest, AstypeSameDtypeKeepsValues) {
  for (Dtype t : kAllDtypes) {
    array x = random_array({4, 9}, t, is_unsigned_int(t) ? 0.0 : -50.0, 50.0);
    array y = astype(x, t);
    EXPECT_EQ(y.dtype(), t);
    EXPECT_TRUE(all_close(read_typed(y), read_typed(x), 0.0)) << dtype_name(t);
  }
}

// ---------------------------------------------------------------- weak scalars

TEST(DtypeTest, WeakScalarsKeepArrayDtype) {
  array bf = astype(array({1.5f, -2.25f, 3.0f}), bfloat16);
  array r = bf * 2.0f;
  EXPECT_EQ(r.dtype(), bfloat16);
  EXPECT_TRUE(all_close(read_typed(r), {3.0, -4.5, 6.0}, 0.0));
  EXPECT_EQ((2.0f * bf).dtype(), bfloat16);
  EXPECT_EQ((bf + 1.0).dtype(), bfloat16);  // double scalar is weak too
  EXPECT_EQ((bf - 1).dtype(), bfloat16);
  EXPECT_EQ((astype(bf, float16) / 3.0).dtype(), float16);
  EXPECT_EQ((astype(bf, float64) * 2.0f).dtype(), float64);

  array i = array({1, 2, 3});
  ASSERT_EQ(i.dtype(), int32);
  array j = i + 1;
  EXPECT_EQ(j.dtype(), int32);
  EXPECT_TRUE(all_close(read_typed(j), {2, 3, 4}, 0.0));
  EXPECT_EQ((1 + i).dtype(), int32);
  EXPECT_EQ((i * int64_t{2}).dtype(), int32);
  array f = i + 1.5;
  EXPECT_EQ(f.dtype(), float32);
  EXPECT_TRUE(all_close(read_typed(f), {2.5, 3.5, 4.5}, 0.0));
  EXPECT_EQ((1.5f * i).dtype(), float32);

  array u = astype(array({250, 3}), uint8);
  EXPECT_EQ((u + 1).dtype(), uint8);
  EXPECT_TRUE(all_close(read_typed(u + 1), {251, 4}, 0.0));
  EXPECT_EQ((astype(i, int8) * 3).dtype(), int8);
  EXPECT_EQ((astype(i, int64) - 3).dtype(), int64);

  // Argument order matters for non-commutative ops.
  EXPECT_TRUE(all_close(read_typed(10 - i), {9, 8, 7}, 0.0));
  EXPECT_TRUE(all_close(read_typed(i - 10), {-9, -8, -7}, 0.0));
  EXPECT_TRUE(all_close(read_typed(6.0f / astype(i, float32)), {6, 3, 2}, 0.0));

  // Comparisons with a weak float scalar compare the real values.
  array lt = i < 1.5;
  EXPECT_EQ(lt.dtype(), bool_);
  EXPECT_TRUE(all_close(read_typed(lt), {1, 0, 0}, 0.0));
  EXPECT_TRUE(all_close(read_typed(i == 2), {0, 1, 0}, 0.0));
  EXPECT_TRUE(all_close(read_typed(2.5 > i), {1, 1, 0}, 0.0));
  EXPECT_EQ((astype(i, float16) * 1.0).dtype(), float16);
  EXPECT_EQ((astype(i, bool_) < 1).dtype(), bool_);
}

// ------------------------------------------- one rounding to 16-bit floats

// Doubles and 32/64-bit integers go to float16/bfloat16 with one rounding
// (not through a rounded float32), unfused and in both compile backends.
std::vector<array> cast_unfused_and_fused(const array& x, Dtype to) {
  std::vector<array> out = {astype(x, to)};
  for (auto b : {detail::CompileBackend::interp, detail::CompileBackend::codegen}) {
    detail::set_compile_backend(b);
    auto f = compile([to](const std::vector<array>& in) -> std::vector<array> {
      return {astype(maximum(in[0], in[0]), to)};  // two ops: a fused region
    });
    out.push_back(f({x})[0]);
    detail::clear_compile_backend();
  }
  return out;
}

void expect_exact(const std::vector<array>& results, const std::vector<double>& want, const std::string& what) {
  for (size_t k = 0; k < results.size(); ++k) {
    std::vector<double> got = read_typed(results[k]);
    int bad = 0;
    for (size_t i = 0; i < want.size() && bad < 5; ++i) {
      if (got[i] != want[i] && !(std::isnan(got[i]) && std::isnan(want[i]))) {
        ADD_FAILURE() << what << " (result " << k << ") element " << i << ": got " << got[i] << ", want " << want[i];
        ++bad;
      }
    }
  }
}

TEST(DtypeTest, AstypeToHalfRoundsOnce) {
  // The cases of issue 13: float32 would round both to the tie first.
  EXPECT_EQ(astype(array(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -30)), float16).item<float>(),
            1.0009765625f);
  EXPECT_EQ(astype(array(16842753), bfloat16).item<float>(), 16908288.0f);
  EXPECT_EQ(astype(array(int64_t{16842753}), bfloat16).item<float>(), 16908288.0f);
  EXPECT_EQ(astype(array(16842753u), bfloat16).item<float>(), 16908288.0f);

  std::mt19937_64 gen(13);
  const int n = 100000;
  for (Dtype to : {float16, bfloat16}) {
    SCOPED_TRACE(dtype_name(to));
    // Doubles over the target's range (subnormals and overflow included),
    // half of them a hair off a tie of the target, where float rounds to it.
    const int lo = to == float16 ? -27 : -135, hi = to == float16 ? 17 : 129, p = to == float16 ? 11 : 8;
    std::vector<double> d(n), want(n);
    for (int i = 0; i < n; ++i) {
      int e = lo + static_cast<int>(gen() % (hi - lo));
      double m = 1.0 + static_cast<double>(gen() >> 12) * std::ldexp(1.0, -52);
      if (i % 2) {
        m = std::ldexp(std::floor(std::ldexp(m, p - 1)) + 0.5, 1 - p);  // a tie at p bits ...
        m += (gen() % 2 ? 1.0 : -1.0) * std::ldexp(1.0, -30 - static_cast<int>(gen() % 20));  // ... just off it
      }
      d[i] = (gen() % 2 ? -1.0 : 1.0) * std::ldexp(m, e);
      want[i] = to == float16 ? f16_ref(d[i]) : bf16_ref(d[i]);
    }
    expect_exact(cast_unfused_and_fused(array(d, {n}), to), want, "float64");
    // 32- and 64-bit integers, many of them past float32's 24 bits.
    std::vector<int32_t> i32(n);
    std::vector<uint32_t> u32(n);
    std::vector<int64_t> i64(n);
    std::vector<uint64_t> u64(n);
    std::vector<double> w32(n), wu32(n), w64(n), wu64(n);
    for (int i = 0; i < n; ++i) {
      i32[i] = static_cast<int32_t>(gen() >> (32 + gen() % 32));
      u32[i] = static_cast<uint32_t>(gen() >> (32 + gen() % 32));
      i64[i] = static_cast<int64_t>(gen() >> (gen() % 64));
      u64[i] = gen() >> (gen() % 64);
      if (i % 3 == 0) i32[i] = -i32[i], i64[i] = -i64[i];
      w32[i] = round_on_integers(int64_t{i32[i]}, p, to == float16 ? -14 : -126, to == float16 ? 15 : 127);
      wu32[i] = round_on_integers(int64_t{u32[i]}, p, to == float16 ? -14 : -126, to == float16 ? 15 : 127);
      w64[i] = round_on_integers(i64[i], p, to == float16 ? -14 : -126, to == float16 ? 15 : 127);
      wu64[i] = round_on_integers(u64[i], 0, false, p, to == float16 ? -14 : -126, to == float16 ? 15 : 127);
    }
    expect_exact(cast_unfused_and_fused(array(i32, {n}), to), w32, "int32");
    expect_exact(cast_unfused_and_fused(array(u32, {n}), to), wu32, "uint32");
    expect_exact(cast_unfused_and_fused(array(i64, {n}), to), w64, "int64");
    expect_exact(cast_unfused_and_fused(array(u64, {n}), to), wu64, "uint64");
  }
  EXPECT_EQ(astype(array(INT64_MIN), bfloat16).item<float>(), -std::ldexp(1.0f, 63));
  EXPECT_EQ(astype(array(INT64_MAX), float16).item<float>(), INFINITY);
  EXPECT_EQ(astype(array(1e300), bfloat16).item<float>(), INFINITY);
  EXPECT_EQ(astype(array(-1e-300), float16).item<float>(), 0.0f);
  EXPECT_TRUE(std::signbit(astype(array(-1e-300), bfloat16).item<float>()));
  EXPECT_TRUE(std::isnan(astype(array(std::nan("")), float16).item<float>()));
}

// ------------------------------------------- int16, uint16, uint64

TEST(DtypeTest, SixteenBitIntegersWrapAndSaturate) {
  array i16 = array(std::vector<int16_t>{300, -300, 32767, -32768}, {4});
  EXPECT_EQ((i16 * i16).dtype(), int16);
  // 90000 mod 2^16 = 24464; 32767 * 32767 = 1 mod 2^16; (-32768)^2 = 0.
  EXPECT_TRUE(all_close(read_typed(i16 * i16), {24464, 24464, 1, 0}, 0.0));
  EXPECT_TRUE(all_close(read_typed(i16 + array(int16_t{1})), {301, -299, -32768, -32767}, 0.0));
  EXPECT_TRUE(all_close(read_typed(-i16), {-300, 300, -32767, -32768}, 0.0));
  array u16 = array(std::vector<uint16_t>{65535, 256, 3}, {3});
  EXPECT_TRUE(all_close(read_typed(u16 * u16), {1, 0, 9}, 0.0));  // no signed-int overflow on the way
  EXPECT_TRUE(all_close(read_typed(power(u16, array(uint16_t{3}))), {65535, 0, 27}, 0.0));
  EXPECT_TRUE(test::throws_error([&] { power(i16, array(std::vector<int16_t>{2, -1, 2, 2}, {4})).eval(); },
                                 {"power", "negative integer powers"}));
  EXPECT_TRUE(all_close(read_typed(cumprod(u16)), {65535, 65280, 64768}, 0.0));
  EXPECT_TRUE(all_close(read_typed(matmul(reshape(u16, {1, 3}), reshape(u16, {3, 1}))), {10}, 0.0));
  // float -> 16-bit integers truncate and saturate.
  array f = array({-1e6f, -2.7f, 2.7f, 40000.5f, 1e6f});
  EXPECT_TRUE(all_close(read_typed(astype(f, int16)), {-32768, -2, 2, 32767, 32767}, 0.0));
  EXPECT_TRUE(all_close(read_typed(astype(f, uint16)), {0, 0, 2, 40000, 65535}, 0.0));
  // sum and prod widen them to 32 bits, as MLX does; uint64 stays.
  EXPECT_EQ(sum(i16).dtype(), int32);
  EXPECT_EQ(sum(i16).item<int32_t>(), -1);
  EXPECT_EQ(sum(u16).dtype(), uint32);
  EXPECT_EQ(sum(u16).item<uint32_t>(), 65794u);
  EXPECT_EQ(prod(u16).dtype(), uint32);
  EXPECT_EQ(sum(astype(u16, uint64)).dtype(), uint64);
  EXPECT_EQ(max(i16).item<int16_t>(), 32767);
  EXPECT_EQ(argmin(i16).item<uint32_t>(), 3u);
}

TEST(DtypeTest, Uint64KeepsAll64Bits) {
  const uint64_t big = (uint64_t{1} << 63) + 12345;
  array u = array({big, ~uint64_t{0}, uint64_t{7}});
  EXPECT_EQ(u.dtype(), uint64);
  u.eval();
  EXPECT_EQ(u.data<uint64_t>()[0], big);
  array s = add(u, array(uint64_t{1}));
  s.eval();
  EXPECT_EQ(s.data<uint64_t>()[0], big + 1);
  EXPECT_EQ(s.data<uint64_t>()[1], 0u);  // wraps
  EXPECT_TRUE(all_close(read_typed(u > array(uint64_t{1} << 63)), {1, 1, 0}, 0.0));
  EXPECT_EQ(max(u).item<uint64_t>(), ~uint64_t{0});
  EXPECT_EQ(argmax(u).item<uint32_t>(), 1u);
  array sorted = sort(u);
  sorted.eval();
  EXPECT_EQ(sorted.data<uint64_t>()[0], 7u);
  EXPECT_EQ(sorted.data<uint64_t>()[2], ~uint64_t{0});
  // To floats with one rounding; from floats saturating.
  EXPECT_EQ(astype(array(~uint64_t{0}), float32).item<float>(), std::ldexp(1.0f, 64));
  EXPECT_EQ(astype(array(~uint64_t{0}), float16).item<float>(), INFINITY);
  EXPECT_EQ(astype(array(-5.0f), uint64).item<uint64_t>(), 0u);
  EXPECT_EQ(astype(array(1e30f), uint64).item<uint64_t>(), ~uint64_t{0});
  EXPECT_EQ(astype(array(int64_t{-1}), uint64).item<uint64_t>(), ~uint64_t{0});  // integer casts wrap
  // MLX's rule: uint64 with a signed integer has no common integer type.
  EXPECT_EQ((u + array(int8_t{1})).dtype(), float32);
  // A uint64 index past INT64_MAX is out of range, not a negative index.
  EXPECT_TRUE(test::throws_error([&] { take(arange(4), array({~uint64_t{0}}), 0).eval(); }, {"take"}));
  EXPECT_EQ(take(arange(4), array({uint64_t{3}}), 0).item<int32_t>(), 3);
}

TEST(DtypeTest, WeakScalarsWithNewIntegers) {
  array i16 = array(std::vector<int16_t>{1, 2}, {2});
  EXPECT_EQ((i16 + 1).dtype(), int16);
  EXPECT_EQ((i16 * 2.5f).dtype(), float32);
  EXPECT_TRUE(test::throws_error([&] { (i16 + 40000).eval(); }, {"40000", "int16"}));
  array u16 = astype(i16, uint16);
  EXPECT_EQ((u16 + 65000).dtype(), uint16);
  EXPECT_TRUE(test::throws_error([&] { (u16 + 70000).eval(); }, {"70000", "uint16"}));
  EXPECT_TRUE(test::throws_error([&] { (u16 - (-1)).eval(); }, {"-1", "uint16"}));
  array u64 = astype(i16, uint64);
  array big = u64 + ~uint64_t{0};  // above INT64_MAX: still exact
  EXPECT_EQ(big.dtype(), uint64);
  big.eval();
  EXPECT_EQ(big.data<uint64_t>()[0], 0u);
  EXPECT_EQ(big.data<uint64_t>()[1], 1u);
  EXPECT_TRUE(test::throws_error([&] { (u64 + (-3)).eval(); }, {"-3", "uint64"}));
  // A float scalar next to an integer array of any width gives float32.
  EXPECT_EQ((u64 * 0.5).dtype(), float32);
}

TEST(DtypeTest, FinfoIinfoAndResultType) {
  EXPECT_EQ(iinfo(int16).min, -32768);
  EXPECT_EQ(iinfo(int16).max, 32767u);
  EXPECT_EQ(iinfo(uint16).max, 65535u);
  EXPECT_EQ(iinfo(uint64).min, 0);
  EXPECT_EQ(iinfo(uint64).max, ~uint64_t{0});
  EXPECT_EQ(iinfo(int64).min, INT64_MIN);
  EXPECT_EQ(iinfo(uint8).dtype, uint8);
  EXPECT_TRUE(test::throws_error([] { (void)iinfo(float32); }, {"iinfo", "float32"}));
  EXPECT_TRUE(test::throws_error([] { (void)iinfo(bool_); }, {"iinfo", "bool"}));
  EXPECT_EQ(finfo(float16).max, 65504.0);
  EXPECT_EQ(finfo(float16).min, -65504.0);
  EXPECT_EQ(finfo(float16).eps, std::ldexp(1.0, -10));
  EXPECT_EQ(finfo(float16).bits, 16);
  EXPECT_EQ(finfo(bfloat16).eps, std::ldexp(1.0, -7));
  EXPECT_EQ(finfo(bfloat16).max, static_cast<double>(bfloat16_t::to_float(0x7f7f)));
  EXPECT_EQ(finfo(float32).max, static_cast<double>(FLT_MAX));
  EXPECT_EQ(finfo(float32).smallest_normal, static_cast<double>(FLT_MIN));
  EXPECT_EQ(finfo(float64).eps, DBL_EPSILON);
  EXPECT_TRUE(test::throws_error([] { (void)finfo(int16); }, {"finfo", "int16"}));
  array a = zeros({2}, uint8), b = zeros({2}, int8), c = zeros({2}, uint64);
  EXPECT_EQ(result_type(a, b), int16);
  EXPECT_EQ(result_type(a, b, c), float32);
  EXPECT_EQ(result_type({a, a, zeros({1}, uint16)}), uint16);
}

}  // namespace
