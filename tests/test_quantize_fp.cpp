// MLX's microscaling modes (mxfp4, mxfp8, nvfp4): the encodings over every
// code, round trips and products against float64 references, every CPU
// kernel path, MLX's error messages, and MLX itself (mlx[cpu] from PyPI)
// bit for bit when python3 can import it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/common/fp_quant.h"
#include "backend/cpu/cpu_features.h"
#include "kiln/io.h"
#include "kiln/kiln.h"
#include "python_oracle.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::to_double;

struct ModeCase {
  const char* mode;
  int group_size, bits;
};
constexpr ModeCase kModes[] = {{"mxfp4", 32, 4}, {"mxfp8", 32, 8}, {"nvfp4", 16, 4}};

// The e4m3 value of a code from the format's definition (0x7f, 0xff: NaN).
double e4m3_ref(int c) {
  if ((c & 0x7f) == 0x7f) return NAN;
  int e = (c >> 3) & 15, m = c & 7;
  double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (c & 0x80) ? -v : v;
}
double e2m1_ref(int c) {
  int e = (c >> 1) & 3, m = c & 1;
  double v = e == 0 ? m * 0.5 : std::ldexp(1.0 + m / 2.0, e - 1);
  return (c & 8) ? -v : v;
}

TEST(QuantizeFpEncodings, EveryFp8AndFp4CodeDecodesAsItsFormatSays) {
  for (int c = 0; c < 256; ++c) {
    SCOPED_TRACE(c);
    double want = e4m3_ref(c);
    float got = fpq::from_fp8(c);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got));
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want);
    EXPECT_EQ(std::signbit(got), (c & 0x80) != 0);
    EXPECT_EQ(fpq::to_fp8(got), c);  // every other code encodes back to itself
  }
  for (int c = 0; c < 16; ++c) EXPECT_EQ(static_cast<double>(fpq::fp4_value(c)), e2m1_ref(c)) << c;
}

TEST(QuantizeFpEncodings, ToFp8RoundsToNearestEvenAndSaturates) {
  // Between consecutive codes: below the midpoint, at it (ties to the even
  // code), above it; both signs.
  for (int c = 0; c < 0x7e; ++c) {
    double lo = e4m3_ref(c), hi = e4m3_ref(c + 1), mid = (lo + hi) / 2;
    double below = std::nextafter(static_cast<float>(mid), -1.0f), above = std::nextafter(static_cast<float>(mid), 1e9f);
    for (int sign : {1, -1}) {
      SCOPED_TRACE(std::to_string(c) + (sign < 0 ? " negative" : ""));
      int s = sign < 0 ? 0x80 : 0;
      EXPECT_EQ(fpq::to_fp8(static_cast<float>(sign * below)), c | s);
      EXPECT_EQ(fpq::to_fp8(static_cast<float>(sign * above)), (c + 1) | s);
      EXPECT_EQ(fpq::to_fp8(static_cast<float>(sign * mid)), ((c & 1) ? c + 1 : c) | s);
    }
  }
  EXPECT_EQ(fpq::to_fp8(448.0f), 0x7e);
  EXPECT_EQ(fpq::to_fp8(1e30f), 0x7e);
  EXPECT_EQ(fpq::to_fp8(-INFINITY), 0xfe);
  EXPECT_EQ(fpq::to_fp8(NAN), 0x7e);  // MLX's to_fp8 saturates NaN too
  EXPECT_EQ(fpq::to_fp8(1e-30f), 0x00);
  EXPECT_EQ(fpq::to_fp8(-1e-30f), 0x80);
}

// ---- round trips and products against float64 ----

std::vector<double> dequantize_ref(const array& wq, const array& scales, ModeCase m) {
  auto words = to_double(wq), s = to_double(scales);
  int64_t row_words = wq.shape(-1), K = row_words * 32 / m.bits, rows = static_cast<int64_t>(wq.size()) / row_words;
  std::vector<double> out(rows * K);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < K; ++k) {
      uint32_t word = static_cast<uint32_t>(words[r * row_words + k * m.bits / 32]);
      int code = (word >> ((k * m.bits) % 32)) & ((1u << m.bits) - 1);
      int sb = static_cast<int>(s[r * (K / m.group_size) + k / m.group_size]);
      double scale = m.group_size == 16 ? e4m3_ref(sb) : std::ldexp(1.0, sb == 0 ? -127 : sb - 127);
      out[r * K + k] = (m.bits == 8 ? e4m3_ref(code) : e2m1_ref(code)) * scale;
    }
  }
  return out;
}

TEST(QuantizeFp, RoundTripIsWithinTheFormatsError) {
  for (ModeCase m : kModes) {
    for (Dtype t : {float32, bfloat16, float16}) {
      SCOPED_TRACE(std::string(m.mode) + " " + dtype_name(t));
      array w = test::random_array({5, 128}, t, -3.0, 3.0);
      auto q = quantize(w, std::nullopt, std::nullopt, m.mode);
      ASSERT_EQ(q.size(), 2u);
      EXPECT_EQ(q[0].dtype(), uint32);
      EXPECT_EQ(q[0].shape(), (Shape{5, 128 * m.bits / 32}));
      EXPECT_EQ(q[1].dtype(), uint8);
      EXPECT_EQ(q[1].shape(), (Shape{5, 128 / m.group_size}));
      array d = dequantize(q[0], q[1], std::nullopt, std::nullopt, std::nullopt, m.mode, std::nullopt, float32);
      EXPECT_TRUE(test::all_close(d, dequantize_ref(q[0], q[1], m), 0.0, 0.0));
      EXPECT_EQ(dequantize(q[0], q[1], std::nullopt, std::nullopt, std::nullopt, m.mode).dtype(), bfloat16);
      // Each value within half a step of its group's grid, plus the scale's
      // rounding (e8m0 rounds the exponent to nearest: up to sqrt(2) above
      // the range).
      auto wv = to_double(w), dv = to_double(d);
      for (size_t g = 0; g < wv.size() / m.group_size; ++g) {
        double amax = 0;
        for (int k = 0; k < m.group_size; ++k) amax = std::max(amax, std::fabs(wv[g * m.group_size + k]));
        double tol = amax * (m.bits == 4 ? 0.25 * 1.5 : 0.0625 * 1.5);
        for (int k = 0; k < m.group_size; ++k) {
          EXPECT_NEAR(dv[g * m.group_size + k], wv[g * m.group_size + k], tol) << g << " " << k;
        }
      }
    }
  }
}

TEST(QuantizeFp, ZeroGroupsAndGlobalScale) {
  array z = zeros({2, 64});
  for (ModeCase m : kModes) {
    auto q = quantize(z, std::nullopt, std::nullopt, m.mode);
    EXPECT_TRUE(array_equal(q[0], zeros_like(q[0])).item<bool>()) << m.mode;
    // MLX: an all-zero group gets exponent 0 (byte 127), nvfp4 a zero scale.
    EXPECT_TRUE(array_equal(q[1], full(q[1].shape(), m.group_size == 16 ? 0 : 127, uint8)).item<bool>()) << m.mode;
  }
  array w = test::random_array({4, 64}, float32, -5.0, 5.0);
  array g = array(5.0f);
  auto q = quantize(w, std::nullopt, std::nullopt, "nvfp4", g);
  array d = dequantize(q[0], q[1], std::nullopt, std::nullopt, std::nullopt, "nvfp4", g, float32);
  auto ref = dequantize_ref(q[0], q[1], {"nvfp4", 16, 4});
  for (auto& v : ref) v = static_cast<float>(v * (5.0f / 2688.0f));
  EXPECT_TRUE(test::all_close(to_double(d), ref, 1e-6, 0.0));
  EXPECT_TRUE(test::all_close(d, to_double(w), 0.0, 5.0 * 0.25 * 1.5));
}

// x @ dequantize(w) in float64, w [N, K] (transpose) or [K, N].
std::vector<double> product_ref(const array& x, const std::vector<double>& d, int64_t M, int64_t K, int64_t N,
                                bool transpose) {
  auto xv = to_double(x);
  std::vector<double> out(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += xv[m * K + k] * (transpose ? d[n * K + k] : d[k * N + n]);
      out[m * N + n] = acc;
    }
  return out;
}

TEST(QuantizeFp, QuantizedMatmulMatchesFloat64OnEveryCpuPath) {
  for (cpu::CpuTarget level : {cpu::CpuTarget::scalar, cpu::CpuTarget::avx2, cpu::CpuTarget::avx512}) {
    if (level > cpu::cpu_target_detected()) continue;
    cpu::set_cpu_target_override(level);
    for (ModeCase m : kModes) {
      for (bool transpose : {true, false}) {
        for (int M : {1, 2, 5, 8, 9, 33}) {
          for (int64_t K : {64, 96, 48}) {
            if (K % m.group_size != 0) continue;
            SCOPED_TRACE(std::string(cpu::cpu_target_name(level)) + " " + m.mode + (transpose ? " T" : " N") +
                         " M " + std::to_string(M) + " K " + std::to_string(K));
            const int64_t N = 40;
            array w = transpose ? test::random_array({static_cast<int>(N), static_cast<int>(K)}, float32)
                                : test::random_array({static_cast<int>(K), 64});
            int64_t Nw = transpose ? N : 64;
            auto q = quantize(w, std::nullopt, std::nullopt, m.mode);
            array x = test::random_array({M, static_cast<int>(K)}, float32);
            array y = quantized_matmul(x, q[0], q[1], std::nullopt, transpose, std::nullopt, std::nullopt, m.mode);
            EXPECT_EQ(y.shape(), (Shape{M, static_cast<int>(Nw)}));
            auto ref = product_ref(x, dequantize_ref(q[0], q[1], m), M, K, Nw, transpose);
            EXPECT_TRUE(test::all_close(y, ref, 1e-5, 1e-4));
          }
        }
      }
    }
    cpu::clear_cpu_target_override();
  }
}

TEST(QuantizeFp, WithBfloat16XOnEveryCpuPath) {
  // The vdpbf16ps kernels (AVX512-BF16) against the float ones: rows in
  // passes of four and a remainder (N 41), K with a partial last chunk of
  // 128 values (fp4), M 1-8.
  for (ModeCase m : kModes) {
    for (int64_t K : {512, 96, 48, 160}) {
      if (K % m.group_size != 0) continue;
      const int N = 41;
      auto q = quantize(test::random_array({N, static_cast<int>(K)}, float32), std::nullopt, std::nullopt, m.mode);
      const auto d = dequantize_ref(q[0], q[1], m);
      for (int M : {1, 3, 8}) {
        array x = test::random_array({M, static_cast<int>(K)}, bfloat16);
        const auto ref = product_ref(x, d, M, K, N, true);
        for (cpu::CpuTarget level : {cpu::CpuTarget::avx2, cpu::CpuTarget::avx512, cpu::CpuTarget::avx512_bf16}) {
          if (level > cpu::cpu_target_detected()) continue;
          SCOPED_TRACE(std::string(cpu::cpu_target_name(level)) + " " + m.mode + " M " + std::to_string(M) + " K " +
                       std::to_string(K));
          cpu::set_cpu_target_override(level);
          array y = quantized_matmul(x, q[0], q[1], std::nullopt, true, std::nullopt, std::nullopt, m.mode);
          EXPECT_EQ(y.dtype(), bfloat16);
          EXPECT_TRUE(test::all_close(y, ref, 8e-3, 2e-2));
        }
        cpu::clear_cpu_target_override();
      }
    }
  }
}

TEST(QuantizeFp, EveryMxfp8CodeThroughTheProduct) {
  // w's row n holds codes 32 n .. 32 n + 31 in its first group (every code
  // over 8 rows, subnormals and NaN included), scale 1 (e8m0 127); x's row
  // m is the unit vector e_m, so y[m, n] is code 32 n + m's value (NaN on
  // rows 3 and 7, which hold the NaN codes 0x7f and 0xff: 0 * NaN). Every
  // CPU path.
  std::vector<uint32_t> words(8 * 16, 0);
  for (int n = 0; n < 8; ++n) {
    for (int j = 0; j < 32; ++j) words[n * 16 + j / 4] |= static_cast<uint32_t>(32 * n + j) << (8 * (j % 4));
  }
  array wq(words, {8, 16}, uint32);
  array scales(std::vector<uint8_t>(8 * 2, 127), {8, 2}, uint8);
  for (int m0 : {0, 8, 16, 24}) {
    std::vector<float> xv(8 * 64, 0.0f);
    for (int m = 0; m < 8; ++m) xv[m * 64 + m0 + m] = 1.0f;
    array x = astype(array(xv, {8, 64}), bfloat16);
    for (cpu::CpuTarget level : {cpu::CpuTarget::avx2, cpu::CpuTarget::avx512, cpu::CpuTarget::avx512_bf16}) {
      if (level > cpu::cpu_target_detected()) continue;
      cpu::set_cpu_target_override(level);
      auto y = to_double(astype(quantized_matmul(x, wq, scales, std::nullopt, true, 32, 8, "mxfp8"), float64));
      for (int m = 0; m < 8; ++m) {
        for (int n = 0; n < 8; ++n) {
          const int code = 32 * n + m0 + m;
          SCOPED_TRACE(std::string(cpu::cpu_target_name(level)) + " code " + std::to_string(code));
          const double want = static_cast<double>(static_cast<float>(bfloat16_t(static_cast<float>(e4m3_ref(code)))));
          if (n % 4 == 3) {
            EXPECT_TRUE(std::isnan(y[m * 8 + n]));
          } else {
            EXPECT_EQ(y[m * 8 + n], want);
          }
        }
      }
    }
    cpu::clear_cpu_target_override();
  }
}

TEST(QuantizeFp, HalfPrecisionAndFloat64Products) {
  for (ModeCase m : kModes) {
    array w = test::random_array({24, 64}, float32);
    auto q = quantize(w, std::nullopt, std::nullopt, m.mode);
    auto d = dequantize_ref(q[0], q[1], m);
    for (Dtype t : {bfloat16, float16, float64}) {
      for (int M : {1, 12}) {
        SCOPED_TRACE(std::string(m.mode) + " " + dtype_name(t) + " M " + std::to_string(M));
        array x = test::random_array({M, 64}, t);
        array y = quantized_matmul(x, q[0], q[1], std::nullopt, true, std::nullopt, std::nullopt, m.mode);
        EXPECT_EQ(y.dtype(), t);
        double tol = t == float64 ? 1e-12 : t == bfloat16 ? 2e-2 : 2e-3;
        EXPECT_TRUE(test::all_close(y, product_ref(x, d, M, 64, 24, true), tol, tol * 4));
      }
    }
  }
}

TEST(QuantizeFp, BatchedAndGatheredProducts) {
  ModeCase m = kModes[0];
  array w = test::random_array({3, 16, 64}, float32);
  auto q = quantize(w, std::nullopt, std::nullopt, m.mode);
  array x = test::random_array({3, 2, 64}, float32);
  array y = quantized_matmul(x, q[0], q[1], std::nullopt, true, std::nullopt, std::nullopt, m.mode);
  ASSERT_EQ(y.shape(), (Shape{3, 2, 16}));
  array lhs = array({2u, 0u, 1u, 2u}), rhs = array({0u, 2u, 2u, 1u});
  array g = gather_qmm(x, q[0], q[1], std::nullopt, lhs, rhs, true, std::nullopt, std::nullopt, m.mode);
  ASSERT_EQ(g.shape(), (Shape{4, 2, 16}));
  auto d = dequantize_ref(q[0], q[1], m);
  auto xv = to_double(x), gv = to_double(g), yv = to_double(y);
  const uint32_t li[] = {2, 0, 1, 2}, ri[] = {0, 2, 2, 1};
  for (int i = 0; i < 4; ++i)
    for (int r = 0; r < 2; ++r)
      for (int n = 0; n < 16; ++n) {
        double acc = 0, acc_b = 0;
        for (int k = 0; k < 64; ++k) {
          acc += xv[(li[i] * 2 + r) * 64 + k] * d[(ri[i] * 16 + n) * 64 + k];
          if (i < 3) acc_b += xv[(i * 2 + r) * 64 + k] * d[(i * 16 + n) * 64 + k];
        }
        EXPECT_NEAR(gv[(i * 2 + r) * 16 + n], acc, 1e-4);
        if (i < 3) {
          EXPECT_NEAR(yv[(i * 2 + r) * 16 + n], acc_b, 1e-4);
        }
      }
  // The vjp with respect to x is the product with the other orientation.
  auto f = [&](const std::vector<array>& a) {
    return std::vector<array>{sum(quantized_matmul(a[0], q[0], q[1], std::nullopt, true, std::nullopt, std::nullopt,
                                                   m.mode))};
  };
  auto gx = vjp(f, {x}, {array(1.0f)}).second[0];
  array ones_y = ones({3, 2, 16});
  EXPECT_TRUE(test::all_close(gx, to_double(quantized_matmul(ones_y, q[0], q[1], std::nullopt, false, std::nullopt,
                                                             std::nullopt, m.mode)),
                              1e-6, 1e-6));
}

TEST(QuantizeFp, ErrorsAreMlxs) {
  array w = test::random_array({4, 64}, float32);
  auto q = quantize(w, std::nullopt, std::nullopt, "mxfp4");
  EXPECT_TRUE(test::throws_error([&] { quantize(w, 64, std::nullopt, "mxfp4"); },
                                 {"[quantize]", "mxfp4 quantization requires group size 32 but got 64."}));
  EXPECT_TRUE(test::throws_error([&] { quantize(w, std::nullopt, 4, "mxfp8"); },
                                 {"[quantize]", "mxfp8 quantization requires bits to be 8 but got 4."}));
  EXPECT_TRUE(test::throws_error([&] { quantize(w, 32, std::nullopt, "nvfp4"); },
                                 {"[quantize]", "nvfp4 quantization requires group size 16 but got 32."}));
  EXPECT_TRUE(test::throws_error([&] { quantize(w, 64, 4, "affine", array(1.0f)); },
                                 {"[quantize]", "Global scale is only supported for 'nvfp4' quantization mode."}));
  EXPECT_TRUE(test::throws_error([&] { quantize(w, std::nullopt, std::nullopt, "nvfp4", array({1.0f, 2.0f})); },
                                 {"[quantize]", "Global scale must be a scalar"}));
  EXPECT_TRUE(test::throws_error(
      [&] { quantize(w, std::nullopt, std::nullopt, "nvfp4", astype(array(1.0f), float16)); },
      {"[quantize]", "Global scale must have dtype float32 but got float16."}));
  EXPECT_TRUE(test::throws_error([&] { quantize(w, std::nullopt, std::nullopt, "mxfp5"); },
                                 {"[quantize]", "Invalid quantization mode 'mxfp5'."}));
  EXPECT_TRUE(test::throws_error(
      [&] { dequantize(q[0], astype(q[1], float32), std::nullopt, std::nullopt, std::nullopt, "mxfp4"); },
      {"[dequantize]", "Scale type must be uint8 but received type float32."}));
  EXPECT_TRUE(test::throws_error([&] { dequantize(q[0], q[1], q[1], std::nullopt, std::nullopt, "mxfp4"); },
                                 {"[dequantize]", "Biases must be null for quantization mode 'mxfp4'."}));
  EXPECT_TRUE(test::throws_error(
      [&] { dequantize(q[0], q[1], std::nullopt, std::nullopt, std::nullopt, "mxfp4", array(1.0f)); },
      {"[dequantize]", "Global scale is only supported for 'nvfp4' quantization mode."}));
  EXPECT_TRUE(test::throws_error(
      [&] { dequantize(q[0], slice(q[1], {0, 0}, {4, 1}), std::nullopt, std::nullopt, std::nullopt, "mxfp4"); },
      {"[dequantize]", "do not match"}));
  array x = test::random_array({3, 64}, float32);
  EXPECT_TRUE(test::throws_error(
      [&] { quantized_matmul(astype(x, int32), q[0], q[1], std::nullopt, true, std::nullopt, std::nullopt, "mxfp4"); },
      {"[quantized_matmul]", "int32"}));
  EXPECT_TRUE(test::throws_error(
      [&] { quantized_matmul(x, q[0], q[1], std::nullopt, true, 16, std::nullopt, "mxfp4"); },
      {"[quantized_matmul]", "mxfp4 quantization requires group size 32 but got 16."}));
  EXPECT_TRUE(test::throws_error(
      [&] { quantized_matmul(x, q[0], q[1], std::nullopt, true, std::nullopt, std::nullopt, "mxfp8"); },
      {"[quantized_matmul]", "do not match"}));
}

// ---- against MLX itself ----

// MLX quantizes random matrices of every dtype in every mode; Kiln
// re-quantizes the same matrices and must produce the same words and scales
// bit for bit, dequantize MLX's arrays to MLX's values bit for bit, and
// multiply them as MLX does within float32 rounding. Also MLX's to_fp8 /
// from_fp8 over a sweep.
TEST(QuantizeFpMlx, WordsScalesAndDequantizationAreBitIdentical) {
  if (!test::python_runs("import mlx.core")) GTEST_SKIP() << "python3 cannot import mlx.core (pip install mlx[cpu])";
  auto dir = test::scratch_dir("quant_fp_mlx");
  std::unordered_map<std::string, array> inputs;
  for (Dtype t : {float32, bfloat16, float16}) {
    // Wide dynamic range across rows (scales from 2^-20 to 2^12).
    array rows = power(array(2.0f), astype(arange(-20, 12, 1), float32));
    array w = test::random_array({32, 256}, float32, -1.0, 1.0) * reshape(rows, {32, 1});
    // Rows whose group maxima sit just above 6 * 2^k and 448 * 2^k (where
    // the e8m0 exponent's rounding rule shows), ties between fp4 codes, an
    // all-zero row, non-finite values.
    std::vector<float> edge(16 * 256);
    for (int r = 0; r < 16; ++r) {
      for (int k = 0; k < 256; ++k) edge[r * 256 + k] = 0.001f * static_cast<float>((k * 37 + r * 11) % 200 - 100);
      for (int g = 0; g < 8; ++g) {
        edge[r * 256 + g * 32] = std::ldexp(6.0f * (1.0f + std::ldexp(1.0f, -7)), r - 8);
        edge[r * 256 + g * 32 + 5] = std::ldexp(448.0f * (1.0f + std::ldexp(1.0f, -6)), r - 12);
        edge[r * 256 + g * 32 + 9] = std::ldexp(0.75f, r - 8 + (r % 3 ? 0 : 1));
        edge[r * 256 + g * 32 + 17] = -std::ldexp(0.25f, r - 8);
      }
    }
    for (int k = 0; k < 256; ++k) edge[15 * 256 + k] = 0.0f;
    // Groups with inf, NaN, -inf and values near float32's largest.
    edge[10 * 256 + 3] = INFINITY;
    edge[11 * 256 + 40] = NAN;
    edge[12 * 256 + 70] = -INFINITY;
    edge[13 * 256 + 0] = 3e38f;
    edge[13 * 256 + 33] = -3e38f;
    w = concatenate({w, array(edge, Shape{16, 256})}, 0);
    inputs.emplace(std::string("w_") + dtype_name(t), astype(w, t));
  }
  inputs.emplace("x", test::random_array({3, 256}, float32));
  inputs.emplace("g", array(37.5f));
  // Values around every code's midpoints, for to_fp8.
  inputs.emplace("sweep", test::random_array({4096}, float32, -500.0, 500.0) *
                              power(array(2.0f), astype(floor(test::random_array({4096}, float32, -12, 1)), float32)));
  save_safetensors((dir / "in.safetensors").string(), inputs);
  std::string script = R"PY(
import sys, mlx.core as mx
d = sys.argv[1]
a = mx.load(d + '/in.safetensors')
out = {}
for t in ['float32', 'bfloat16', 'float16']:
    w = a['w_' + t]
    for mode in ['mxfp4', 'mxfp8', 'nvfp4', 'nvfp4g']:
        g = a['g'] if mode == 'nvfp4g' else None
        m = mode[:5]
        q, s = mx.quantize(w, mode=m, global_scale=g)
        k = t + '_' + mode
        out['q_' + k], out['s_' + k] = q, s
        out['d_' + k] = mx.dequantize(q, s, mode=m, global_scale=g, dtype=mx.float32 if g is not None else None)
        out['d16_' + k] = mx.dequantize(q, s, mode=m, dtype=mx.float16) if g is None else out['d_' + k]
        if t == 'float32' and g is None:
            out['y_' + k] = mx.quantized_matmul(a['x'], q[:32], s[:32], mode=m)
out['to_fp8'] = mx.to_fp8(a['sweep'])
out['from_fp8'] = mx.from_fp8(mx.arange(256).astype(mx.uint8), dtype=mx.float32)
mx.save_safetensors(d + '/out.safetensors', out)
)PY";
  ASSERT_EQ(test::run_python_in(dir.string(), script), 0) << (dir / "run.py").string();
  auto ref = load_safetensors((dir / "out.safetensors").string()).first;
  for (const char* t : {"float32", "bfloat16", "float16"}) {
    for (std::string mode : {"mxfp4", "mxfp8", "nvfp4", "nvfp4g"}) {
      std::string k = std::string(t) + "_" + mode;
      SCOPED_TRACE(k);
      std::string m = mode.substr(0, 5);
      std::optional<array> g;
      if (mode == "nvfp4g") g = inputs.at("g");
      auto mine = quantize(inputs.at(std::string("w_") + t), std::nullopt, std::nullopt, m, g);
      const array& mq = ref.at("q_" + k);
      const array& ms = ref.at("s_" + k);
      EXPECT_TRUE(array_equal(mine[0], mq).item<bool>()) << "packed words";
      EXPECT_TRUE(array_equal(mine[1], ms).item<bool>()) << "scales";
      std::optional<Dtype> dt;
      if (g) dt = float32;
      array d = dequantize(mq, ms, std::nullopt, std::nullopt, std::nullopt, m, g, dt);
      EXPECT_TRUE(array_equal(d, ref.at("d_" + k), true).item<bool>()) << "dequantize";
      if (!g) {
        array d16 = dequantize(mq, ms, std::nullopt, std::nullopt, std::nullopt, m, std::nullopt, float16);
        EXPECT_TRUE(array_equal(d16, ref.at("d16_" + k), true).item<bool>()) << "dequantize float16";
      }
      if (std::string(t) == "float32" && !g) {
        // The first 32 rows (finite: the edge rows hold inf and NaN).
        array rows_q = slice(mq, {0, 0}, {32, mq.shape(1)}), rows_s = slice(ms, {0, 0}, {32, ms.shape(1)});
        array y = quantized_matmul(inputs.at("x"), rows_q, rows_s, std::nullopt, true, std::nullopt, std::nullopt, m);
        const array& my = ref.at("y_" + k);
        auto yv = to_double(my);
        double scale = 0;
        for (double v : yv) scale = std::max(scale, std::fabs(v));
        EXPECT_TRUE(test::all_close(y, yv, 1e-5, 1e-5 * scale)) << "quantized_matmul";
      }
    }
  }
  auto sweep = to_double(inputs.at("sweep")), to8 = to_double(ref.at("to_fp8"));
  int bad = 0;
  for (size_t i = 0; i < sweep.size(); ++i) bad += fpq::to_fp8(static_cast<float>(sweep[i])) != to8[i];
  EXPECT_EQ(bad, 0) << "to_fp8";
  auto from8 = to_double(ref.at("from_fp8"));
  for (int c = 0; c < 256; ++c) {
    double mine = fpq::from_fp8(c);
    EXPECT_TRUE(mine == from8[c] || (std::isnan(mine) && std::isnan(from8[c]))) << "from_fp8 " << c;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln
