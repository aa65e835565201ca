// Affine quantization (quantize, dequantize, quantized_matmul, gather_qmm)
// against float64 references of MLX's math, and against MLX itself (mlx[cpu]
// from PyPI) when python3 can import it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "kiln/io.h"
#include "kiln/kiln.h"
#include "python_oracle.h"
#include "test_layouts.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::to_double;

constexpr int kBits[] = {2, 3, 4, 5, 6, 8};
constexpr int kGroups[] = {32, 64, 128};

// Value k of a row of packed words (the bit-stream layout of MLX).
uint32_t unpack_ref(const std::vector<uint32_t>& words, int64_t row_words, int64_t r, int64_t k, int bits) {
  uint32_t v = 0;
  for (int b = 0; b < bits; ++b) {
    int64_t bit = k * bits + b;
    v |= ((words[r * row_words + bit / 32] >> (bit % 32)) & 1u) << b;
  }
  return v;
}

std::vector<uint32_t> words_of(const array& w) {
  array c = contiguous(w);
  c.eval();
  return std::vector<uint32_t>(c.data<uint32_t>(), c.data<uint32_t>() + c.size());
}

// q, scale and bias of every element, in float64.
struct Unpacked {
  std::vector<double> q, s, b;
};
Unpacked unpack_all(const array& wq, const array& scales, const array& biases, int group_size, int bits) {
  auto words = words_of(wq);
  auto s = to_double(scales), b = to_double(biases);
  int64_t row_words = wq.shape(-1), K = row_words * 32 / bits, rows = static_cast<int64_t>(wq.size()) / row_words;
  Unpacked u;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < K; ++k) {
      int64_t g = r * (K / group_size) + k / group_size;
      u.q.push_back(unpack_ref(words, row_words, r, k, bits));
      u.s.push_back(s[g]);
      u.b.push_back(b[g]);
    }
  }
  return u;
}

// MLX's affine quantization of one group, in float as MLX computes it.
void quantize_group_ref(const float* x, int gs, int bits, std::vector<uint32_t>& q, float& scale, float& bias) {
  float n_bins = static_cast<float>((1 << bits) - 1);
  float lo = x[0], hi = x[0];
  for (int k = 1; k < gs; ++k) {
    lo = std::min(lo, x[k]);
    hi = std::max(hi, x[k]);
  }
  bool low_edge = std::fabs(lo) > std::fabs(hi);
  scale = std::max((hi - lo) / n_bins, 1e-7f);
  scale = low_edge ? scale : -scale;
  float edge = low_edge ? lo : hi;
  float q0 = std::rint(edge / scale);
  bias = 0.0f;
  if (q0 != 0.0f) {
    scale = edge / q0;
    bias = edge;
  }
  q.resize(gs);
  for (int k = 0; k < gs; ++k) {
    float v = std::rint((x[k] - bias) / scale);
    q[k] = static_cast<uint32_t>(std::min(std::max(v, 0.0f), n_bins));
  }
}

TEST(Quantize, MatchesMlxArithmeticForEveryBitsAndGroup) {
  for (int bits : kBits) {
    for (int gs : kGroups) {
      SCOPED_TRACE("bits " + std::to_string(bits) + " group " + std::to_string(gs));
      array w = test::random_array({3, 5, 2 * gs}, float32, -1.5, 2.5);
      auto out = quantize(w, gs, bits);
      ASSERT_EQ(out.size(), 3u);
      EXPECT_EQ(out[0].dtype(), uint32);
      EXPECT_EQ(out[0].shape(), (Shape{3, 5, 2 * gs * bits / 32}));
      EXPECT_EQ(out[1].shape(), (Shape{3, 5, 2}));
      EXPECT_EQ(out[1].dtype(), float32);
      auto u = unpack_all(out[0], out[1], out[2], gs, bits);
      w.eval();
      const float* x = w.data<float>();
      for (int64_t g = 0; g < static_cast<int64_t>(w.size()) / gs; ++g) {
        std::vector<uint32_t> q;
        float s, b;
        quantize_group_ref(x + g * gs, gs, bits, q, s, b);
        ASSERT_EQ(u.s[g * gs], s) << "group " << g;
        ASSERT_EQ(u.b[g * gs], b) << "group " << g;
        for (int k = 0; k < gs; ++k) ASSERT_EQ(u.q[g * gs + k], q[k]) << "group " << g << " element " << k;
      }
    }
  }
}

TEST(Quantize, RoundTripErrorIsAtMostHalfAStepInsideTheRange) {
  for (int bits : kBits) {
    for (Dtype t : {float32, bfloat16, float16}) {
      SCOPED_TRACE("bits " + std::to_string(bits) + " " + dtype_name(t));
      array w = test::random_array({7, 128}, t, -3.0, 1.0);
      auto out = quantize(w, 64, bits);
      array back = dequantize(out[0], out[1], out[2], 64, bits);
      EXPECT_EQ(back.dtype(), t);
      auto wv = to_double(w), bv = to_double(back);
      auto u = unpack_all(out[0], out[1], out[2], 64, bits);
      double n_bins = (1 << bits) - 1;
      for (size_t i = 0; i < wv.size(); ++i) {
        double s = std::fabs(u.s[i]);
        // The range [b, b + n_bins * s] (s may be negative) and the distance
        // of w outside it (clipped values).
        double lo = std::min(u.b[i], u.b[i] + n_bins * u.s[i]), hi = std::max(u.b[i], u.b[i] + n_bins * u.s[i]);
        double outside = std::max({0.0, lo - wv[i], wv[i] - hi});
        double bound = 0.5 * s + outside + test::tolerance(t) * (std::fabs(wv[i]) + 1.0);
        ASSERT_LE(std::fabs(bv[i] - wv[i]), bound) << "element " << i;
      }
    }
  }
}

TEST(Quantize, DequantizeIsQTimesScalePlusBiasRoundedLikeMlx) {
  for (int bits : kBits) {
    for (Dtype t : {float32, bfloat16, float16}) {
      SCOPED_TRACE("bits " + std::to_string(bits) + " " + dtype_name(t));
      array w = test::random_array({4, 256}, t);
      auto out = quantize(w, 32, bits);
      array back = dequantize(out[0], out[1], out[2], 32, bits);
      auto u = unpack_all(out[0], out[1], out[2], 32, bits);
      // (q * s) rounded to t, then + b in float (MLX's half-type
      // arithmetic) rounded to t.
      array prod = astype(astype(array(u.q, {4, 256}, float64) * array(u.s, {4, 256}, float64), t), float32);
      array want = astype(prod + astype(array(u.b, {4, 256}, float64), float32), t);
      EXPECT_TRUE(test::all_close(back, to_double(want), 0.0));
      // dtype casts the result.
      EXPECT_EQ(dequantize(out[0], out[1], out[2], 32, bits, "affine", std::nullopt, float32).dtype(), float32);
    }
  }
}

TEST(Quantize, DequantizeSimdAndScalarPathsAgreeBitForBit) {
  // Random words and scales with zeros, subnormals, infinities and NaN
  // among them: the AVX-512 path (bits 2, 4, 8) rounds exactly as the
  // scalar loop, for every group size and every float dtype.
  std::mt19937 rng(7);
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                               0x3f800000u, 0x00800000u, 0x477fe000u};
  for (int bits : {2, 4, 8}) {
    for (int gs : {32, 64, 128}) {
      for (Dtype t : {float32, bfloat16, float16}) {
        SCOPED_TRACE("bits " + std::to_string(bits) + " group " + std::to_string(gs) + " " + dtype_name(t));
        const int rows = 5, K = 3 * gs, G = K / gs;
        std::vector<uint32_t> words(rows * K * bits / 32);
        for (auto& v : words) v = rng();
        std::vector<float> sb(2 * rows * G);
        for (size_t i = 0; i < sb.size(); ++i) {
          uint32_t u = i % 4 == 3 ? specials[rng() % std::size(specials)] : 0;
          float f = std::normal_distribution<float>(0.0f, 1.0f)(rng);
          if (i % 4 == 3) std::memcpy(&f, &u, 4);
          sb[i] = f;
        }
        array w(words, {rows, K * bits / 32}, uint32);
        array s = astype(array(std::vector<float>(sb.begin(), sb.begin() + rows * G), {rows, G}), t);
        array b = astype(array(std::vector<float>(sb.begin() + rows * G, sb.end()), {rows, G}), t);
        cpu::set_cpu_target_override(cpu::CpuTarget::avx2);
        array scalar = view(dequantize(w, s, b, gs, bits), t == float32 ? uint32 : uint16);
        scalar.eval();
        cpu::clear_cpu_target_override();
        array simd = view(dequantize(w, s, b, gs, bits), t == float32 ? uint32 : uint16);
        EXPECT_TRUE(array_equal(scalar, simd).item<bool>());
      }
    }
  }
}

TEST(Quantize, NonContiguousInputsGiveTheSameResult) {
  array base = test::random_array({128, 6}, float32);
  array w = transpose(base);  // [6, 128], column-major
  auto a = quantize(w, 64, 4);
  auto b = quantize(contiguous(w), 64, 4);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(array_equal(a[i], b[i]).item<bool>());
  array back = dequantize(transpose(transpose(a[0])), a[1], a[2], 64, 4);
  EXPECT_TRUE(array_equal(back, dequantize(b[0], b[1], b[2], 64, 4)).item<bool>());
}

// x [.., K] times the float64 dequantized w, and sum |x| |w| for the tolerance.
struct Reference {
  std::vector<double> value, scale;
};
Reference matmul_ref(const array& x, const array& wq, const array& scales, const array& biases, int gs, int bits,
                     bool transpose) {
  auto u = unpack_all(wq, scales, biases, gs, bits);
  std::vector<double> deq(u.q.size());
  for (size_t i = 0; i < deq.size(); ++i) deq[i] = u.q[i] * u.s[i] + u.b[i];
  int64_t rows = wq.shape(-2), cols = wq.shape(-1) * 32 / bits;  // of the dequantized matrix
  int64_t K = transpose ? cols : rows, N = transpose ? rows : cols;
  auto xv = to_double(x);
  int64_t M = static_cast<int64_t>(xv.size()) / K;
  Reference r{std::vector<double>(M * N), std::vector<double>(M * N)};
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        double wv = transpose ? deq[n * K + k] : deq[k * N + n];
        acc += xv[m * K + k] * wv;
        mag += std::fabs(xv[m * K + k] * wv);
      }
      r.value[m * N + n] = acc;
      r.scale[m * N + n] = mag;
    }
  }
  return r;
}

::testing::AssertionResult close_to_ref(const array& got, const Reference& r, double rtol) {
  auto g = to_double(got);
  if (g.size() != r.value.size()) return ::testing::AssertionFailure() << "size " << g.size();
  for (size_t i = 0; i < g.size(); ++i) {
    double err = std::fabs(g[i] - r.value[i]);
    if (!(err <= rtol * (r.scale[i] + 1e-3))) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << g[i] << ", want " << r.value[i]
                                           << " (scale " << r.scale[i] << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// float32: the QMV kernels sum s * (q . x) + b * sum(x) per group, whose two
// terms can cancel (measured up to 2.1e-6 of sum |x w| at K = 128).
double product_rtol(Dtype t) { return t == float32 ? 4e-6 : t == float16 ? 2e-3 : 1.6e-2; }

TEST(QuantizedMatmul, EveryBitsGroupOrientationAndRowCount) {
  for (int bits : kBits) {
    for (int gs : kGroups) {
      for (bool transpose : {true, false}) {
        for (int M : {1, 3, 8, 17}) {
          SCOPED_TRACE("bits " + std::to_string(bits) + " group " + std::to_string(gs) + " transpose " +
                       std::to_string(transpose) + " M " + std::to_string(M));
          // transposed: w [N=24, K=256]; plain: w [K=40, N=256].
          Shape wshape = transpose ? Shape{24, 256} : Shape{40, 256};
          int K = transpose ? 256 : 40;
          auto q = quantize(test::random_array(wshape, float32), gs, bits);
          array x = test::random_array({M, K}, float32);
          array y = quantized_matmul(x, q[0], q[1], q[2], transpose, gs, bits);
          EXPECT_EQ(y.shape(), (Shape{M, transpose ? 24 : 256}));
          EXPECT_TRUE(close_to_ref(y, matmul_ref(x, q[0], q[1], q[2], gs, bits, transpose), product_rtol(float32)));
        }
      }
    }
  }
}

TEST(QuantizedMatmul, HalfTypesBatchedAndNonContiguousX) {
  for (Dtype t : {bfloat16, float16, float32}) {
    for (int M : {1, 5, 20}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " M " + std::to_string(M));
      auto q = quantize(test::random_array({72, 128}, t), 64, 4);
      for (test::Layout l : test::kLayouts) {
        array x = test::make_input({2, M, 128}, l, [t](const Shape& s) { return test::random_array(s, t); });
        array y = quantized_matmul(x, q[0], q[1], q[2]);
        EXPECT_EQ(y.dtype(), t);
        EXPECT_EQ(y.shape(), (Shape{2, M, 72}));
        EXPECT_TRUE(close_to_ref(y, matmul_ref(x, q[0], q[1], q[2], 64, 4, true), product_rtol(t)))
            << test::layout_name(l);
      }
    }
  }
}

// bfloat16 x with M >= 24 rows (7 on AMX) takes the tiled GEMM, which writes
// the bf16 result directly: every bits, both orientations, a batch of x (80
// rows: past the small-M tiles of Bfloat16FewRows).
TEST(QuantizedMatmul, Bfloat16TiledProducts) {
  for (int bits : kBits) {
    for (bool transpose : {true, false}) {
      SCOPED_TRACE("bits " + std::to_string(bits) + " transpose " + std::to_string(transpose));
      Shape wshape = transpose ? Shape{48, 256} : Shape{96, 128};
      int K = transpose ? 256 : 96;
      auto q = quantize(test::random_array(wshape, bfloat16), 32, bits);
      array x = test::random_array({2, 40, K}, bfloat16);
      array y = quantized_matmul(x, q[0], q[1], q[2], transpose, 32, bits);
      EXPECT_EQ(y.dtype(), bfloat16);
      EXPECT_EQ(y.shape(), (Shape{2, 40, transpose ? 48 : 128}));
      EXPECT_TRUE(close_to_ref(y, matmul_ref(x, q[0], q[1], q[2], 32, bits, transpose), product_rtol(bfloat16)));
    }
  }
}

// bf16 x with 7 to 32 rows: on AMX w's dequantized rows stream through tiles
// (try_amx_small_m with a column maker): a partial group of 64 rows of w, 16-
// and 32-row tiles of x.
TEST(QuantizedMatmul, Bfloat16FewRows) {
  for (int bits : kBits) {
    auto q = quantize(test::random_array({100, 288}, bfloat16), 32, bits);
    for (int m : {7, 8, 13, 17, 32}) {
      SCOPED_TRACE("bits " + std::to_string(bits) + " M " + std::to_string(m));
      array x = test::random_array({m, 288}, bfloat16);
      array y = quantized_matmul(x, q[0], q[1], q[2], true, 32, bits);
      EXPECT_EQ(y.shape(), (Shape{m, 100}));
      EXPECT_TRUE(close_to_ref(y, matmul_ref(x, q[0], q[1], q[2], 32, bits, true), product_rtol(bfloat16)));
    }
  }
}

TEST(QuantizedMatmul, VectorXAndBatchedWeightsBroadcast) {
  auto q = quantize(test::random_array({3, 16, 64}, float32), 32, 8);
  array x = test::random_array({2, 1, 4, 64}, float32);
  array y = quantized_matmul(x, q[0], q[1], q[2], true, 32, 8);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4, 16}));
  for (int b = 0; b < 2; ++b) {
    for (int e = 0; e < 3; ++e) {
      array xb = reshape(slice(x, {b, 0, 0, 0}, {b + 1, 1, 4, 64}), {4, 64});
      auto sl = [e](const array& a) { return reshape(slice(a, {e, 0, 0}, {e + 1, a.shape(1), a.shape(2)}), {a.shape(1), a.shape(2)}); };
      array yb = reshape(slice(y, {b, e, 0, 0}, {b + 1, e + 1, 4, 16}), {4, 16});
      EXPECT_TRUE(close_to_ref(yb, matmul_ref(xb, sl(q[0]), sl(q[1]), sl(q[2]), 32, 8, true), 2e-6));
    }
  }
  // A 1-d x.
  auto q2 = quantize(test::random_array({10, 128}, float32));
  array v = test::random_array({128}, float32);
  array yv = quantized_matmul(v, q2[0], q2[1], q2[2]);
  EXPECT_EQ(yv.shape(), (Shape{10}));
  EXPECT_TRUE(close_to_ref(yv, matmul_ref(v, q2[0], q2[1], q2[2], 64, 4, true), 2e-6));
}

TEST(QuantizedMatmul, SimdLevelsAgree) {
  // The AVX512-BF16, AVX-512, AVX2 and generic QMV paths give the same
  // products, with and without a partial last chunk of words.
  for (auto [gs, K, bits] : {std::tuple{128, 384, 4}, std::tuple{32, 352, 4}, std::tuple{32, 352, 8},
                             std::tuple{128, 640, 8}, std::tuple{64, 448, 8}}) {
    // 33 rows: passes of four rows (the one-row bf16 kernel) and a remainder.
    auto q = quantize(test::random_array({33, K}, bfloat16), gs, bits);
    for (int M : {1, 2, 3, 8}) {
      array x = test::random_array({M, K}, bfloat16);
      Reference r = matmul_ref(x, q[0], q[1], q[2], gs, bits, true);
      for (auto level : {cpu::CpuTarget::scalar, cpu::CpuTarget::avx2, cpu::CpuTarget::avx512,
                         cpu::CpuTarget::avx512_bf16}) {
        cpu::set_cpu_target_override(level);
        array y = quantized_matmul(x, q[0], q[1], q[2], true, gs, bits);
        EXPECT_TRUE(close_to_ref(y, r, 1.6e-2)) << cpu::cpu_target_name(level) << " K " << K << " M " << M;
      }
    }
  }
  cpu::clear_cpu_target_override();
}

TEST(QuantizedMatmul, GradientWithRespectToXAndErrorsForTheRest) {
  auto q = quantize(test::random_array({12, 64}, float32), 32, 4);
  array x = test::random_array({3, 64}, float32);
  array ct = test::random_array({3, 12}, float32);
  auto f = [&](const array& v) { return quantized_matmul(v, q[0], q[1], q[2], true, 32, 4); };
  auto [outs, grads] = vjp([&](const std::vector<array>& in) { return std::vector<array>{f(in[0])}; }, {x}, {ct});
  array w = dequantize(q[0], q[1], q[2], 32, 4);
  EXPECT_TRUE(test::all_close(grads[0], to_double(matmul(ct, w)), 1e-5, 1e-5));
  auto [o2, tangent] = jvp([&](const std::vector<array>& in) { return std::vector<array>{f(in[0])}; }, {x}, {x});
  EXPECT_TRUE(test::all_close(tangent[0], to_double(matmul(x, transpose(w))), 1e-5, 1e-5));
  EXPECT_TRUE(test::throws_error(
      [&] {
        vjp([&](const std::vector<array>& in) { return std::vector<array>{quantized_matmul(x, q[0], in[0], q[2], true, 32, 4)}; },
            {q[1]}, {ct});
      },
      {"QuantizedMatmul", "only x"}));
  // vmap over x's leading axis and over stacked weights.
  array xs = test::random_array({2, 3, 64}, float32);
  array ys = vmap(f)(xs);
  EXPECT_TRUE(test::all_close(ys, to_double(matmul(xs, transpose(w))), 1e-5, 1e-5));
  auto qs = quantize(test::random_array({2, 12, 64}, float32), 32, 4);
  auto g = [&](const std::vector<array>& in) {
    return std::vector<array>{quantized_matmul(in[0], in[1], in[2], in[3], true, 32, 4)};
  };
  array ym = vmap(g)({xs, qs[0], qs[1], qs[2]})[0];
  array wm = dequantize(qs[0], qs[1], qs[2], 32, 4);
  EXPECT_TRUE(test::all_close(ym, to_double(matmul(xs, swapaxes(wm, -1, -2))), 1e-5, 1e-5));
}

TEST(GatherQmm, PicksEachRowsExpert) {
  for (bool transpose : {true, false}) {
    Shape ws = transpose ? Shape{4, 16, 64} : Shape{4, 64, 32};
    auto q = quantize(test::random_array(ws, float32), 32, 4);
    array x = test::random_array({3, 2, 64}, float32);
    array lhs = array({2, 0, 1, 1, 0}, {5}, uint32);
    array rhs = array({3, 3, 0, 2, 1}, {5}, int32);
    array y = gather_qmm(x, q[0], q[1], q[2], lhs, rhs, transpose, 32, 4);
    int N = transpose ? 16 : 32;
    ASSERT_EQ(y.shape(), (Shape{5, 2, N}));
    std::vector<int> li = {2, 0, 1, 1, 0}, ri = {3, 3, 0, 2, 1};
    for (int i = 0; i < 5; ++i) {
      auto pick = [](const array& a, int e) {
        return reshape(slice(a, {e, 0, 0}, {e + 1, a.shape(1), a.shape(2)}), {a.shape(1), a.shape(2)});
      };
      array yi = pick(y, i);
      EXPECT_TRUE(close_to_ref(yi, matmul_ref(pick(x, li[i]), pick(q[0], ri[i]), pick(q[1], ri[i]), pick(q[2], ri[i]),
                                              32, 4, transpose), 2e-6))
          << i;
    }
    // Gradient with respect to x: the cotangents summed into each picked row.
    array ct = test::random_array(y.shape(), float32);
    auto grads = vjp([&](const std::vector<array>& in) {
                       return std::vector<array>{gather_qmm(in[0], q[0], q[1], q[2], lhs, rhs, transpose, 32, 4)};
                     },
                     {x}, {ct}).second;
    array w = dequantize(q[0], q[1], q[2], 32, 4);
    array wt = transpose ? swapaxes(w, -1, -2) : w;  // [4, K, N]
    array want = zeros_like(x);
    for (int i = 0; i < 5; ++i) {
      array gi = matmul(reshape(slice(ct, {i, 0, 0}, {i + 1, 2, N}), {2, N}),
                        transpose ? reshape(slice(w, {ri[i], 0, 0}, {ri[i] + 1, N, 64}), {N, 64})
                                  : swapaxes(reshape(slice(wt, {ri[i], 0, 0}, {ri[i] + 1, 64, N}), {64, N}), 0, 1));
      want = slice_update(want, reshape(gi, {1, 2, 64}) + slice(want, {li[i], 0, 0}, {li[i] + 1, 2, 64}),
                          {li[i], 0, 0}, {li[i] + 1, 2, 64});
    }
    EXPECT_TRUE(test::all_close(grads[0], to_double(want), 1e-5, 1e-5));
  }
  // No indices: quantized_matmul.
  auto q = quantize(test::random_array({8, 64}, float32), 32, 4);
  array x = test::random_array({2, 64}, float32);
  EXPECT_TRUE(array_equal(gather_qmm(x, q[0], q[1], q[2], std::nullopt, std::nullopt, true, 32, 4),
                          quantized_matmul(x, q[0], q[1], q[2], true, 32, 4))
                  .item<bool>());
  // An index out of range is an error, not a read out of bounds.
  auto qe = quantize(test::random_array({2, 8, 64}, float32), 32, 4);
  EXPECT_TRUE(test::throws_error(
      [&] { gather_qmm(x, qe[0], qe[1], qe[2], std::nullopt, array({5}, {1}, uint32), true, 32, 4).eval(); },
      {"gather_qmm", "out of range"}));
}

TEST(Quantize, ErrorsNameTheOpAndTheProblem) {
  array w = test::random_array({4, 64}, float32);
  auto q = quantize(w, 32, 4);
  EXPECT_TRUE(test::throws_error([&] { quantize(w, 48, 4); }, {"[quantize]", "group size 48"}));
  EXPECT_TRUE(test::throws_error([&] { quantize(w, 32, 7); }, {"[quantize]", "bits 7"}));
  EXPECT_TRUE(test::throws_error([&] { quantize(w, 32, 1); }, {"[quantize]", "bits 1"}));
  EXPECT_TRUE(test::throws_error([&] { quantize(test::random_array({64}), 32, 4); }, {"[quantize]", "2 dimensions"}));
  EXPECT_TRUE(test::throws_error([&] { quantize(test::random_array({2, 40}), 32, 4); }, {"[quantize]", "multiple"}));
  EXPECT_TRUE(test::throws_error([&] { quantize(test::random_array({2, 64}, int32), 32, 4); }, {"[quantize]", "int32"}));
  EXPECT_TRUE(test::throws_error([&] { quantize(w, 32, 4, "q9_9"); }, {"[quantize]", "Invalid quantization mode 'q9_9'"}));
  EXPECT_TRUE(test::throws_error([&] { dequantize(q[0], q[1], std::nullopt, 32, 4); }, {"[dequantize]", "biases"}));
  EXPECT_TRUE(test::throws_error([&] { dequantize(q[0], q[1], q[2], 64, 4); }, {"[dequantize]", "group_size=64"}));
  EXPECT_TRUE(test::throws_error([&] { dequantize(astype(q[0], int32), q[1], q[2], 32, 4); }, {"[dequantize]", "uint32"}));
  EXPECT_TRUE(test::throws_error([&] { dequantize(q[0], q[1], astype(q[2], float16), 32, 4); },
                                 {"[dequantize]", "same dtype"}));
  EXPECT_TRUE(test::throws_error([&] { dequantize(q[0], q[1], q[2], 32, 4, "affine", std::nullopt, int32); },
                                 {"[dequantize]", "int32"}));
  array x = test::random_array({3, 60}, float32);
  EXPECT_TRUE(test::throws_error([&] { quantized_matmul(x, q[0], q[1], q[2], true, 32, 4); },
                                 {"[quantized_matmul]", "64", "transpose=true"}));
  EXPECT_TRUE(test::throws_error([&] { quantized_matmul(x, q[0], q[1], q[2], false, 32, 4); },
                                 {"[quantized_matmul]", "transpose=false"}));
  EXPECT_TRUE(test::throws_error([&] { quantized_matmul(test::random_array({3, 64}), q[0], q[1], q[1] + q[1], true, 32, 8); },
                                 {"[quantized_matmul]", "bits=8"}));
  EXPECT_TRUE(test::throws_error([&] {
                gather_qmm(test::random_array({3, 64}), q[0], q[1], q[2], array({0.5f}), std::nullopt, true, 32, 4);
              },
                                 {"[gather_qmm]", "integers"}));
}

// ---- against MLX itself ----

// MLX writes "__metadata__": null when a file has no metadata; such a
// file (every MLX-quantized checkpoint) loads.
TEST(QuantizeMlx, SafetensorsWithNullMetadataLoad) {
  auto dir = test::scratch_dir("quant_null_meta");
  std::string header = R"({"__metadata__":null,"a":{"data_offsets":[0,8],"dtype":"F32","shape":[2]}})";
  while (header.size() % 8) header += ' ';
  uint64_t n = header.size();
  float data[2] = {1.5f, -2.0f};
  auto path = (dir / "m.safetensors").string();
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(&n, 8, 1, f);
  std::fwrite(header.data(), 1, header.size(), f);
  std::fwrite(data, 4, 2, f);
  std::fclose(f);
  auto [arrays, meta] = load_safetensors(path);
  EXPECT_TRUE(meta.empty());
  EXPECT_TRUE(test::all_close(arrays.at("a"), {1.5, -2.0}, 0.0));
  std::filesystem::remove_all(dir);
}

TEST(QuantizeMlx, PackedWordsScalesBiasesAndDequantizationAreBitIdentical) {
  if (!test::python_runs("import mlx.core")) GTEST_SKIP() << "python3 cannot import mlx.core (pip install mlx[cpu])";
  auto dir = test::scratch_dir("quant_mlx");
  std::unordered_map<std::string, array> inputs;
  inputs.emplace("w_float32", test::random_array({6, 256}, float32, -2.0, 3.0));
  inputs.emplace("w_bfloat16", test::random_array({6, 256}, bfloat16, -2.0, 3.0));
  inputs.emplace("w_float16", test::random_array({6, 256}, float16, -2.0, 3.0));
  save_safetensors((dir / "in.safetensors").string(), inputs);
  std::string script = R"PY(
import sys, mlx.core as mx
d = sys.argv[1]
w = mx.load(d + '/in.safetensors')
out = {}
for t in ['float32', 'bfloat16', 'float16']:
    for bits in [2, 3, 4, 5, 6, 8]:
        for gs in [32, 64, 128]:
            q, s, b = mx.quantize(w['w_' + t], group_size=gs, bits=bits)
            k = f'{t}_{bits}_{gs}'
            out['q_' + k], out['s_' + k], out['b_' + k] = q, s, b
            out['d_' + k] = mx.dequantize(q, s, b, group_size=gs, bits=bits)
mx.save_safetensors(d + '/out.safetensors', out)
)PY";
  ASSERT_EQ(test::run_python_in(dir.string(), script), 0) << (dir / "run.py").string();
  auto ref = load_safetensors((dir / "out.safetensors").string()).first;
  for (const char* t : {"float32", "bfloat16", "float16"}) {
    for (int bits : kBits) {
      for (int gs : kGroups) {
        std::string k = std::string(t) + "_" + std::to_string(bits) + "_" + std::to_string(gs);
        SCOPED_TRACE(k);
        auto mine = quantize(inputs.at(std::string("w_") + t), gs, bits);
        const array& mq = ref.at("q_" + k);
        const array& ms = ref.at("s_" + k);
        const array& mb = ref.at("b_" + k);
        EXPECT_TRUE(array_equal(mine[0], mq).item<bool>()) << "packed words";
        EXPECT_TRUE(array_equal(mine[1], ms).item<bool>()) << "scales";
        EXPECT_TRUE(array_equal(mine[2], mb).item<bool>()) << "biases";
        // Kiln dequantizes MLX's output to MLX's numbers.
        EXPECT_TRUE(array_equal(dequantize(mq, ms, mb, gs, bits), ref.at("d_" + k)).item<bool>()) << "dequantize";
      }
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln
