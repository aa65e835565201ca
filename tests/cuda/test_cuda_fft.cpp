// complex64 ops and kiln::fft on the GPU against the CPU (label `cuda`):
// every complex elementwise op, the reductions, matmul and layout ops on
// contiguous, transposed and broadcast inputs; every fft function on odd,
// even and prime sizes and several axes; a transform inside a CUDA graph
// replayed with new inputs (the cuFFT plan made before the capture, its
// work area from Kiln's scratch memory). Skips without a GPU.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "test_util.h"

namespace kiln {
namespace {

class GpuComplex : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!is_available(Device::gpu)) GTEST_SKIP() << "no GPU available for the complex64 / fft tests";
  }
};

array random_complex(const Shape& shape) {
  return astype(test::random_array(shape), complex64) + array(complex64_t(0.0f, 1.0f)) * test::random_array(shape);
}

// The same function on the GPU and the CPU: real and imaginary parts agree
// to a float tolerance relative to the largest magnitude.
void expect_gpu_matches_cpu(const std::string& what, const std::function<array(Device)>& f, double rtol = 1e-5) {
  SCOPED_TRACE(what);
  array g = f(Device::gpu), c = f(Device::cpu);
  ASSERT_EQ(g.shape(), c.shape());
  ASSERT_EQ(g.dtype(), c.dtype());
  std::vector<double> gr, gi, cr, ci;
  if (g.dtype() == complex64) {
    gr = test::to_double(real(g, Device::cpu)), gi = test::to_double(imag(g, Device::cpu));
    cr = test::to_double(real(c, Device::cpu)), ci = test::to_double(imag(c, Device::cpu));
  } else {
    gr = test::to_double(g), cr = test::to_double(c);
  }
  double scale = 1.0;
  for (double v : cr) scale = std::max(scale, std::fabs(v));
  for (double v : ci) scale = std::max(scale, std::fabs(v));
  EXPECT_TRUE(test::all_close(gr, cr, rtol, rtol * scale));
  EXPECT_TRUE(test::all_close(gi, ci, rtol, rtol * scale));
}

TEST_F(GpuComplex, ElementwiseOps) {
  array a = random_complex({33, 65}), b = random_complex({33, 65}), row = random_complex({65});
  using U = array (*)(const array&, StreamOrDevice);
  const std::pair<const char*, U> unary[] = {{"abs", abs}, {"negative", negative}, {"square", square},
                                             {"sqrt", sqrt}, {"exp", exp},           {"log", log},
                                             {"sin", sin},   {"cos", cos},           {"conjugate", conjugate}};
  for (auto [name, f] : unary) {
    expect_gpu_matches_cpu(std::string(name) + " contiguous", [&](Device d) { return f(a, d); });
    expect_gpu_matches_cpu(std::string(name) + " transposed", [&](Device d) { return f(transpose(a), d); });
  }
  using B = array (*)(const array&, const array&, StreamOrDevice);
  const std::pair<const char*, B> binary[] = {{"add", add},       {"subtract", subtract},   {"multiply", multiply},
                                              {"divide", divide}, {"equal", equal},         {"not_equal", not_equal}};
  for (auto [name, f] : binary) {
    expect_gpu_matches_cpu(std::string(name), [&](Device d) { return f(a, b, d); });
    expect_gpu_matches_cpu(std::string(name) + " broadcast row", [&](Device d) { return f(a, row, d); });
    expect_gpu_matches_cpu(std::string(name) + " transposed", [&](Device d) { return f(transpose(a), transpose(b), d); });
    expect_gpu_matches_cpu(std::string(name) + " scalar", [&](Device d) { return f(a, array(complex64_t(0.5f, -1.0f)), d); });
    expect_gpu_matches_cpu(std::string(name) + " with float32", [&](Device d) { return f(a, real(b), d); });
  }
  expect_gpu_matches_cpu("where", [&](Device d) { return where(greater(real(a), imag(a)), a, b, d); });
  expect_gpu_matches_cpu("real", [&](Device d) { return real(multiply(a, b, d), d); });
  expect_gpu_matches_cpu("imag", [&](Device d) { return imag(multiply(a, b, d), d); });
  expect_gpu_matches_cpu("astype float32", [&](Device d) { return astype(multiply(a, b, d), float32, d); });
  expect_gpu_matches_cpu("astype from float16", [&](Device d) { return astype(astype(real(a), float16), complex64, d); });
}

TEST_F(GpuComplex, ReductionsMatmulAndLayouts) {
  array a = random_complex({7, 33, 20});
  for (int axis : {0, 1, 2}) {
    expect_gpu_matches_cpu("sum axis " + std::to_string(axis), [&](Device d) { return sum(a, axis, false, d); });
    expect_gpu_matches_cpu("prod axis " + std::to_string(axis),
                           [&](Device d) { return prod(multiply(a, array(complex64_t(0.3f, 0.0f)), d), axis, false, d); });
  }
  expect_gpu_matches_cpu("sum all", [&](Device d) { return sum(a, false, d); });
  expect_gpu_matches_cpu("sum transposed", [&](Device d) { return sum(transpose(a), {0, 2}, false, d); });
  expect_gpu_matches_cpu("mean", [&](Device d) { return mean(a, 1, false, d); });
  array m = random_complex({4, 33, 65}), n = random_complex({65, 17});
  expect_gpu_matches_cpu("matmul", [&](Device d) { return matmul(m, n, d); }, 1e-4);
  expect_gpu_matches_cpu("matmul transposed", [&](Device d) { return matmul(transpose(n), swapaxes(m, 1, 2), d); }, 1e-4);
  expect_gpu_matches_cpu("matmul vector", [&](Device d) { return matmul(slice(m, {0, 0, 0}, {1, 1, 65}), n, d); }, 1e-4);
  expect_gpu_matches_cpu("concatenate", [&](Device d) { return concatenate({a, a}, 1, d); });
  expect_gpu_matches_cpu("copy transposed", [&](Device d) { return copy(transpose(a), d); });
  expect_gpu_matches_cpu("slice strided", [&](Device d) { return copy(slice(a, {0, 1, 0}, {7, 33, 20}, {2, 3, 1}), d); });
  expect_gpu_matches_cpu("reshape of transpose", [&](Device d) { return reshape(transpose(a), {-1}, d); });
  expect_gpu_matches_cpu("pad", [&](Device d) { return pad(a, {{1, 2}, {0, 0}, {3, 0}}, array(0.0f), d); });
}

TEST_F(GpuComplex, EveryFftFunction) {
  using fft::FFTNorm;
  for (int n : {1, 7, 12, 100, 101, 1000, 1009}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    array z = random_complex({5, n});
    array x = test::random_array({5, n});
    double tol = 1e-5;
    expect_gpu_matches_cpu("fft", [&](Device d) { return fft::fft(z, -1, FFTNorm::Backward, d); }, tol);
    expect_gpu_matches_cpu("ifft", [&](Device d) { return fft::ifft(z, -1, FFTNorm::Backward, d); }, tol);
    expect_gpu_matches_cpu("fft axis 0", [&](Device d) { return fft::fft(z, 0, FFTNorm::Backward, d); }, tol);
    expect_gpu_matches_cpu("rfft", [&](Device d) { return fft::rfft(x, -1, FFTNorm::Backward, d); }, tol);
    if (n > 1) {
      expect_gpu_matches_cpu("irfft", [&](Device d) { return fft::irfft(z, -1, FFTNorm::Backward, d); }, tol);
      expect_gpu_matches_cpu("irfft odd n", [&](Device d) { return fft::irfft(z, 2 * n - 1, -1, FFTNorm::Backward, d); },
                             tol);
    }
    expect_gpu_matches_cpu("fft n pad", [&](Device d) { return fft::fft(z, n + 3, -1, FFTNorm::Backward, d); }, tol);
    expect_gpu_matches_cpu("fft transposed", [&](Device d) { return fft::fft(transpose(z), -1, FFTNorm::Ortho, d); }, tol);
  }
  array z3 = random_complex({6, 9, 10});
  array x3 = test::random_array({6, 9, 10});
  expect_gpu_matches_cpu("fft2", [&](Device d) { return fft::fft2(z3, {-2, -1}, FFTNorm::Backward, d); });
  expect_gpu_matches_cpu("ifft2 s", [&](Device d) { return fft::ifft2(z3, {5, 11}, {0, 2}, FFTNorm::Backward, d); });
  expect_gpu_matches_cpu("fftn", [&](Device d) { return fft::fftn(z3, FFTNorm::Forward, d); });
  expect_gpu_matches_cpu("ifftn", [&](Device d) { return fft::ifftn(z3, FFTNorm::Backward, d); });
  expect_gpu_matches_cpu("rfft2", [&](Device d) { return fft::rfft2(x3, {-2, -1}, FFTNorm::Backward, d); });
  expect_gpu_matches_cpu("rfftn", [&](Device d) { return fft::rfftn(x3, FFTNorm::Backward, d); });
  expect_gpu_matches_cpu("irfft2", [&](Device d) { return fft::irfft2(z3, {-2, -1}, FFTNorm::Backward, d); });
  expect_gpu_matches_cpu("irfftn s", [&](Device d) { return fft::irfftn(z3, {6, 4, 9}, {0, 1, 2}, FFTNorm::Backward, d); });
  expect_gpu_matches_cpu("fftshift", [&](Device d) { return fft::fftshift(z3, d); });
  expect_gpu_matches_cpu("ifftshift", [&](Device d) { return fft::ifftshift(z3, {1}, d); });
  // A broadcast input.
  array row = test::random_array({1, 31});
  expect_gpu_matches_cpu("rfft broadcast", [&](Device d) { return fft::rfft(broadcast_to(row, {4, 31}), -1, FFTNorm::Backward, d); });
  // Gradients on the GPU.
  expect_gpu_matches_cpu("grad of a power spectrum", [&](Device d) {
    auto f = [d](const array& v) { return sum(square(abs(fft::rfft(v, -1, FFTNorm::Backward, d), d), d), false, d); };
    return grad(f)(x3);
  }, 1e-4);
}

TEST_F(GpuComplex, FftInsideReplayedGraphs) {
  // The same step evaluated repeatedly (a CUDA graph recorded once the plan
  // exists, then replayed) with new inputs each time.
  for (int step = 0; step < 4; ++step) {
    array x = test::random_array({8, 100});
    expect_gpu_matches_cpu("step " + std::to_string(step), [&](Device d) {
      array spec = fft::rfft(x, -1, fft::FFTNorm::Backward, d);
      array filtered = multiply(spec, array(complex64_t(0.5f, 0.25f)), d);
      return fft::irfft(filtered, 100, -1, fft::FFTNorm::Backward, d);
    }, 1e-5);
  }
}

}  // namespace
}  // namespace kiln
