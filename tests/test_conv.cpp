// Convolutions beyond the op harness (tests/harness/cases_conv.cpp): known
// values, output shapes of the transposed forms, the transposed convolution
// as the input gradient of the forward one, sizes large enough for the CPU
// kernel to work in several chunks, and the argument errors.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

namespace kiln {
namespace {

using test::to_double;

// out[n, p, o] of a 2-d convolution with stride 1, symmetric padding and
// one group, in double.
std::vector<double> conv2d_loop(const array& x, const array& w, int pad) {
  auto xv = to_double(x), wv = to_double(w);
  const int N = x.shape(0), H = x.shape(1), W = x.shape(2), C = x.shape(3);
  const int O = w.shape(0), KH = w.shape(1), KW = w.shape(2);
  const int PH = H + 2 * pad - KH + 1, PW = W + 2 * pad - KW + 1;
  std::vector<double> out(static_cast<size_t>(N) * PH * PW * O, 0.0);
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < PH; ++i)
      for (int j = 0; j < PW; ++j)
        for (int o = 0; o < O; ++o) {
          double acc = 0;
          for (int a = 0; a < KH; ++a)
            for (int b = 0; b < KW; ++b) {
              int si = i + a - pad, sj = j + b - pad;
              if (si < 0 || si >= H || sj < 0 || sj >= W) continue;
              for (int c = 0; c < C; ++c) {
                acc += xv[((static_cast<size_t>(n) * H + si) * W + sj) * C + c] *
                       wv[((static_cast<size_t>(o) * KH + a) * KW + b) * C + c];
              }
            }
          out[((static_cast<size_t>(n) * PH + i) * PW + j) * O + o] = acc;
        }
  return out;
}

TEST(Conv, KnownValues1d) {
  // Cross-correlation (MLX, PyTorch): out[i] = x[i] - x[i + 2].
  array x = reshape(array({1.f, 2.f, 4.f, 7.f, 11.f}), {1, 5, 1});
  array w = reshape(array({1.f, 0.f, -1.f}), {1, 3, 1});
  EXPECT_TRUE(test::all_close(conv1d(x, w), {-3, -5, -7}, 0));
  // Padding 1, stride 2: windows start at -1, 1, 3.
  EXPECT_TRUE(test::all_close(conv1d(x, w, 2, 1), {-2, -5, 7}, 0));
  // Dilation 2: out[i] = x[i] - x[i + 4].
  EXPECT_TRUE(test::all_close(conv1d(x, w, 1, 0, 2), {-10}, 0));
  // flip: a true convolution, out[i] = x[i + 2] - x[i].
  EXPECT_TRUE(test::all_close(conv_general(x, w, {1}, {0}, {0}, {1}, {1}, 1, true), {3, 5, 7}, 0));
  // Input dilation 2 inserts a zero between elements: [1 0 2 0 4 0 7 0 11].
  EXPECT_TRUE(test::all_close(conv_general(x, w, {1}, {0}, {0}, {1}, {2}, 1, false), {-1, 0, -2, 0, -3, 0, -4}, 0));
}

TEST(Conv, TransposeShapesFollowTheDeconvolutionFormula) {
  array x = random::normal({2, 5, 6, 3});
  array w = random::normal({4, 3, 2, 3});
  // (S - 1) * stride - 2 * padding + dilation * (K - 1) + 1 + output_padding.
  array y = conv_transpose2d(x, w, {2, 3}, {1, 0}, {2, 1}, {1, 2});
  EXPECT_EQ(y.shape(), (Shape{2, (5 - 1) * 2 - 2 + 2 * 2 + 1 + 1, (6 - 1) * 3 + 1 + 1 + 2, 4}));
  EXPECT_EQ(conv_transpose1d(random::normal({1, 7, 2}), random::normal({3, 4, 2}), 3).shape(), (Shape{1, 22, 3}));
  EXPECT_EQ(conv_transpose3d(random::normal({1, 2, 3, 4, 2}), random::normal({5, 2, 2, 2, 2})).shape(),
            (Shape{1, 3, 4, 5, 5}));
}

TEST(Conv, TransposeIsTheInputGradient) {
  // <conv(x, w), y> = <x, conv_transpose(y, w')> with w' the kernel's
  // channels swapped: conv_transpose computes the vjp of conv in x.
  array x = random::normal({2, 9, 8, 4}, float64);
  array w = random::normal({6, 3, 3, 4}, float64);
  auto f = [&](const array& in) { return conv2d(in, w, {2, 2}, {1, 1}); };
  array y = random::normal(f(x).shape(), float64);
  array gx = vjp([&](const std::vector<array>& in) { return std::vector<array>{f(in[0])}; }, {x}, {y}).second[0];
  array t = conv_transpose2d(y, swapaxes(w, 0, 3), {2, 2}, {1, 1}, {1, 1}, {0, 1});
  ASSERT_EQ(t.shape(), x.shape());
  EXPECT_TRUE(test::all_close(t, to_double(gx), 1e-12, 1e-12));
}

TEST(Conv, LargeConv2dInSeveralChunks) {
  // 2 x 48 x 48 output rows of a 3x3x64 patch: more rows than one chunk of
  // the CPU kernel's im2col holds; float16 computes in float32.
  array x = random::uniform(-1.f, 1.f, {2, 48, 48, 64});
  array w = random::uniform(-1.f, 1.f, {24, 3, 3, 64});
  auto want = conv2d_loop(x, w, 1);
  EXPECT_TRUE(test::all_close(conv2d(x, w, {1, 1}, {1, 1}), want, 1e-4, 1e-4));
  array y16 = conv2d(astype(x, float16), astype(w, float16), {1, 1}, {1, 1});
  EXPECT_EQ(y16.dtype(), float16);
  EXPECT_TRUE(test::all_close(y16, conv2d_loop(astype(x, float16), astype(w, float16), 1), 2e-3, 5e-2));
}

TEST(Conv, DepthwiseMatchesPerChannelConvolutions) {
  array x = random::normal({2, 11, 10, 6});
  array w = random::normal({6, 3, 3, 1});
  array y = conv2d(x, w, {1, 1}, {1, 1}, {1, 1}, 6);
  for (int c = 0; c < 6; ++c) {
    array xc = slice(x, {0, 0, 0, c}, {2, 11, 10, c + 1});
    array wc = slice(w, {c, 0, 0, 0}, {c + 1, 3, 3, 1});
    array yc = slice(y, {0, 0, 0, c}, {2, 11, 10, c + 1});
    EXPECT_TRUE(test::all_close(yc, conv2d_loop(xc, wc, 1), 1e-5, 1e-5)) << "channel " << c;
  }
}

TEST(Conv, EmptyBatchOrChannels) {
  array y = conv2d(zeros({0, 6, 5, 3}), random::normal({4, 3, 3, 3}), {1, 1}, {1, 1});
  EXPECT_EQ(y.shape(), (Shape{0, 6, 5, 4}));
  EXPECT_EQ(to_double(y).size(), 0u);
  // No output channels; no input channels (the sum over them is empty: zeros).
  EXPECT_EQ(conv1d(random::normal({2, 7, 3}), zeros({0, 3, 3})).shape(), (Shape{2, 5, 0}));
  EXPECT_TRUE(test::all_close(conv1d(zeros({1, 4, 0}), zeros({2, 3, 0})), {0, 0, 0, 0}, 0));
}

TEST(Conv, PromotesOperandsToOneDtype) {
  array y = conv1d(random::normal({1, 6, 2}, float16), random::normal({3, 2, 2}, float32));
  EXPECT_EQ(y.dtype(), float32);
}

TEST(Conv, ArgumentErrors) {
  array x = random::normal({2, 8, 8, 4});
  array w = random::normal({6, 3, 3, 4});
  EXPECT_TRUE(test::throws_error([&] { conv2d(reshape(x, {2, 64, 4}), w); }, {"conv2d", "4 dimensions"}));
  EXPECT_TRUE(test::throws_error([&] { conv2d(x, reshape(w, {6, 9, 4})); }, {"conv2d", "weight"}));
  EXPECT_TRUE(test::throws_error([&] { conv2d(x, random::normal({6, 3, 3, 3})); }, {"conv2d", "channels"}));
  EXPECT_TRUE(test::throws_error([&] { conv2d(x, random::normal({6, 3, 3, 2}), {1, 1}, {0, 0}, {1, 1}, 3); },
                                 {"conv2d", "divisible by groups"}));
  EXPECT_TRUE(test::throws_error([&] { conv2d(x, random::normal({5, 3, 3, 2}), {1, 1}, {0, 0}, {1, 1}, 2); },
                                 {"conv2d", "output channels"}));
  EXPECT_TRUE(test::throws_error([&] { conv2d(x, w, {1, 1}, {0, 0}, {1, 1}, 0); }, {"groups must be positive"}));
  EXPECT_TRUE(test::throws_error([&] { conv2d(x, random::normal({6, 9, 3, 4})); }, {"conv2d", "smaller than"}));
  EXPECT_TRUE(test::throws_error([&] { conv2d(x, w, {1, 1}, {0, 0}, {4, 1}); }, {"conv2d", "smaller than"}));
  EXPECT_TRUE(test::throws_error([&] { conv2d(x, w, {0, 1}); }, {"conv2d", "stride must be positive"}));
  EXPECT_TRUE(test::throws_error([&] { conv2d(x, w, {1, 1}, {0, 0}, {1, -1}); }, {"dilation must be positive"}));
  EXPECT_TRUE(test::throws_error([&] { conv2d(astype(x, int32), w); }, {"conv2d", "floating", "int32"}));
  EXPECT_TRUE(test::throws_error([&] { conv_general(x, w, {1, 1, 1}, {0}, {0}, {1}, {1}, 1, false); }, {"conv_general", "stride"}));
  EXPECT_TRUE(test::throws_error([&] { conv_general(x, w, {1}, {0}, {0}, {1}, {0}, 1, false); }, {"input dilation"}));
  EXPECT_TRUE(test::throws_error([&] { conv_general(random::normal({2, 4}), random::normal({3, 4}), {1}, {0}, {0}, {1}, {1}, 1, false);
  },
                                 {"conv_general", "1 to 3 spatial"}));
  EXPECT_TRUE(test::throws_error([&] { conv1d(x, w); }, {"conv1d", "3 dimensions"}));
  EXPECT_TRUE(test::throws_error([&] { conv3d(x, w); }, {"conv3d", "5 dimensions"}));
  EXPECT_TRUE(test::throws_error([&] { conv_transpose2d(x, random::normal({6, 3, 3, 5})); },
                                 {"conv_transpose2d", "channels"}));
  // Padding so negative that the cropped input is shorter than the kernel.
  EXPECT_TRUE(test::throws_error([&] { conv_general(x, w, {1}, {-3}, {-3}, {1}, {1}, 1, false); }, {"conv_general", "smaller than"}));
}

}  // namespace
}  // namespace kiln
