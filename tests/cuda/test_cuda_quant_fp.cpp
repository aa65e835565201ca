// MLX's microscaling modes (mxfp4, mxfp8, nvfp4) on the GPU against the CPU
// (label `cuda`): quantize gives the same words and scales bit for bit on
// every dtype (wide dynamic range, zero groups, nvfp4 with a global scale);
// dequantize the same values bit for bit; quantized_matmul (QMV for
// M <= 8, dequantize + GEMM above; both orientations) and gather_qmm agree
// within the dtype's tolerance; to_fp8 / from_fp8 bit for bit; qqmm's
// rounding of its operands bit for bit, its products within tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/ops_util.h"
#include "core/primitives.h"
#include "core/quantize_checks.h"
#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {
namespace {

class GpuQuantFp : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!is_available(Device::gpu)) GTEST_SKIP() << "no GPU available for the cuda suite";
  }
};

bool same_values(const array& a, const array& b) { return array_equal(a, b, true, Device::cpu).item<bool>(); }

::testing::AssertionResult close(const array& gpu, const array& cpu, double rtol) {
  auto g = to_double(gpu), c = to_double(cpu);
  double scale = 1e-3;
  for (double v : c) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < g.size(); ++i) {
    if (!(std::fabs(g[i] - c[i]) <= rtol * scale)) {
      return ::testing::AssertionFailure() << "element " << i << ": gpu " << g[i] << " cpu " << c[i];
    }
  }
  return ::testing::AssertionSuccess();
}

double rtol_of(Dtype t) { return t == float32 ? 1e-5 : t == float64 ? 1e-12 : t == float16 ? 4e-3 : 3e-2; }

struct Mode {
  const char* name;
  int gs;
};
constexpr Mode kModes[] = {{"mxfp4", 32}, {"mxfp8", 32}, {"nvfp4", 16}};

// Rows of very different magnitudes (2^-20 .. 2^11) and one zero row.
array wide_range(int rows, int cols, Dtype t) {
  array scale = power(array(2.0f), astype(arange(-20, -20 + rows, 1), float32));
  array w = random_array({rows, cols}, float32, -1.0, 1.0) * reshape(scale, {rows, 1});
  w = concatenate({w, zeros({1, cols})}, 0);
  return astype(w, t);
}

TEST_F(GpuQuantFp, QuantizeAndDequantizeAreBitIdentical) {
  for (Dtype t : {float32, bfloat16, float16, float64}) {
    for (const Mode& m : kModes) {
      for (bool global : {false, true}) {
        if (global && std::string(m.name) != "nvfp4") continue;
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + m.name + (global ? " global scale" : ""));
        std::optional<array> g;
        if (global) g = array(11.5f);
        array w = wide_range(32, 256, t);
        auto c = quantize(w, std::nullopt, std::nullopt, m.name, g, Device::cpu);
        auto q = quantize(w, std::nullopt, std::nullopt, m.name, g, Device::gpu);
        ASSERT_EQ(q.size(), 2u);
        EXPECT_TRUE(same_values(c[0], q[0])) << "words";
        EXPECT_TRUE(same_values(c[1], q[1])) << "scales";
        for (Dtype out : {float32, bfloat16, float16, float64}) {
          array dc = dequantize(c[0], c[1], std::nullopt, std::nullopt, std::nullopt, m.name, g, out, Device::cpu);
          array dg = dequantize(c[0], c[1], std::nullopt, std::nullopt, std::nullopt, m.name, g, out, Device::gpu);
          EXPECT_TRUE(same_values(dc, dg)) << "dequantize to " << dtype_name(out);
        }
      }
    }
  }
}

TEST_F(GpuQuantFp, QuantizedMatmulMatchesTheCpu) {
  for (Dtype t : {bfloat16, float16, float32, float64}) {
    for (const Mode& m : kModes) {
      for (bool transpose : {true, false}) {
        for (int M : {1, 3, 8, 33}) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " " + m.name + (transpose ? " transposed" : " plain") + " M " +
                       std::to_string(M));
          Shape ws = transpose ? Shape{40, 384} : Shape{72, 256};
          int K = transpose ? 384 : 72;
          auto q = quantize(random_array(ws, t), std::nullopt, std::nullopt, m.name, std::nullopt, Device::cpu);
          array x = random_array({M, K}, t);
          array c = quantized_matmul(x, q[0], q[1], std::nullopt, transpose, std::nullopt, std::nullopt, m.name,
                                     Device::cpu);
          array g = quantized_matmul(x, q[0], q[1], std::nullopt, transpose, std::nullopt, std::nullopt, m.name,
                                     Device::gpu);
          EXPECT_TRUE(close(g, c, rtol_of(t)));
        }
      }
    }
  }
}

TEST_F(GpuQuantFp, GatherQmmMatchesTheCpu) {
  for (const Mode& m : kModes) {
    SCOPED_TRACE(m.name);
    auto q = quantize(random_array({4, 24, 128}), std::nullopt, std::nullopt, m.name, std::nullopt, Device::cpu);
    array x = random_array({3, 2, 128});
    array lhs = array({2u, 0u, 1u, 1u, 0u}), rhs = array({3u, 0u, 2u, 2u, 1u});
    array c = gather_qmm(x, q[0], q[1], std::nullopt, lhs, rhs, true, std::nullopt, std::nullopt, m.name, false,
                         Device::cpu);
    array g = gather_qmm(x, q[0], q[1], std::nullopt, lhs, rhs, true, std::nullopt, std::nullopt, m.name, false,
                         Device::gpu);
    EXPECT_TRUE(close(g, c, 1e-5));
  }
}

// qqmm rounds x (and a float w) with QuantizeDequantize: the same values on
// both backends bit for bit (wide range, fp4 ties, zero and NaN groups),
// then the products agree within the dtype's tolerance.
TEST_F(GpuQuantFp, QqmmRoundingIsBitIdentical) {
  for (Dtype t : {float32, bfloat16, float16, float64}) {
    for (const Mode& m : kModes) {
      for (bool global : {false, true}) {
        if (global && std::string(m.name) != "nvfp4") continue;
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + m.name + (global ? " global scale" : ""));
        array x = wide_range(24, 256, t);
        array ties = astype(array(std::vector<float>{0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f}, Shape{1, 8}), t);
        x = concatenate({x, reshape(tile(ties, {1, 32}), {1, 256}), full({1, 256}, array(NAN), t)}, 0);
        QuantParams p = detail::quant_mode_params("test", m.name, std::nullopt, std::nullopt, {x});
        std::vector<array> in{x};
        if (global) in.push_back(array(9.5f));
        array rc = make_node<QuantizeDequantize>(x.shape(), t, in, to_stream(Device::cpu), p);
        array rg = make_node<QuantizeDequantize>(x.shape(), t, in, to_stream(Device::gpu), p);
        EXPECT_TRUE(same_values(rc, rg)) << "rounding";
        std::optional<array> gx, gw;
        if (global) gx = array(9.5f), gw = array(2.0f);
        array xs = slice(x, {0, 0}, {24, 256});
        array w = random_array({40, 256}, t);
        array yc = qqmm(xs, w, std::nullopt, std::nullopt, std::nullopt, m.name, gx, gw, Device::cpu);
        array yg = qqmm(xs, w, std::nullopt, std::nullopt, std::nullopt, m.name, gx, gw, Device::gpu);
        EXPECT_TRUE(close(yg, yc, rtol_of(t))) << "float w";
        auto q = quantize(astype(w, float32), std::nullopt, std::nullopt, m.name, gw);
        yc = qqmm(slice(xs, {0, 0}, {1, 256}), q[0], q[1], std::nullopt, std::nullopt, m.name, gx, gw, Device::cpu);
        yg = qqmm(slice(xs, {0, 0}, {1, 256}), q[0], q[1], std::nullopt, std::nullopt, m.name, gx, gw, Device::gpu);
        EXPECT_TRUE(close(yg, yc, rtol_of(t))) << "quantized w, one row";
      }
    }
  }
}

TEST_F(GpuQuantFp, Fp8BridgeIsBitIdentical) {
  array codes = astype(arange(0, 256, 1), uint8);
  for (Dtype t : {float32, bfloat16, float16}) {
    EXPECT_TRUE(same_values(from_fp8(codes, t, Device::cpu), from_fp8(codes, t, Device::gpu))) << dtype_name(t);
    array x = astype(random_array({4096}, float32, -600, 600) *
                         power(array(2.0f), floor(random_array({4096}, float32, -14, 2))),
                     t);
    EXPECT_TRUE(same_values(to_fp8(x, Device::cpu), to_fp8(x, Device::gpu))) << dtype_name(t);
  }
}

}  // namespace
}  // namespace kiln::test
