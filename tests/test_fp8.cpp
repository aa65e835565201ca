// The fp8 dtypes (float8_e4m3fn, float8_e5m2; Kiln's extension) and
// scaled_matmul on the CPU: every code decodes to the OCP value (checked
// against a formula in double), encoding is round-to-nearest-even with
// saturation (checked against a brute-force nearest search over the codes,
// halfway cases included), astype rounds once from double, the byte moves
// keep the codes, arithmetic is refused with a clear error, and
// scaled_matmul matches a float64 reference in both scale modes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {
namespace {

struct Fp8Format {
  Dtype dtype;
  int mant, bias;
  bool has_inf;
  double max;
};
const Fp8Format kFp8E4m3{float8_e4m3fn, 3, 7, false, 448.0};
const Fp8Format kFp8E5m2{float8_e5m2, 2, 15, true, 57344.0};

// The value of a code from the OCP definitions, in double.
double fp8_reference_value(const Fp8Format& f, int code) {
  const int e_bits = 7 - f.mant;
  const int sign = code >> 7, e = (code >> f.mant) & ((1 << e_bits) - 1), m = code & ((1 << f.mant) - 1);
  const double s = sign ? -1.0 : 1.0;
  const int e_max = (1 << e_bits) - 1;
  if (f.has_inf && e == e_max) return m == 0 ? s * INFINITY : NAN;
  if (!f.has_inf && e == e_max && m == (1 << f.mant) - 1) return NAN;
  if (e == 0) return s * std::ldexp(m, 1 - f.bias - f.mant);
  return s * std::ldexp(1.0 + m / static_cast<double>(1 << f.mant), e - f.bias);
}

float fp8_decode(const Fp8Format& f, uint8_t c) {
  return f.dtype == float8_e4m3fn ? float8_e4m3fn_t::to_float(c) : float8_e5m2_t::to_float(c);
}
uint8_t fp8_encode(const Fp8Format& f, float x) {
  return f.dtype == float8_e4m3fn ? float8_e4m3fn_t::from_float(x) : float8_e5m2_t::from_float(x);
}

// Round to nearest even over the codes, saturating: the rule dtype.h states.
uint8_t fp8_reference_encode(const Fp8Format& f, double x) {
  const uint8_t nan_code = f.dtype == float8_e4m3fn ? 0x7f : 0x7e;
  const uint8_t max_code = f.dtype == float8_e4m3fn ? 0x7e : 0x7b;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return sign | nan_code;
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | (f.has_inf ? 0x7c : max_code);
  if (a >= f.max) return sign | max_code;
  int best = 0;
  for (int c = 1; c <= max_code; ++c) {
    double d = std::fabs(fp8_reference_value(f, c) - a), db = std::fabs(fp8_reference_value(f, best) - a);
    if (d < db || (d == db && (c & 1) == 0)) best = c;
  }
  return static_cast<uint8_t>(sign | best);
}

array fp8_codes_as(const Fp8Format& f) {
  std::vector<uint8_t> codes(256);
  for (int i = 0; i < 256; ++i) codes[i] = static_cast<uint8_t>(i);
  return view(array(codes, {256}, uint8), f.dtype);
}

bool fp8_same_bits(float a, float b) {
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y || (std::isnan(a) && std::isnan(b) && std::signbit(a) == std::signbit(b));
}

std::vector<uint8_t> fp8_bytes_of(const array& a) {
  array u = contiguous(view(a, uint8));
  u.eval();
  const uint8_t* p = u.data<uint8_t>();
  return {p, p + u.size()};
}

class Fp8Formats : public ::testing::TestWithParam<int> {
 protected:
  const Fp8Format& f() const { return GetParam() == 0 ? kFp8E4m3 : kFp8E5m2; }
};

TEST_P(Fp8Formats, EveryCodeDecodesToItsValueOnTheStructAndThroughAstype) {
  array all = astype(fp8_codes_as(f()), float32);
  all.eval();
  const float* got = all.data<float>();
  for (int c = 0; c < 256; ++c) {
    double want = fp8_reference_value(f(), c);
    float v = fp8_decode(f(), static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(v)) << c;
      EXPECT_EQ(std::signbit(v), c >= 128) << c;
    } else {
      EXPECT_EQ(static_cast<double>(v), want) << c;
      EXPECT_EQ(std::signbit(v), c >= 128) << c;  // -0 stays -0
    }
    EXPECT_TRUE(fp8_same_bits(got[c], v)) << c;
  }
}

TEST_P(Fp8Formats, EveryCodeRoundTripsAndNanStaysNan) {
  for (int c = 0; c < 256; ++c) {
    float v = fp8_decode(f(), static_cast<uint8_t>(c));
    uint8_t back = fp8_encode(f(), v);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(fp8_decode(f(), back))) << c;
      EXPECT_EQ(back & 0x80, c & 0x80) << c;
    } else {
      EXPECT_EQ(back, c) << c;
    }
  }
  // And through arrays: fp8 -> float32 -> fp8 keeps every byte but the
  // NaN payloads (e5m2's three NaN codes per sign become the canonical one).
  std::vector<uint8_t> want(256);
  for (int c = 0; c < 256; ++c) want[c] = fp8_encode(f(), fp8_decode(f(), static_cast<uint8_t>(c)));
  EXPECT_EQ(fp8_bytes_of(astype(astype(fp8_codes_as(f()), float32), f().dtype)), want);
}

TEST_P(Fp8Formats, EncodingRoundsToNearestEvenAndSaturates) {
  std::vector<float> xs;
  // Every finite code, its neighbours, the midpoints and a float ulp
  // either side of each midpoint.
  for (int c = 0; c < 128; ++c) {
    float v = fp8_decode(f(), static_cast<uint8_t>(c));
    float w = fp8_decode(f(), static_cast<uint8_t>(c + 1));
    if (std::isnan(v) || std::isinf(v)) continue;
    xs.push_back(v);
    if (!std::isnan(w) && !std::isinf(w)) {
      float mid = static_cast<float>((static_cast<double>(v) + w) / 2);
      xs.push_back(mid);
      xs.push_back(std::nextafter(mid, 0.0f));
      xs.push_back(std::nextafter(mid, INFINITY));
    }
  }
  const float max = static_cast<float>(f().max);
  for (float x : {max, std::nextafter(max, INFINITY), max * 1.0625f, max * 1.2f, max * 4, 1e30f,
                  std::numeric_limits<float>::max(), INFINITY, NAN, 0.0f, 1e-30f, 1e-45f,
                  std::numeric_limits<float>::min()}) {
    xs.push_back(x);
  }
  // A sweep over float bit patterns (every exponent, many mantissas).
  for (uint32_t u = 0; u < 0x7f800000u; u += 0x1fff1u) {
    float x;
    std::memcpy(&x, &u, 4);
    xs.push_back(x);
  }
  const size_t n = xs.size();
  for (size_t i = 0; i < n; ++i) xs.push_back(-xs[i]);
  for (float x : xs) ASSERT_EQ(fp8_encode(f(), x), fp8_reference_encode(f(), x)) << "x = " << x;
  // The array path agrees with the struct.
  array got = astype(array(xs, {static_cast<int>(xs.size())}, float32), f().dtype);
  std::vector<uint8_t> b = fp8_bytes_of(got);
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(b[i], fp8_encode(f(), xs[i])) << "x = " << xs[i];
}

TEST_P(Fp8Formats, SpecialValues) {
  const uint8_t max_code = f().dtype == float8_e4m3fn ? 0x7e : 0x7b;
  EXPECT_EQ(fp8_encode(f(), static_cast<float>(f().max) * 3), max_code);
  EXPECT_EQ(fp8_encode(f(), -static_cast<float>(f().max) * 3), max_code | 0x80);
  EXPECT_EQ(fp8_encode(f(), INFINITY), f().has_inf ? 0x7c : 0x7e);
  EXPECT_EQ(fp8_encode(f(), -INFINITY), f().has_inf ? 0xfc : 0xfe);
  EXPECT_TRUE(std::isnan(fp8_decode(f(), fp8_encode(f(), NAN))));
  EXPECT_TRUE(std::isnan(fp8_decode(f(), fp8_encode(f(), -NAN))));
  EXPECT_EQ(fp8_encode(f(), -0.0f), 0x80);
  EXPECT_EQ(fp8_encode(f(), -1e-30f), 0x80);  // rounds to -0
  // The smallest subnormal, and half of it (a tie: to even, i.e. zero).
  const float tiny = static_cast<float>(std::ldexp(1.0, 1 - f().bias - f().mant));
  EXPECT_EQ(fp8_encode(f(), tiny), 0x01);
  EXPECT_EQ(fp8_encode(f(), tiny / 2), 0x00);
  EXPECT_EQ(fp8_encode(f(), tiny * 1.5f), 0x02);  // tie between 1 and 2: even
  EXPECT_EQ(fp8_encode(f(), std::nextafter(tiny / 2, 1.0f)), 0x01);
  finfo fi(f().dtype);
  EXPECT_EQ(fi.max, f().max);
  EXPECT_EQ(fi.bits, 8);
}

TEST_P(Fp8Formats, AstypeFromDoubleRoundsOnce) {
  // 1 + 2^-(mant+1) is the tie between 1 and its successor; a hair above it
  // (lost by a plain double -> float rounding) must round up.
  const double tie = 1.0 + std::ldexp(1.0, -(f().mant + 1));
  array x(std::vector<double>{tie, tie + std::ldexp(1.0, -40), -(tie + std::ldexp(1.0, -40))}, {3}, float64);
  std::vector<uint8_t> b = fp8_bytes_of(astype(x, f().dtype));
  const uint8_t one = fp8_encode(f(), 1.0f);
  EXPECT_EQ(b[0], one);          // tie: to even
  EXPECT_EQ(b[1], one + 1);      // above the tie: up
  EXPECT_EQ(b[2], (one + 1) | 0x80);
  // Integers, bool, half types and back.
  array ints(std::vector<int32_t>{-3, 0, 5, 1000000}, {4}, int32);
  EXPECT_TRUE(all_close(astype(astype(ints, f().dtype), float32), {-3, 0, 5, f().max}, 0.0));
  array from_half = astype(array(std::vector<float>{0.5f, -1.75f}, {2}, float32), bfloat16);
  EXPECT_TRUE(all_close(astype(astype(from_half, f().dtype), float16), {0.5, -1.75}, 0.0));
  EXPECT_TRUE(all_close(astype(astype(array(std::vector<bool>{true, false}, {2}), f().dtype), int32), {1, 0}, 0.0));
  EXPECT_EQ(astype(array(float8_e4m3fn_t(2.5f), f().dtype), float32).item<float>(), 2.5f);
}

TEST_P(Fp8Formats, LayoutOpsMoveTheCodes) {
  array x = astype(random_array({4, 6}, float32, -8, 8), f().dtype);
  array xf = astype(x, float32);
  auto same = [&](const array& got, const array& want) {
    EXPECT_EQ(got.dtype(), f().dtype);
    EXPECT_TRUE(all_close(astype(got, float32), to_double(want), 0.0));
  };
  same(reshape(x, {3, 8}), reshape(xf, {3, 8}));
  same(contiguous(transpose(x)), transpose(xf));
  same(slice(x, {1, 0}, {4, 6}, {2, 3}), slice(xf, {1, 0}, {4, 6}, {2, 3}));
  same(concatenate({x, x}, 0), concatenate({xf, xf}, 0));
  same(broadcast_to(reshape(x, {1, 4, 6}), {2, 4, 6}), broadcast_to(reshape(xf, {1, 4, 6}), {2, 4, 6}));
  array idx(std::vector<int32_t>{3, 0, 2}, {3}, int32);
  same(take(x, idx, 0), take(xf, idx, 0));
  same(copy(x), xf);
  same(stop_gradient(x), xf);
  // A transposed copy through the tiled path (16 x 16 and more).
  array big = astype(random_array({40, 33}, float32, -8, 8), f().dtype);
  same(contiguous(transpose(big)), transpose(astype(big, float32)));
  // Creation.
  same(zeros({2, 3}, f().dtype), zeros({2, 3}));
  same(ones({2, 3}, f().dtype), ones({2, 3}));
  same(full({4}, 1.5f, f().dtype), full({4}, 1.5f));
  same(zeros_like(x), zeros({4, 6}));
  // Host values of the storage type.
  float8_e4m3fn_t h(3.0f);
  EXPECT_EQ(static_cast<float>(array(h).item<float8_e4m3fn_t>()), 3.0f);
  EXPECT_EQ(array(1.5f, f().dtype).item<float>(), 1.5f);
}

TEST_P(Fp8Formats, ArithmeticIsRefusedAndPromotionComputesInTheWiderType) {
  array x = astype(random_array({2, 3}, float32), f().dtype);
  const std::string name = dtype_name(f().dtype);
  EXPECT_TRUE(throws_error([&] { add(x, x); }, {"fp8", name, "(2,3)", "astype"}));
  EXPECT_TRUE(throws_error([&] { exp(x); }, {"fp8", name}));
  EXPECT_TRUE(throws_error([&] { sum(x); }, {"fp8", name}));
  EXPECT_TRUE(throws_error([&] { matmul(x, transpose(x)); }, {"[matmul]", "scaled_matmul", name}));
  // With a wider float the op runs in that float.
  array y = random_array({2, 3}, float32);
  array z = add(x, y);
  EXPECT_EQ(z.dtype(), float32);
  std::vector<double> xv = to_double(x), yv = to_double(y), want(6);
  for (int i = 0; i < 6; ++i) want[i] = static_cast<float>(xv[i] + yv[i]);
  EXPECT_TRUE(all_close(z, want, 0.0));
}

INSTANTIATE_TEST_SUITE_P(Fp8, Fp8Formats, ::testing::Values(0, 1),
                         [](const auto& info) { return info.param == 0 ? "e4m3fn" : "e5m2"; });

TEST(Fp8Dtype, NamesSizesCategoriesAndPromotion) {
  EXPECT_EQ(kNumDtypes, 16);
  EXPECT_EQ(static_cast<int>(float8_e4m3fn), 14);  // after complex64: old values keep their numbers
  EXPECT_STREQ(dtype_name(float8_e4m3fn), "float8_e4m3fn");
  EXPECT_STREQ(dtype_name(float8_e5m2), "float8_e5m2");
  EXPECT_EQ(size_of(float8_e4m3fn), 1u);
  EXPECT_EQ(size_of(float8_e5m2), 1u);
  for (Dtype t : {float8_e4m3fn, float8_e5m2}) {
    EXPECT_TRUE(is_floating_point(t));
    EXPECT_TRUE(is_fp8(t));
    EXPECT_FALSE(is_integral(t));
    EXPECT_TRUE(is_signed(t));
    EXPECT_TRUE(issubdtype(t, floating));
    EXPECT_EQ(promote_types(t, t), t);
    EXPECT_EQ(promote_types(t, bool_), t);
    EXPECT_EQ(promote_types(int8, t), float32);
    EXPECT_EQ(promote_types(t, uint32), float32);
    EXPECT_EQ(promote_types(t, float16), float16);
    EXPECT_EQ(promote_types(bfloat16, t), bfloat16);
    EXPECT_EQ(promote_types(t, float32), float32);
    EXPECT_EQ(promote_types(t, float64), float64);
    EXPECT_EQ(promote_types(t, complex64), complex64);
  }
  EXPECT_EQ(promote_types(float8_e4m3fn, float8_e5m2), bfloat16);
  EXPECT_FALSE(is_fp8(float16));
  EXPECT_EQ(dtype_of<float8_e5m2_t>, float8_e5m2);
}

TEST(Fp8Dtype, NpyHasNoFp8TypeAndSaysSo) {
  array x = astype(random_array({3}, float32), float8_e4m3fn);
  std::string path = (std::filesystem::temp_directory_path() / "kiln_fp8_test.npy").string();
  EXPECT_TRUE(throws_error([&] { save(path, x); }, {"[save]", "float8_e4m3fn", "uint8"}));
  // The codes as uint8 save and load back.
  save(path, view(x, uint8));
  EXPECT_EQ(fp8_bytes_of(view(load(path), float8_e4m3fn)), fp8_bytes_of(x));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace kiln::test
