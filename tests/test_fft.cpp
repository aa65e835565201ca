// kiln::fft against a naive double-precision DFT (tests/fft_reference.h) on
// odd, even and prime sizes, non-contiguous and broadcast inputs, the
// argument errors, and numpy.fft itself as an oracle (skipped where python3
// has no numpy).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "fft_reference.h"
#include "test_layouts.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::cdouble;
using test::CTensor;

// A random complex64 array and its values.
std::pair<array, CTensor> random_complex(const Shape& shape) {
  array re = test::random_array(shape, float32), im = test::random_array(shape, float32);
  CTensor t{shape, {}};
  auto a = test::to_double(re), b = test::to_double(im);
  for (size_t i = 0; i < a.size(); ++i) t.v.push_back({a[i], b[i]});
  return {astype(re, complex64) + array(complex64_t(0.0f, 1.0f)) * im, t};
}

CTensor real_tensor(const array& x) {
  CTensor t{x.shape(), {}};
  for (double v : test::to_double(x)) t.v.push_back(v);
  return t;
}

// Compares a complex64 or float32 result with the reference, to a tolerance
// that grows like float rounding in an FFT: eps * log2(n) of the largest value.
::testing::AssertionResult close_to(const array& got, const CTensor& want, double rtol = 2e-6) {
  if (got.shape() != want.shape) return ::testing::AssertionFailure() << "shape " << test::fmt(got.shape());
  double scale = 1.0;
  for (auto z : want.v) scale = std::max(scale, std::abs(z));
  int n = 1;
  for (int d : want.shape) n = std::max(n, d);
  double tol = rtol * scale * (4.0 + std::log2(static_cast<double>(n)));
  auto re = test::to_double(real(got)), im = test::to_double(imag(got));
  for (size_t i = 0; i < want.v.size(); ++i) {
    double err = std::abs(cdouble(re[i], im[i]) - want.v[i]);
    if (!(err <= tol)) {
      return ::testing::AssertionFailure() << "element " << i << ": got (" << re[i] << ", " << im[i] << "), want "
                                           << want.v[i] << " (tolerance " << tol << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

const int kSizes[] = {1, 2, 7, 12, 100, 101, 1000, 1009};

TEST(Fft, OneDimensionalAgainstNaiveDft) {
  for (int n : kSizes) {
    SCOPED_TRACE("n = " + std::to_string(n));
    auto [z, t] = random_complex({3, n});
    EXPECT_TRUE(close_to(fft::fft(z), test::ref_fftn(t, {n}, {1}, false)));
    EXPECT_TRUE(close_to(fft::ifft(z), test::ref_fftn(t, {n}, {1}, true)));
    array x = test::random_array({3, n});
    CTensor xt = real_tensor(x);
    EXPECT_TRUE(close_to(fft::rfft(x), test::ref_rfftn(xt, {n}, {1})));
    int bins = n / 2 + 1;
    auto [h, ht] = random_complex({3, bins});
    if (n > 1) {
      EXPECT_TRUE(close_to(fft::irfft(h, n, -1), test::ref_irfftn(ht, {n}, {1})));
    }
  }
}

TEST(Fft, RoundTrips) {
  for (int n : {1, 7, 12, 100, 101}) {
    auto [z, t] = random_complex({2, n});
    EXPECT_TRUE(close_to(fft::ifft(fft::fft(z)), t));
    array x = test::random_array({2, n});
    EXPECT_TRUE(close_to(fft::irfft(fft::rfft(x), n, -1), real_tensor(x)));
  }
}

TEST(Fft, PadsAndTruncatesToN) {
  auto [z, t] = random_complex({4, 10});
  for (int n : {1, 3, 10, 17}) {
    EXPECT_TRUE(close_to(fft::fft(z, n, 1), test::ref_fftn(t, {n}, {1}, false)));
    EXPECT_TRUE(close_to(fft::fft(z, n, 0), test::ref_fftn(t, {n}, {0}, false)));
  }
  // irfft's default n is 2 * (m - 1); an odd n reads n / 2 + 1 bins.
  EXPECT_EQ(fft::irfft(z).shape(), (Shape{4, 18}));
  EXPECT_TRUE(close_to(fft::irfft(z, 9, -1), test::ref_irfftn(t, {9}, {1})));
}

TEST(Fft, NonContiguousAndBroadcastInputs) {
  auto [z, t] = random_complex({6, 5});
  // Transposed: the transform along the now-last axis reads with stride 5.
  CTensor tt{{5, 6}, std::vector<cdouble>(30)};
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 5; ++j) tt.v[j * 6 + i] = t.v[i * 5 + j];
  EXPECT_TRUE(close_to(fft::fft(transpose(z)), test::ref_fftn(tt, {6}, {1}, false)));
  EXPECT_TRUE(close_to(fft::fft2(transpose(z)), test::ref_fftn(tt, {5, 6}, {0, 1}, false)));
  // A strided slice (every other row, reversed columns).
  array s = slice(z, {0, 4}, {6, -6}, {2, -1});
  CTensor st{{3, 5}, {}};
  for (int i = 0; i < 6; i += 2)
    for (int j = 4; j >= 0; --j) st.v.push_back(t.v[i * 5 + j]);
  EXPECT_TRUE(close_to(fft::fft(s), test::ref_fftn(st, {5}, {1}, false)));
  // A broadcast row: every row transforms alike.
  array row = test::random_array({7});
  array b = broadcast_to(row, {4, 7});
  CTensor bt = real_tensor(b);
  EXPECT_TRUE(close_to(fft::rfft(b), test::ref_rfftn(bt, {7}, {1})));
  EXPECT_TRUE(close_to(fft::fftn(b), test::ref_fftn(bt, {4, 7}, {0, 1}, false)));
}

TEST(Fft, MultiDimensional) {
  auto [z, t] = random_complex({3, 4, 5});
  EXPECT_TRUE(close_to(fft::fftn(z), test::ref_fftn(t, {3, 4, 5}, {0, 1, 2}, false)));
  EXPECT_TRUE(close_to(fft::ifftn(z, {5, 2}, {2, 0}), test::ref_fftn(t, {5, 2}, {2, 0}, true)));
  array x = test::random_array({3, 4, 5});
  CTensor xt = real_tensor(x);
  EXPECT_TRUE(close_to(fft::rfftn(x), test::ref_rfftn(xt, {3, 4, 5}, {0, 1, 2})));
  EXPECT_TRUE(close_to(fft::rfft2(x, {4, 3}, {2, 1}), test::ref_rfftn(xt, {4, 3}, {2, 1})));
  EXPECT_TRUE(close_to(fft::irfftn(z, {3, 4, 7}, {0, 1, 2}), test::ref_irfftn(t, {3, 4, 7}, {0, 1, 2})));
  EXPECT_TRUE(close_to(fft::irfft2(z), test::ref_irfftn(t, {4, 8}, {1, 2})));
}

TEST(Fft, IntegerAndFloat64InputsAreCast) {
  array xi = astype(test::random_array({8}, float32, -5, 5), int32);
  array xd = astype(xi, float64);
  EXPECT_EQ(fft::fft(xi).dtype(), complex64);
  EXPECT_EQ(fft::rfft(xd).dtype(), complex64);
  EXPECT_TRUE(close_to(fft::rfft(xi), test::ref_rfftn(real_tensor(xd), {8}, {0})));
  EXPECT_EQ(fft::irfft(fft::rfft(xd)).dtype(), float32);
}

TEST(Fft, ShiftsAndFrequencies) {
  array x = arange(10);
  EXPECT_TRUE(test::all_close(fft::fftshift(x), {5, 6, 7, 8, 9, 0, 1, 2, 3, 4}, 0.0));
  EXPECT_TRUE(test::all_close(fft::ifftshift(fft::fftshift(arange(7))), test::to_double(arange(7)), 0.0));
  EXPECT_TRUE(test::all_close(fft::fftfreq(5), {0, 0.2, 0.4, -0.4, -0.2}, 1e-7));
  EXPECT_TRUE(test::all_close(fft::rfftfreq(6, 2.0), {0, 1.0 / 12, 2.0 / 12, 3.0 / 12}, 1e-7));
}

TEST(Fft, BadArgumentsThrowNamingTheOp) {
  auto [z, t] = random_complex({3, 4});
  EXPECT_TRUE(test::throws_error([&] { fft::fft(z, 2); }, {"[fft]", "axis 2", "(3,4) complex64"}));
  EXPECT_TRUE(test::throws_error([&] { fft::fftn(z, {0, -2}); }, {"[fftn]", "repeated axes"}));
  EXPECT_TRUE(test::throws_error([&] { fft::fft(z, 0, -1); }, {"[fft]", "number of points"}));
  EXPECT_TRUE(test::throws_error([&] { fft::ifft2(z, {3}, {0, 1}); }, {"[ifft2]", "1 sizes", "2 axes"}));
  EXPECT_TRUE(test::throws_error([&] { fft::fft(array(1.0f)); }, {"[fft]", "at least one dimension"}));
  // irfft of one bin has the default n 0.
  EXPECT_TRUE(test::throws_error([&] { fft::irfft(ones({2, 1}, complex64)); }, {"[irfft]", "number of points"}));
  EXPECT_TRUE(test::throws_error([&] { fft::fftshift(z, {3}); }, {"[fftshift]", "axis 3"}));
  EXPECT_TRUE(test::throws_error([&] { fft::fftfreq(0); }, {"[fftfreq]"}));
}

TEST(Fft, GradientOfAPowerSpectrum) {
  // d/dx sum |rfft(x)|^2 by central differences in float32 vs grad.
  array x = test::random_array({9});
  auto f = [](const array& v) { return sum(square(abs(fft::rfft(v)))); };
  array g = grad(f)(x);
  auto xv = test::to_double(x);
  std::vector<double> fd;
  for (size_t i = 0; i < xv.size(); ++i) {
    auto shifted = [&](double h) {
      std::vector<double> y = xv;
      y[i] += h;
      return f(array(y, {9}, float32)).item<double>();
    };
    fd.push_back((shifted(1e-2) - shifted(-1e-2)) / 2e-2);
  }
  EXPECT_TRUE(test::all_close(g, fd, 2e-2, 2e-2));
}

// ---- numpy.fft as the oracle ----

bool have_numpy() { return std::system("python3 -c 'import numpy' >/dev/null 2>&1") == 0; }

TEST(Fft, MatchesNumpy) {
  if (!have_numpy()) GTEST_SKIP() << "python3 with numpy is not installed";
  auto dir = std::filesystem::temp_directory_path() / ("kiln_fft_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string d = dir.string();
  auto [z, t] = random_complex({6, 13});
  array x = test::random_array({5, 12});
  save(d + "/z.npy", z);
  save(d + "/x.npy", x);
  std::ofstream(d + "/ref.py") << "import numpy as np\nd = '" << d << "'\n" << R"(
z = np.load(d + '/z.npy'); x = np.load(d + '/x.npy')
assert z.dtype == np.complex64
outs = {
  'fft': np.fft.fft(z), 'ifft_n': np.fft.ifft(z, n=9, axis=0), 'fft2': np.fft.fft2(z, s=(4, 15), axes=(0, 1)),
  'ifftn': np.fft.ifftn(z), 'rfft': np.fft.rfft(x), 'rfft2': np.fft.rfft2(x, s=(7, 5), axes=(0, 1)),
  'irfft': np.fft.irfft(z), 'irfft_odd': np.fft.irfft(z, n=11), 'irfftn': np.fft.irfftn(z, s=(6, 9), axes=(0, 1)),
  'fft_ortho': np.fft.fft(z, norm='ortho'), 'ifft_forward': np.fft.ifft(z, norm='forward'),
  'fftshift': np.fft.fftshift(z, axes=(1,)),
}
for k, v in outs.items():
    np.save(d + '/' + k + '.npy', v.astype(np.complex64))
)";
  ASSERT_EQ(std::system(("python3 " + d + "/ref.py").c_str()), 0);
  using fft::FFTNorm;
  const std::vector<std::pair<std::string, array>> ours = {
      {"fft", fft::fft(z)},
      {"ifft_n", fft::ifft(z, 9, 0)},
      {"fft2", fft::fft2(z, {4, 15}, {-2, -1})},
      {"ifftn", fft::ifftn(z)},
      {"rfft", fft::rfft(x)},
      {"rfft2", fft::rfft2(x, {7, 5}, {-2, -1})},
      {"irfft", fft::irfft(z)},
      {"irfft_odd", fft::irfft(z, 11, -1)},
      {"irfftn", fft::irfftn(z, {6, 9}, {-2, -1})},
      {"fft_ortho", fft::fft(z, -1, FFTNorm::Ortho)},
      {"ifft_forward", fft::ifft(z, -1, FFTNorm::Forward)},
      {"fftshift", fft::fftshift(z, {1})},
  };
  for (const auto& [name, got] : ours) {
    SCOPED_TRACE(name);
    array want = load(d + "/" + name + ".npy");
    ASSERT_EQ(want.dtype(), complex64);
    CTensor wt{want.shape(), {}};
    auto re = test::to_double(real(want)), im = test::to_double(imag(want));
    for (size_t i = 0; i < re.size(); ++i) wt.v.push_back({re[i], im[i]});
    EXPECT_TRUE(close_to(got, wt, 4e-6));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln
