// The complex64 dtype: promotion and categories, construction and item
// access, casts, file formats, the ops that refuse it, compile and the
// transformations through complex values.
#include <limits>
#include <gtest/gtest.h>

#include <complex>
#include <filesystem>
#include <unistd.h>

#include "test_util.h"

namespace kiln {
namespace {

TEST(Complex, PromotionAndCategories) {
  for (Dtype t : {bool_, uint8, int32, uint64, int64, float16, bfloat16, float32, float64, complex64}) {
    EXPECT_EQ(promote_types(t, complex64), complex64) << dtype_name(t);
    EXPECT_EQ(promote_types(complex64, t), complex64) << dtype_name(t);
  }
  EXPECT_EQ(size_of(complex64), 8u);
  EXPECT_STREQ(dtype_name(complex64), "complex64");
  EXPECT_TRUE(issubdtype(complex64, complexfloating));
  EXPECT_TRUE(issubdtype(complex64, inexact));
  EXPECT_TRUE(issubdtype(complex64, number));
  EXPECT_FALSE(issubdtype(complex64, floating));
  EXPECT_FALSE(issubdtype(float32, complexfloating));
  EXPECT_TRUE(issubdtype(float32, inexact));
  EXPECT_TRUE(issubdtype(int8, signedinteger));
  EXPECT_FALSE(issubdtype(bool_, number));
  EXPECT_TRUE(issubdtype(complexfloating, inexact));
  EXPECT_FALSE(is_floating_point(complex64));
  EXPECT_FALSE(is_integral(complex64));
  finfo f(complex64);
  EXPECT_EQ(f.dtype, float32);
  EXPECT_EQ(f.eps, finfo(float32).eps);
}

TEST(Complex, ConstructionItemAndData) {
  array a(complex64_t(1.5f, -2.0f));
  EXPECT_EQ(a.dtype(), complex64);
  complex64_t v = a.item<complex64_t>();
  EXPECT_EQ(v.real(), 1.5f);
  EXPECT_EQ(v.imag(), -2.0f);
  std::complex<float> s = a.item<std::complex<float>>();
  EXPECT_EQ(s, std::complex<float>(1.5f, -2.0f));
  array b(std::vector<std::complex<float>>{{1, 2}, {3, 4}, {5, 6}}, {3});
  EXPECT_EQ(b.dtype(), complex64);
  EXPECT_EQ(b.data<complex64_t>()[2].imag(), 6.0f);
  array c(std::complex<float>(0.0f, 1.0f));
  EXPECT_EQ(c.dtype(), complex64);
  // item<float> of a complex value takes the real part (numpy's cast).
  EXPECT_EQ(a.item<float>(), 1.5f);
  // A real value made complex.
  EXPECT_EQ(array(2.5f, complex64).item<complex64_t>(), complex64_t(2.5f, 0.0f));
}

TEST(Complex, Casts) {
  array x = array({-1.5f, 0.0f, 2.25f});
  array z = astype(x, complex64);
  EXPECT_TRUE(test::all_close(real(z), {-1.5, 0.0, 2.25}, 0.0));
  EXPECT_TRUE(test::all_close(imag(z), {0.0, 0.0, 0.0}, 0.0));
  array w = z * array(complex64_t(0.0f, 1.0f)) + array(complex64_t(3.0f, 0.0f));  // 3 + i x
  EXPECT_TRUE(test::all_close(astype(w, float32), {3, 3, 3}, 0.0));
  EXPECT_TRUE(test::all_close(astype(w, int32), {3, 3, 3}, 0.0));
  // To bool: either part non-zero.
  array p = array(std::vector<complex64_t>{{0, 0}, {0, 1}, {2, 0}}, {3});
  EXPECT_TRUE(test::all_close(astype(p, bool_), {0, 1, 1}, 0.0));
  // Integers and float64 to complex64.
  EXPECT_TRUE(test::all_close(real(astype(arange(4), complex64)), {0, 1, 2, 3}, 0.0));
  EXPECT_TRUE(test::all_close(real(astype(array(0.1, float64), complex64)), {static_cast<double>(0.1f)}, 0.0));
  // real / imag of real arrays (MLX): the array, and zeros.
  EXPECT_EQ(real(x).id(), x.id());
  EXPECT_TRUE(test::all_close(imag(x), {0, 0, 0}, 0.0));
  EXPECT_EQ(conjugate(x).id(), x.id());
  // Weak scalars take the complex dtype.
  EXPECT_EQ((z * 2.0).dtype(), complex64);
}

TEST(Complex, ViewsOfPartsFollowStrides) {
  array z = array(std::vector<complex64_t>{{1, 10}, {2, 20}, {3, 30}, {4, 40}, {5, 50}, {6, 60}}, {2, 3});
  EXPECT_TRUE(test::all_close(real(transpose(z)), {1, 4, 2, 5, 3, 6}, 0.0));
  EXPECT_TRUE(test::all_close(imag(slice(z, {0, 1}, {2, 3})), {20, 30, 50, 60}, 0.0));
  EXPECT_TRUE(test::all_close(imag(broadcast_to(slice(z, {1, 0}, {2, 3}), {2, 3})), {40, 50, 60, 40, 50, 60}, 0.0));
}

TEST(Complex, ElementwiseValues) {
  std::vector<std::complex<float>> va = {{1, 2}, {-3, 0.5f}, {0.25f, -4}}, vb = {{2, -1}, {0.5f, 0.5f}, {-1, -1}};
  array a(va, {3}), b(vb, {3});
  auto check = [](const array& got, const std::vector<std::complex<double>>& want, double rtol) {
    std::vector<double> re, im;
    for (auto w : want) re.push_back(w.real()), im.push_back(w.imag());
    EXPECT_TRUE(test::all_close(real(got), re, rtol, 1e-6));
    EXPECT_TRUE(test::all_close(imag(got), im, rtol, 1e-6));
  };
  std::vector<std::complex<double>> prod, quot, ex, lg, sq, sn;
  for (int i = 0; i < 3; ++i) {
    std::complex<double> x(va[i]), y(vb[i]);
    prod.push_back(x * y), quot.push_back(x / y), ex.push_back(std::exp(x)), lg.push_back(std::log(x));
    sq.push_back(std::sqrt(x)), sn.push_back(std::sin(x));
  }
  check(a * b, prod, 1e-6);
  check(a / b, quot, 1e-6);
  check(exp(a), ex, 1e-5);
  check(log(a), lg, 1e-6);
  check(sqrt(a), sq, 1e-6);
  check(sin(a), sn, 1e-5);
  array m = abs(a);
  EXPECT_EQ(m.dtype(), float32);
  EXPECT_TRUE(test::all_close(m, {std::sqrt(5.0), std::sqrt(9.25), std::sqrt(16.0625)}, 1e-6));
  // abs does not overflow where re^2 + im^2 would in float.
  EXPECT_TRUE(test::all_close(abs(array(complex64_t(3e30f, 4e30f))), {5e30}, 1e-6));
  EXPECT_TRUE(test::all_close(equal(a, array(va, {3})), {1, 1, 1}, 0.0));
  EXPECT_TRUE(test::all_close(not_equal(a, conjugate(a)), {1, 1, 1}, 0.0));
  EXPECT_TRUE(test::all_close(mean(a), {(1 - 3 + 0.25) / 3.0}, 1e-6));
  EXPECT_TRUE(test::all_close(var(a), {(std::norm(std::complex<double>(va[0]) - std::complex<double>(-1.75 / 3, -1.5 / 3)) +
                                        std::norm(std::complex<double>(va[1]) - std::complex<double>(-1.75 / 3, -1.5 / 3)) +
                                        std::norm(std::complex<double>(va[2]) - std::complex<double>(-1.75 / 3, -1.5 / 3))) /
                                       3.0},
                              1e-5));
}

TEST(Complex, UnsupportedOpsThrowNamingTheOp) {
  array z(std::vector<complex64_t>{{1, 2}, {3, 4}}, {2});
  const std::vector<std::string> kind = {"(2) complex64", "not supported for complex64"};
  auto frag = [&](const char* op) {
    std::vector<std::string> f = kind;
    f.push_back(std::string("[") + op + "]");
    return f;
  };
  // The ops MLX refuses for complex64 (its ops.cpp): rounding, expm1,
  // sigmoid, erf, arctan2; and those Kiln does not order yet (reductions,
  // sort, scans).
  EXPECT_TRUE(test::throws_error([&] { floor(z); }, frag("floor")));
  EXPECT_TRUE(test::throws_error([&] { expm1(z); }, frag("expm1")));
  EXPECT_TRUE(test::throws_error([&] { sigmoid(z); }, frag("sigmoid")));
  EXPECT_TRUE(test::throws_error([&] { erf(z); }, frag("erf")));
  EXPECT_TRUE(test::throws_error([&] { arctan2(z, z); }, frag("arctan2")));
  EXPECT_TRUE(test::throws_error([&] { remainder(z, z); }, frag("remainder")));
  EXPECT_TRUE(test::throws_error([&] { max(z); }, frag("max")));
  EXPECT_TRUE(test::throws_error([&] { argmax(z); }, frag("argmax")));
  EXPECT_TRUE(test::throws_error([&] { sort(z); }, frag("sort")));
  EXPECT_TRUE(test::throws_error([&] { cumsum(z); }, frag("cumsum")));
  EXPECT_TRUE(test::throws_error([&] { softmax(z); }, frag("softmax")));
  EXPECT_TRUE(test::throws_error([&] { take(z, z); }, {"[take]", "indices must be integers"}));
}

// numpy's special values: sign(0) = 0, z^0 = 1, 0^w = 0 for real w > 0 and
// NaN otherwise; orderings are lexicographic and a NaN operand of
// maximum / minimum wins.
TEST(Complex, SignPowerAndOrderingEdgeCases) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  array z(std::vector<complex64_t>{{0, 0}, {3, -4}, {-2, 0}, {0, 5}}, {4});
  array sz = sign(z);
  auto s = sz.data<complex64_t>();
  EXPECT_EQ(s[0], complex64_t(0, 0));
  EXPECT_NEAR(s[1].re, 0.6f, 1e-7f);
  EXPECT_NEAR(s[1].im, -0.8f, 1e-7f);
  EXPECT_EQ(s[2], complex64_t(-1, 0));
  EXPECT_EQ(s[3], complex64_t(0, 1));

  array base(std::vector<complex64_t>{{0, 0}, {0, 0}, {0, 0}, {2, 0}, {0, 1}}, {5});
  array ex(std::vector<complex64_t>{{0, 0}, {2, 0}, {-1, 0}, {0, 0}, {2, 0}}, {5});
  array pz = power(base, ex);
  auto p = pz.data<complex64_t>();
  EXPECT_EQ(p[0], complex64_t(1, 0));
  EXPECT_EQ(p[1], complex64_t(0, 0));
  EXPECT_TRUE(std::isnan(p[2].re) && std::isnan(p[2].im));
  EXPECT_EQ(p[3], complex64_t(1, 0));
  EXPECT_NEAR(p[4].re, -1.0f, 1e-6f);  // i^2
  EXPECT_NEAR(p[4].im, 0.0f, 1e-6f);

  array a(std::vector<complex64_t>{{1, 2}, {1, 2}, {1, 2}, {0, 9}, {nan, 0}, {1, 0}}, {6});
  array b(std::vector<complex64_t>{{1, 3}, {1, 2}, {1, 1}, {1, -9}, {0, 0}, {0, nan}}, {6});
  array lt_a = less(a, b), le_a = less_equal(a, b), gt_a = greater(a, b);
  auto lt = lt_a.data<bool>();
  auto le = le_a.data<bool>();
  auto gt = gt_a.data<bool>();
  std::vector<bool> want_lt{true, false, false, true, false, false}, want_le{true, true, false, true, false, false},
      want_gt{false, false, true, false, false, true};  // MLX's lexicographic order: 1 > 0 decides
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(lt[i], want_lt[i]) << i;
    EXPECT_EQ(le[i], want_le[i]) << i;
    EXPECT_EQ(gt[i], want_gt[i]) << i;
  }
  array mx_a = maximum(a, b), mn_a = minimum(a, b);
  auto mx = mx_a.data<complex64_t>();
  auto mn = mn_a.data<complex64_t>();
  EXPECT_EQ(mx[0], complex64_t(1, 3));
  EXPECT_EQ(mn[0], complex64_t(1, 2));
  EXPECT_EQ(mx[2], complex64_t(1, 2));
  EXPECT_EQ(mx[3], complex64_t(1, -9));
  EXPECT_TRUE(std::isnan(mx[4].re) && std::isnan(mn[4].re));
  EXPECT_TRUE(std::isnan(mx[5].im) && std::isnan(mn[5].im));
}

TEST(Complex, SaveAndLoad) {
  auto dir = std::filesystem::temp_directory_path() / ("kiln_complex_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  array z = astype(test::random_array({3, 4}), complex64) * array(complex64_t(0.5f, -2.0f));
  save((dir / "z.npy").string(), transpose(z));
  array back = load((dir / "z.npy").string());
  EXPECT_EQ(back.dtype(), complex64);
  EXPECT_TRUE(array_equal(back, transpose(z)).item<bool>());
  save_safetensors((dir / "z.safetensors").string(), {{"z", z}});
  auto [loaded, meta] = load_safetensors((dir / "z.safetensors").string());
  EXPECT_EQ(loaded.at("z").dtype(), complex64);
  EXPECT_TRUE(array_equal(loaded.at("z"), z).item<bool>());
  std::filesystem::remove_all(dir);
}

TEST(Complex, CompileLeavesComplexUnfused) {
  auto f = [](const std::vector<array>& x) {
    array z = astype(x[0], complex64) * array(complex64_t(0.0f, 1.0f));
    return std::vector<array>{abs(exp(z) + z) * x[0] + x[0]};
  };
  array x = test::random_array({5, 6});
  auto want = f({x})[0];
  auto got = compile(f)({x})[0];
  EXPECT_TRUE(test::all_close(got, test::to_double(want), 1e-6));
}

TEST(Complex, GradThroughComplexValues) {
  // f(x) = sum |x + i x^2|^2 = sum x^2 + x^4; f' = 2x + 4x^3.
  auto f = [](const array& x) {
    array z = astype(x, complex64) + array(complex64_t(0.0f, 1.0f)) * square(x);
    return sum(real(z * conjugate(z)));
  };
  array x = test::random_array({6}, float32, -1, 1);
  std::vector<double> want;
  for (double v : test::to_double(x)) want.push_back(2 * v + 4 * v * v * v);
  EXPECT_TRUE(test::all_close(grad(f)(x), want, 1e-5, 1e-6));
  // Through matmul and abs: d/dx sum |A x| with complex A.
  array a = astype(test::random_array({3, 4}), complex64) * array(complex64_t(0.6f, 0.8f));
  auto g = [a](const array& v) { return sum(abs(matmul(a, astype(v, complex64)))); };
  array v = test::random_array({4});
  array gv = grad(g)(v);
  auto vv = test::to_double(v);
  std::vector<double> fd;
  for (int i = 0; i < 4; ++i) {
    std::vector<double> p = vv, m = vv;
    p[i] += 1e-2, m[i] -= 1e-2;
    fd.push_back((g(array(p, {4}, float32)).item<double>() - g(array(m, {4}, float32)).item<double>()) / 2e-2);
  }
  EXPECT_TRUE(test::all_close(gv, fd, 1e-2, 1e-2));
}

}  // namespace
}  // namespace kiln
