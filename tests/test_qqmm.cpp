// qqmm and gather_qqmm (MLX's products of operands rounded on the fly to a
// microscaling mode): the rounding rules value by value, MLX's derivative
// rule, shapes, errors, and MLX itself (mlx[cpu] from PyPI) bit for bit
// where python3 can import it. The op harness (tests/harness/
// cases_quant_fp.cpp) checks the products against float64 references on
// every dtype and layout, the GPU against the CPU, and vmap.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/ops_util.h"
#include "core/primitives.h"
#include "core/quantize_checks.h"
#include "kiln/io.h"
#include "kiln/kiln.h"
#include "python_oracle.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::to_double;

// A quantized identity [K, K] (mxfp4 / mxfp8 encode 1.0 exactly; nvfp4's
// e4m3 scale makes it 1.03125): qqmm(x, eye) is x rounded, times that, with
// every sum exact (but for the sign of zeros).
std::vector<array> quantized_eye(int K, const std::string& mode) {
  return quantize(eye(K, K, 0, float32), std::nullopt, std::nullopt, mode);
}
// x rounded by qqmm's primitive itself, in float32.
array rounded(const array& x, const std::string& mode) {
  QuantParams p = detail::quant_mode_params("test", mode, std::nullopt, std::nullopt, {x});
  return astype(make_node<QuantizeDequantize>(x.shape(), x.dtype(), {x}, to_stream({}), p), float32);
}

TEST(Qqmm, Fp4TiesGoToTheEvenCodeAndTheScaleIsComputedInFloat32) {
  // One group of 32 with max |x| = 6: the e8m0 scale is 2^0, so x / scale is x.
  std::vector<float> v(32, 0.0f);
  const float in[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -0.25f, -0.1f, 6.0f, 0.26f, 2.6f, -4.9f};
  const float want[] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, -0.0f, -0.0f, 6.0f, 0.5f, 3.0f, -4.0f};
  for (size_t i = 0; i < std::size(in); ++i) v[i] = in[i];
  for (Dtype t : {float32, bfloat16, float16}) {
    SCOPED_TRACE(dtype_name(t));
    auto got = to_double(rounded(astype(array(v, Shape{1, 32}), t), "mxfp4"));
    for (size_t i = 0; i < std::size(in); ++i) {
      EXPECT_EQ(got[i], want[i]) << in[i];
      EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << in[i];
    }
    for (size_t i = std::size(in); i < 32; ++i) EXPECT_EQ(got[i], 0.0) << i;
  }
  // mxfp8: max |x| = 448 keeps the scale at 2^0; x rounds to e4m3, ties even.
  std::vector<float> w(32, 1.0f);
  w[0] = 448.0f, w[1] = 1.0625f, w[2] = 1.1875f, w[3] = -300.0f;  // 1.0625 -> 1, 1.1875 -> 1.25, 300 -> 288
  auto got = to_double(rounded(array(w, Shape{1, 32}), "mxfp8"));
  EXPECT_EQ(got[0], 448.0);
  EXPECT_EQ(got[1], 1.0);
  EXPECT_EQ(got[2], 1.25);
  EXPECT_EQ(got[3], -288.0);
  // The exponent is ceil(log2(max / 6)) from the float32 quotient: max = 12
  // gives 2^1 exactly (0.75 / 2 rounds to 0.5: 1.0); one ulp above 12 gives
  // 2^2 (0.75 / 4 rounds to 0).
  std::vector<float> c(64, 0.75f);
  c[0] = 12.0f, c[32] = std::nextafter(12.0f, 13.0f);
  got = to_double(rounded(array(c, Shape{1, 64}), "mxfp4"));
  EXPECT_EQ(got[0], 12.0);
  EXPECT_EQ(got[1], 1.0);
  EXPECT_EQ(got[32], 12.0);
  EXPECT_EQ(got[33], 0.0);
}

TEST(Qqmm, GroupsWithInfOrNanRoundToNanAndZeroGroupsToZero) {
  std::vector<float> v(96, 1.0f);
  v[3] = NAN, v[40] = INFINITY;
  for (int k = 64; k < 96; ++k) v[k] = 0.0f;
  for (const char* mode : {"mxfp4", "mxfp8"}) {
    SCOPED_TRACE(mode);
    auto got = to_double(rounded(array(v, Shape{1, 96}), mode));
    for (int k = 0; k < 64; ++k) EXPECT_TRUE(std::isnan(got[k])) << k;
    for (int k = 64; k < 96; ++k) EXPECT_EQ(got[k], 0.0) << k;
  }
}

// MLX's rule: dx = qqmm(cot, w^T), dw = qqmm(cot^T, x^T); with nvfp4's
// global scales the cotangent's max |cot| is its global scale.
TEST(Qqmm, DerivativeIsMlxsRule) {
  array x = test::random_array({32, 64}, float32), w = test::random_array({64, 64}, float32);
  array c = test::random_array({32, 64}, float32);
  for (std::string mode : {"mxfp8", "mxfp4", "nvfp4", "nvfp4g"}) {
    SCOPED_TRACE(mode);
    const std::string m = mode.substr(0, 5);
    std::optional<array> gx, gw, gc;
    if (mode == "nvfp4g") gx = max(abs(x)), gw = max(abs(w)), gc = max(abs(c));
    std::function<array(const std::vector<array>&)> f = [&](const std::vector<array>& a) {
      return sum(qqmm(a[0], a[1], std::nullopt, std::nullopt, std::nullopt, m, gx, gw) * c);
    };
    auto grads = grad(f, std::vector<int>{0, 1})({x, w});
    array dx = qqmm(c, transpose(w), std::nullopt, std::nullopt, std::nullopt, m, gc, gw);
    array dw = qqmm(transpose(c), transpose(x), std::nullopt, std::nullopt, std::nullopt, m, gc, gx);
    EXPECT_TRUE(array_equal(grads[0], dx).item<bool>());
    EXPECT_TRUE(array_equal(grads[1], dw).item<bool>());
  }
  // A quantized w: dx through w dequantized; its words get zeros.
  auto q = quantize(w, std::nullopt, std::nullopt, "mxfp8");
  std::function<array(const std::vector<array>&)> fq = [&](const std::vector<array>& a) {
    return sum(qqmm(a[0], a[1], q[1], std::nullopt, std::nullopt, "mxfp8") * c);
  };
  auto gq = grad(fq, std::vector<int>{0, 1})({x, q[0]});
  array wd = dequantize(q[0], q[1], std::nullopt, std::nullopt, std::nullopt, "mxfp8", std::nullopt, float32);
  EXPECT_TRUE(
      array_equal(gq[0], qqmm(c, transpose(wd), std::nullopt, std::nullopt, std::nullopt, "mxfp8")).item<bool>());
  EXPECT_EQ(gq[1].dtype(), uint32);
  EXPECT_TRUE(all(equal(gq[1], array(0u))).item<bool>());
  // N and M not multiples of the group: the backward products pad the last
  // group with zeros, which changes no sum.
  array x7 = test::random_array({7, 64}, float32), w5 = test::random_array({5, 64}, float32);
  array c7 = test::random_array({7, 5}, float32);
  std::function<array(const std::vector<array>&)> f7 = [&](const std::vector<array>& a) {
    return sum(qqmm(a[0], a[1], std::nullopt, std::nullopt, std::nullopt, "mxfp8") * c7);
  };
  auto g7 = grad(f7, std::vector<int>{0, 1})({x7, w5});
  auto padded = [](const array& a) { return pad(a, {{0, 0}, {0, 32 - a.shape(1) % 32}}); };
  array dx7 = qqmm(padded(c7), padded(transpose(w5)), std::nullopt, std::nullopt, std::nullopt, "mxfp8");
  array dw7 = qqmm(padded(transpose(c7)), padded(transpose(x7)), std::nullopt, std::nullopt, std::nullopt, "mxfp8");
  EXPECT_TRUE(array_equal(g7[0], dx7).item<bool>());
  EXPECT_TRUE(array_equal(g7[1], dw7).item<bool>());
}

TEST(Qqmm, ShapesDtypesAndGather) {
  auto q = quantize(test::random_array({24, 64}, float32), std::nullopt, std::nullopt, "mxfp8");
  for (Dtype t : {float32, bfloat16, float16}) {
    array v = astype(test::random_array({64}, float32), t);
    array y = qqmm(v, q[0], q[1], std::nullopt, std::nullopt, "mxfp8");
    EXPECT_EQ(y.shape(), (Shape{24}));
    EXPECT_EQ(y.dtype(), t);
    array b = astype(test::random_array({2, 3, 64}, float32), t);
    array yb = qqmm(b, q[0], q[1], std::nullopt, std::nullopt, "mxfp8");
    EXPECT_EQ(yb.shape(), (Shape{2, 3, 24}));
    // Rows are independent: each row alone gives the same values.
    array row = qqmm(slice(b, {1, 2, 0}, {2, 3, 64}), q[0], q[1], std::nullopt, std::nullopt, "mxfp8");
    EXPECT_TRUE(array_equal(reshape(row, {24}), reshape(slice(yb, {1, 2, 0}, {2, 3, 24}), {24})).item<bool>());
  }
  // Under compile (the decode step's path) and vmap, the same values.
  array xs = test::random_array({4, 64}, float32);
  auto f = [&](const std::vector<array>& a) {
    return std::vector<array>{qqmm(a[0], q[0], q[1], std::nullopt, std::nullopt, "mxfp8")};
  };
  array eager = f({xs})[0];
  EXPECT_TRUE(array_equal(compile(f)({xs})[0], eager).item<bool>());
  EXPECT_TRUE(array_equal(vmap(f)({xs})[0], eager).item<bool>());
  // gather_qqmm: each output block is qqmm of its gathered pair.
  array x = test::random_array({3, 2, 64}, float32);
  array w = test::random_array({4, 8, 64}, float32);
  auto wq = quantize(w, std::nullopt, std::nullopt, "nvfp4");
  array li = array(std::vector<int32_t>{2, 0}, Shape{2}), ri = array(std::vector<int32_t>{1, 3}, Shape{2});
  array g = gather_qqmm(x, wq[0], wq[1], li, ri, std::nullopt, std::nullopt, "nvfp4");
  EXPECT_EQ(g.shape(), (Shape{2, 2, 8}));
  for (int i = 0; i < 2; ++i) {
    int l = i == 0 ? 2 : 0, r = i == 0 ? 1 : 3;
    array xi = reshape(slice(x, {l, 0, 0}, {l + 1, 2, 64}), {2, 64});
    array wi = reshape(slice(wq[0], {r, 0, 0}, {r + 1, 8, wq[0].shape(2)}), {8, wq[0].shape(2)});
    array si = reshape(slice(wq[1], {r, 0, 0}, {r + 1, 8, 4}), {8, 4});
    array want = qqmm(xi, wi, si, std::nullopt, std::nullopt, "nvfp4");
    EXPECT_TRUE(array_equal(reshape(slice(g, {i, 0, 0}, {i + 1, 2, 8}), {2, 8}), want).item<bool>()) << i;
  }
  // Float w in gather_qqmm: rounded as x is.
  array gf = gather_qqmm(x, w, std::nullopt, li, ri, std::nullopt, std::nullopt, "mxfp8");
  array x0 = reshape(slice(x, {2, 0, 0}, {3, 2, 64}), {2, 64}), w0 = reshape(slice(w, {1, 0, 0}, {2, 8, 64}), {8, 64});
  EXPECT_TRUE(test::all_close(reshape(slice(gf, {0, 0, 0}, {1, 2, 8}), {2, 8}),
                              to_double(qqmm(x0, w0, std::nullopt, std::nullopt, std::nullopt, "mxfp8")), 1e-6, 1e-6));
}

TEST(Qqmm, BadInputsNameTheOp) {
  array x = test::random_array({2, 64}, float32), w = test::random_array({8, 64}, float32);
  auto q = quantize(w, std::nullopt, std::nullopt, "nvfp4");
  auto qa = quantize(w);
  EXPECT_TRUE(test::throws_error([&] { qqmm(x, qa[0], qa[1], std::nullopt, std::nullopt, "affine"); },
                                 {"[qqmm]", "microscaling"}));
  EXPECT_EQ(qqmm(astype(x, float64), w).dtype(), float64);  // a Kiln extension
  EXPECT_TRUE(test::throws_error([&] { qqmm(astype(x, int32), w); }, {"[qqmm]", "int32"}));
  EXPECT_TRUE(test::throws_error([&] { qqmm(x, q[0]); }, {"[qqmm]", "Scales must be provided"}));
  EXPECT_TRUE(test::throws_error([&] { qqmm(x, w, q[1]); }, {"[qqmm]", "not quantized"}));
  EXPECT_TRUE(test::throws_error([&] { qqmm(x, q[0], q[1], std::nullopt, std::nullopt, "mxfp8"); },
                                 {"[qqmm]", "do not match"}));
  EXPECT_TRUE(test::throws_error([&] { qqmm(x, q[0], q[1], 32); }, {"[qqmm]", "group size 16"}));
  EXPECT_TRUE(test::throws_error([&] { qqmm(test::random_array({2, 48}, float32), w); }, {"[qqmm]", "48"}));
  EXPECT_TRUE(test::throws_error(
      [&] {
        qqmm(test::random_array({2, 24}, float32), test::random_array({8, 24}));
      },
      {"[qqmm]", "multiple of the group size"}));
  EXPECT_TRUE(test::throws_error([&] { qqmm(x, w, std::nullopt, std::nullopt, std::nullopt, "nvfp4", array(1.0f)); },
                                 {"[qqmm]", "both global_scale_x and global_scale_w"}));
  EXPECT_TRUE(test::throws_error(
      [&] { qqmm(x, w, std::nullopt, std::nullopt, std::nullopt, "mxfp8", array(1.0f), array(1.0f)); },
      {"[qqmm]", "Global scale is only supported for 'nvfp4'"}));
  EXPECT_TRUE(test::throws_error([&] { qqmm(x, test::random_array({2, 8, 64}, float32)); }, {"[qqmm]", "exactly 2"}));
  EXPECT_TRUE(test::throws_error([&] { gather_qqmm(x, w, std::nullopt, array(std::vector<float>{0.0f}, Shape{1})); },
                                 {"[gather_qqmm]", "integers"}));
}

// ---- against MLX itself ----

// MLX's CPU runs qqmm for one row of x with a quantized w: rows of x of
// every dtype (ties between fp4 codes, scales from 2^-20 to 2^12) times a
// quantized identity, one row per call, against Kiln's, bit for bit.
TEST(QqmmMlx, RoundingOfXIsBitIdentical) {
  if (!test::python_runs("import mlx.core as mx; mx.qqmm"))
    GTEST_SKIP() << "python3 cannot import mlx.core with qqmm (pip install mlx[cpu])";
  auto dir = test::scratch_dir("qqmm_mlx");
  const int K = 256, R = 24;
  std::vector<float> v(R * K);
  array base = test::random_array({R, K}, float32, -1.0, 1.0);
  auto bv = to_double(base);
  for (int r = 0; r < R; ++r) {
    const float scale = std::ldexp(1.0f, r % 16 - 12 + (r >= 16 ? 8 : 0));
    for (int k = 0; k < K; ++k) v[r * K + k] = static_cast<float>(bv[r * K + k]) * scale * 6.0f;
    if (r % 4 == 1) {  // exact fp4 midpoints of a 2^0 scale times `scale`
      const float mids[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f};
      for (int k = 0; k < K; ++k) v[r * K + k] = (k % 2 ? -1.0f : 1.0f) * mids[k % 8] * scale;
    }
  }
  std::unordered_map<std::string, array> inputs;
  for (Dtype t : {float32, bfloat16, float16})
    inputs.emplace(std::string("x_") + dtype_name(t), astype(array(v, Shape{R, K}), t));
  for (const char* mode : {"mxfp4", "mxfp8", "nvfp4"}) {
    auto q = quantized_eye(K, mode);
    inputs.emplace(std::string("q_") + mode, q[0]);
    inputs.emplace(std::string("s_") + mode, q[1]);
  }
  save_safetensors((dir / "in.safetensors").string(), inputs);
  std::string script = R"PY(
import sys, mlx.core as mx
d = sys.argv[1]
a = mx.load(d + '/in.safetensors')
out = {}
for t in ['float32', 'bfloat16', 'float16']:
    x = a['x_' + t]
    for m in ['mxfp4', 'mxfp8', 'nvfp4']:
        rows = [mx.qqmm(x[i:i + 1], a['q_' + m], a['s_' + m], mode=m) for i in range(x.shape[0])]
        out[t + '_' + m] = mx.concatenate(rows, axis=0)
mx.save_safetensors(d + '/out.safetensors', out)
)PY";
  ASSERT_EQ(test::run_python_in(dir.string(), script), 0) << (dir / "run.py").string();
  auto ref = load_safetensors((dir / "out.safetensors").string()).first;
  for (const char* t : {"float32", "bfloat16", "float16"}) {
    for (const char* m : {"mxfp4", "mxfp8", "nvfp4"}) {
      std::string k = std::string(t) + "_" + m;
      SCOPED_TRACE(k);
      array mine = qqmm(inputs.at(std::string("x_") + t), inputs.at(std::string("q_") + m),
                        inputs.at(std::string("s_") + m), std::nullopt, std::nullopt, m);
      EXPECT_TRUE(array_equal(mine, ref.at(k), true).item<bool>());
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln
