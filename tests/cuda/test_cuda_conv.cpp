// Convolutions on the GPU against the CPU (label `cuda`), at sizes the op
// harness does not reach: a ResNet-like 3x3 layer in every float dtype
// (several im2col chunks, the cuBLASLt path), grouped, depthwise and 1x1
// (pointwise) forms, a strided transposed convolution, non-contiguous
// inputs, and the gradients of both operands. The harness's conv cases run
// on the GPU in test_cuda_harness.cpp. Skips where no GPU is present.
#include <gtest/gtest.h>

#include "test_layouts.h"
#include "test_util.h"

namespace kiln {
namespace {

class GpuConv : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!is_available(Device::gpu)) GTEST_SKIP() << "no GPU available for the convolution tests";
  }
};

// The GPU result against the CPU's on the same inputs.
::testing::AssertionResult gpu_matches_cpu(const std::function<array(StreamOrDevice)>& f, double rtol,
                                           double atol) {
  array cpu = f(Device::cpu);
  array gpu = f(Device::gpu);
  if (cpu.shape() != gpu.shape()) return ::testing::AssertionFailure() << "shapes differ";
  return test::all_close(gpu, test::to_double(cpu), rtol, atol);
}

TEST_F(GpuConv, ResNetLayerEveryDtype) {
  array x = random::uniform(-1.f, 1.f, {4, 40, 40, 64});
  array w = random::uniform(-1.f, 1.f, {64, 3, 3, 64});
  for (Dtype t : {float32, float16, bfloat16, float64}) {
    array xt = astype(x, t), wt = astype(w, t);
    eval({xt, wt});
    double tol = t == float64 ? 1e-12 : t == float32 ? 1e-4 : 4 * test::tolerance(t);
    EXPECT_TRUE(gpu_matches_cpu([&](StreamOrDevice s) { return conv2d(xt, wt, {1, 1}, {1, 1}, {1, 1}, 1, s); },
                                tol, 10 * tol))
        << dtype_name(t);
  }
}

TEST_F(GpuConv, GroupedDepthwisePointwiseAndStrided) {
  array x = random::normal({2, 17, 15, 32});
  eval(x);
  struct Case {
    Shape w;
    std::pair<int, int> stride, padding, dilation;
    int groups;
  };
  for (const Case& c : {Case{{48, 3, 3, 8}, {1, 1}, {1, 1}, {1, 1}, 4}, Case{{64, 3, 3, 1}, {2, 2}, {1, 1}, {1, 1}, 32},
                        Case{{24, 1, 1, 32}, {1, 1}, {0, 0}, {1, 1}, 1}, Case{{16, 1, 1, 32}, {2, 2}, {0, 0}, {1, 1}, 1},
                        Case{{8, 5, 3, 32}, {2, 1}, {2, 1}, {2, 3}, 1}}) {
    array w = random::normal(c.w);
    eval(w);
    EXPECT_TRUE(gpu_matches_cpu(
        [&](StreamOrDevice s) { return conv2d(x, w, c.stride, c.padding, c.dilation, c.groups, s); }, 1e-4, 1e-4))
        << test::fmt(c.w) << " groups " << c.groups;
  }
}

TEST_F(GpuConv, TransposedAndNonContiguous) {
  array x = swapaxes(random::normal({2, 12, 9, 16}), 1, 2);  // [2, 9, 12, 16], strided
  array w = random::normal({12, 3, 3, 16});
  eval({x, w});
  EXPECT_TRUE(gpu_matches_cpu(
      [&](StreamOrDevice s) { return conv_transpose2d(x, w, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1, s); }, 1e-4, 1e-4));
  array x3 = random::normal({1, 6, 7, 8, 4});
  array w3 = slice(random::normal({6, 3, 3, 3, 8}), {0, 0, 0, 0, 0}, {6, 3, 3, 3, 8}, {1, 1, 1, 1, 2});
  eval({x3, w3});
  EXPECT_TRUE(gpu_matches_cpu(
      [&](StreamOrDevice s) { return conv3d(x3, w3, {1, 2, 1}, {1, 1, 1}, {1, 1, 2}, 1, s); }, 1e-4, 1e-4));
}

// 16-bit convolutions go to cuDNN where it loads (cudnn_conv.cpp) and to
// im2col + cuBLASLt where it does not or declines (KILN_CUDA_CUDNN=0 runs
// this test on the latter): 1-d, grouped and dilated 2-d, flipped with
// per-side padding (cuDNN pads symmetrically, so some of these must fall
// back), 3-d, and a 3-channel first layer.
TEST_F(GpuConv, HalfPrecisionForms) {
  for (Dtype t : {bfloat16, float16}) {
    const double tol = 4 * test::tolerance(t);
    auto check = [&](const Shape& xs, const Shape& ws, const std::function<array(const array&, const array&,
                                                                               StreamOrDevice)>& conv) {
      array x = astype(random::normal(xs), t), w = astype(random::normal(ws), t);
      eval({x, w});
      EXPECT_TRUE(gpu_matches_cpu([&](StreamOrDevice s) { return conv(x, w, s); }, tol, 10 * tol))
          << dtype_name(t) << " x " << test::fmt(xs) << " w " << test::fmt(ws);
    };
    check({3, 37, 16}, {24, 5, 16}, [](const array& x, const array& w, StreamOrDevice s) {
      return conv1d(x, w, 2, 2, 1, 1, s);
    });
    check({2, 19, 21, 32}, {48, 3, 3, 8}, [](const array& x, const array& w, StreamOrDevice s) {
      return conv2d(x, w, {1, 2}, {2, 1}, {2, 1}, 4, s);
    });
    check({2, 13, 11, 16}, {8, 3, 2, 16}, [](const array& x, const array& w, StreamOrDevice s) {
      return conv_general(x, w, {1, 1}, {1, 0}, {2, 1}, {1, 1}, {1, 1}, 1, true, s);
    });
    check({2, 13, 11, 16}, {8, 3, 3, 16}, [](const array& x, const array& w, StreamOrDevice s) {
      return conv_general(x, w, {2, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, true, s);
    });
    check({1, 6, 7, 8, 16}, {8, 3, 3, 3, 16}, [](const array& x, const array& w, StreamOrDevice s) {
      return conv3d(x, w, {1, 2, 1}, {1, 1, 1}, {1, 1, 2}, 1, s);
    });
    check({2, 32, 32, 3}, {16, 7, 7, 3}, [](const array& x, const array& w, StreamOrDevice s) {
      return conv2d(x, w, {2, 2}, {3, 3}, {1, 1}, 1, s);
    });
  }
}

TEST_F(GpuConv, GradientsMatchTheCpu) {
  array x = random::normal({3, 11, 10, 6});
  array w = random::normal({8, 3, 3, 3});
  eval({x, w});
  auto grads = [&](StreamOrDevice s) {
    auto f = [&](const std::vector<array>& in) {
      return std::vector<array>{sum(square(conv2d(in[0], in[1], {2, 1}, {1, 1}, {1, 2}, 2, s), s), false, s)};
    };
    auto [outs, g] = vjp(f, {x, w}, {array(1.0f)});
    return concatenate({reshape(g[0], {-1}, s), reshape(g[1], {-1}, s)}, 0, s);
  };
  EXPECT_TRUE(gpu_matches_cpu(grads, 1e-4, 1e-3));
}

}  // namespace
}  // namespace kiln
