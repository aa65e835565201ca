// Affine quantization on the GPU against the CPU (label `cuda`): quantize
// gives the same words, scales and biases bit for bit; dequantize the same
// values; quantized_matmul (QMV for M <= 8, dequantize + GEMM above) and
// gather_qmm agree within the dtype's tolerance, for every bits / group
// combination, both orientations and non-contiguous x.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kiln/kiln.h"
#include "test_layouts.h"
#include "test_util.h"

namespace kiln::test {
namespace {

class GpuQuant : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!is_available(Device::gpu)) GTEST_SKIP() << "no GPU available for the cuda suite";
  }
};

bool same_values(const array& a, const array& b) { return array_equal(a, b, Device::cpu).item<bool>(); }

// |gpu - cpu| <= rtol * (sum |x| |w| scale of the row): compared against the
// largest |cpu| value of the output (sums cancel).
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

TEST_F(GpuQuant, QuantizeAndDequantizeAreBitIdentical) {
  for (Dtype t : {float32, bfloat16, float16, float64}) {
    for (int bits : {2, 3, 4, 5, 6, 8}) {
      for (int gs : {32, 64, 128}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " bits " + std::to_string(bits) + " group " + std::to_string(gs));
        array w = random_array({5, 3 * gs}, t);
        auto c = quantize(w, gs, bits, "affine", std::nullopt, Device::cpu);
        auto g = quantize(w, gs, bits, "affine", std::nullopt, Device::gpu);
        for (int i = 0; i < 3; ++i) EXPECT_TRUE(same_values(c[i], g[i])) << "output " << i;
        array dc = dequantize(c[0], c[1], c[2], gs, bits, "affine", std::nullopt, std::nullopt, Device::cpu);
        array dg = dequantize(c[0], c[1], c[2], gs, bits, "affine", std::nullopt, std::nullopt, Device::gpu);
        EXPECT_TRUE(same_values(dc, dg));
      }
    }
  }
}

TEST_F(GpuQuant, QuantizedMatmulMatchesTheCpu) {
  for (Dtype t : {bfloat16, float16, float32, float64}) {
    for (int bits : {2, 3, 4, 5, 6, 8}) {
      for (int gs : {32, 64, 128}) {
        for (bool transpose : {true, false}) {
          for (int M : {1, 3, 8, 33}) {
            SCOPED_TRACE(std::string(dtype_name(t)) + " bits " + std::to_string(bits) + " group " +
                         std::to_string(gs) + (transpose ? " transposed" : " plain") + " M " + std::to_string(M));
            Shape ws = transpose ? Shape{40, 384} : Shape{72, 256};
            int K = transpose ? 384 : 72;
            auto q = quantize(random_array(ws, t), gs, bits, "affine", std::nullopt, Device::cpu);
            array x = random_array({M, K}, t);
            array c = quantized_matmul(x, q[0], q[1], q[2], transpose, gs, bits, "affine", Device::cpu);
            array g = quantized_matmul(x, q[0], q[1], q[2], transpose, gs, bits, "affine", Device::gpu);
            EXPECT_TRUE(close(g, c, rtol_of(t)));
          }
        }
      }
    }
  }
}

// Decode-sized rows take the streaming M = 1 kernel (quantized_qmv.cu)
// only when K holds enough groups (K = 4096: 4 warps; K = 12288: the
// 8-warp configuration of long rows); N = 40 leaves a partial 16-row tile,
// and M = 2 checks the general kernel on the same weights.
TEST_F(GpuQuant, DecodeQmvOnLongRows) {
  for (Dtype t : {bfloat16, float16}) {
    for (int bits : {4, 8}) {
      for (int gs : {32, 64, 128}) {
        for (int K : {4096, 12288}) {
          for (int M : {1, 2}) {
            SCOPED_TRACE(std::string(dtype_name(t)) + " bits " + std::to_string(bits) + " group " +
                         std::to_string(gs) + " K " + std::to_string(K) + " M " + std::to_string(M));
            auto q = quantize(random_array({40, K}, t), gs, bits, "affine", std::nullopt, Device::cpu);
            array x = random_array({M, K}, t);
            array c = quantized_matmul(x, q[0], q[1], q[2], true, gs, bits, "affine", Device::cpu);
            array g = quantized_matmul(x, q[0], q[1], q[2], true, gs, bits, "affine", Device::gpu);
            EXPECT_TRUE(close(g, c, rtol_of(t)));
          }
        }
      }
    }
  }
}

TEST_F(GpuQuant, BatchedAndNonContiguousXAndGatherQmm) {
  auto q = quantize(random_array({3, 48, 128}, bfloat16), 64, 4, "affine", std::nullopt, Device::cpu);
  for (Layout l : kLayouts) {
    array x = make_input({2, 3, 4, 128}, l, [](const Shape& s) { return random_array(s, bfloat16); });
    array c = quantized_matmul(x, q[0], q[1], q[2], true, 64, 4, "affine", Device::cpu);
    array g = quantized_matmul(x, q[0], q[1], q[2], true, 64, 4, "affine", Device::gpu);
    EXPECT_TRUE(close(g, c, 3e-2)) << layout_name(l);
  }
  array x = random_array({4, 2, 128}, float32);
  auto qf = quantize(random_array({3, 48, 128}, float32), 32, 8, "affine", std::nullopt, Device::cpu);
  array lhs = array({3, 0, 1, 2, 2}, {5}, uint32), rhs = array({2, 2, 0, 1, 0}, {5}, uint32);
  array c = gather_qmm(x, qf[0], qf[1], qf[2], lhs, rhs, true, 32, 8, "affine", false, Device::cpu);
  array g = gather_qmm(x, qf[0], qf[1], qf[2], lhs, rhs, true, 32, 8, "affine", false, Device::gpu);
  EXPECT_TRUE(close(g, c, 1e-5));
  // A bad index is an error found on the GPU, not a read out of bounds.
  EXPECT_THROW(gather_qmm(x, qf[0], qf[1], qf[2], lhs, array({7}, {1}, uint32), true, 32, 8, "affine", false,
                          Device::gpu)
                   .eval(),
               Error);
}

}  // namespace
}  // namespace kiln::test
