// The fp8 dtypes and scaled_matmul on the GPU (label `cuda`): casts to and
// from fp8 give the CPU's bytes bit for bit (every code, a sweep of floats
// with the halfway cases, doubles); layout ops keep the codes; and
// scaled_matmul (cuBLASLt's FP8 path where it applies, the dequantizing
// fallback elsewhere) matches the float64 reference and the CPU in both
// scale modes, both output dtypes and the accepted fp8 pairings.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kiln/kiln.h"
#include "scaled_mm_reference.h"
#include "test_util.h"

namespace kiln::test {
namespace {

class GpuFp8 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!is_available(Device::gpu)) GTEST_SKIP() << "no GPU available for the cuda suite";
  }
};

std::vector<uint8_t> fp8_bytes(const array& a) {
  array u = contiguous(view(a, uint8, Device::cpu), Device::cpu);
  u.eval();
  const uint8_t* p = u.data<uint8_t>();
  return {p, p + u.size()};
}

bool same_fp8_bytes(const array& g, const array& c) { return fp8_bytes(g) == fp8_bytes(c); }

// Decoded fp8 codes: the same values, signs of zero included; any NaN
// matches any NaN (the GPU's half and bfloat16 conversions keep a NaN's
// payload bits, the CPU's go through float32's quiet NaN).
::testing::AssertionResult same_decoded(const array& g, const array& c) {
  std::vector<double> gv = to_double(g), cv = to_double(c);
  if (gv.size() != cv.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < gv.size(); ++i) {
    bool same = (std::isnan(gv[i]) && std::isnan(cv[i])) ||
                (gv[i] == cv[i] && std::signbit(gv[i]) == std::signbit(cv[i]));
    if (!same) return ::testing::AssertionFailure() << "code " << i << ": gpu " << gv[i] << ", cpu " << cv[i];
  }
  return ::testing::AssertionSuccess();
}

std::vector<float> fp8_float_sweep() {
  std::vector<float> xs = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 448.0f, 464.0f, 57344.0f, 61440.0f, 1e30f};
  for (uint32_t u = 0; u < 0x7f800000u; u += 0x3ffdu) {
    float x;
    std::memcpy(&x, &u, 4);
    xs.push_back(x);
    xs.push_back(-x);
  }
  // Halfway points of both formats.
  for (int c = 0; c < 127; ++c) {
    for (int f = 0; f < 2; ++f) {
      float v = f ? float8_e5m2_t::to_float(c) : float8_e4m3fn_t::to_float(c);
      float w = f ? float8_e5m2_t::to_float(c + 1) : float8_e4m3fn_t::to_float(c + 1);
      if (std::isfinite(v) && std::isfinite(w)) xs.push_back(static_cast<float>((static_cast<double>(v) + w) / 2));
    }
  }
  return xs;
}

TEST_F(GpuFp8, CastsGiveTheCpuBytes) {
  std::vector<uint8_t> codes(256);
  for (int i = 0; i < 256; ++i) codes[i] = static_cast<uint8_t>(i);
  std::vector<float> xs = fp8_float_sweep();
  array x(xs, {static_cast<int>(xs.size())}, float32);
  array xd = astype(random_array({4096}, float64, -600, 600), float64);
  for (Dtype t : {float8_e4m3fn, float8_e5m2}) {
    array c = view(array(codes, {256}, uint8), t);
    for (Dtype to : {float32, float16, bfloat16, float64}) {
      EXPECT_TRUE(same_decoded(astype(c, to, Device::gpu), astype(c, to, Device::cpu))) << dtype_name(t) << " -> "
                                                                                         << dtype_name(to);
    }
    for (Dtype to : {int32, bool_}) {
      EXPECT_TRUE(same_fp8_bytes(astype(c, to, Device::gpu), astype(c, to, Device::cpu)))
          << dtype_name(t) << " -> " << dtype_name(to);
    }
    EXPECT_TRUE(same_fp8_bytes(astype(x, t, Device::gpu), astype(x, t, Device::cpu))) << dtype_name(t);
    EXPECT_TRUE(same_fp8_bytes(astype(xd, t, Device::gpu), astype(xd, t, Device::cpu))) << dtype_name(t);
    array h = astype(x, bfloat16);
    EXPECT_TRUE(same_fp8_bytes(astype(h, t, Device::gpu), astype(h, t, Device::cpu))) << dtype_name(t);
    // fp8 -> the other fp8 type.
    Dtype other = t == float8_e4m3fn ? float8_e5m2 : float8_e4m3fn;
    EXPECT_TRUE(same_fp8_bytes(astype(c, other, Device::gpu), astype(c, other, Device::cpu))) << dtype_name(t);
  }
}

TEST_F(GpuFp8, LayoutOpsKeepTheCodes) {
  array w = astype(random_array({70, 130}, float32, -8, 8), float8_e4m3fn);
  EXPECT_TRUE(same_fp8_bytes(contiguous(transpose(w), Device::gpu), contiguous(transpose(w), Device::cpu)));
  EXPECT_TRUE(same_fp8_bytes(concatenate({w, w}, 1, Device::gpu), concatenate({w, w}, 1, Device::cpu)));
  array idx(std::vector<int32_t>{5, 0, 69}, {3}, int32);
  EXPECT_TRUE(same_fp8_bytes(take(w, idx, 0, Device::gpu), take(w, idx, 0, Device::cpu)));
  array s = slice(w, {1, 2}, {70, 130}, {3, 5}, Device::gpu);
  EXPECT_TRUE(same_fp8_bytes(contiguous(s, Device::gpu), contiguous(slice(w, {1, 2}, {70, 130}, {3, 5}), Device::cpu)));
}

struct Fp8GemmShape {
  int M, K, N;
  bool b_transposed;  // b as transpose of a row-major [N, K] array
};

// Block scales go to cuBLASLt by default; KILN_CUDA_FP8_BLOCK_LT=0 sends
// them to the dequantizing path. The test runs both ways. cuBLASLt's block
// kernels add each 128-wide K block in the tensor cores' reduced precision
// (measured on the H200: up to 1.8e-4 of sum |a*b|), so that path gets a
// 5e-4 bound on the sum; the others keep 1e-4.
class GpuFp8BlockPath : public GpuFp8, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    GpuFp8::SetUp();
    if (!GetParam()) setenv("KILN_CUDA_FP8_BLOCK_LT", "0", 1);
  }
  void TearDown() override { unsetenv("KILN_CUDA_FP8_BLOCK_LT"); }
};

TEST_P(GpuFp8BlockPath, ScaledMatmulMatchesTheReferenceAndTheCpu) {
  // cuBLASLt-eligible shapes (multiples of 16; block mode K % 512, N % 128)
  // and odd ones that take the fallback.
  const Fp8GemmShape shapes[] = {{128, 512, 256, true},  {256, 1024, 384, true}, {64, 2048, 128, false},
                           {48, 512, 128, true},   {33, 257, 200, true},   {5, 300, 130, false},
                           {32, 384, 160, true}};
  for (const Fp8GemmShape& sh : shapes) {
    for (bool block : {true, false}) {
      for (auto [ta, tb] : {std::pair{float8_e4m3fn, float8_e4m3fn}, std::pair{float8_e4m3fn, float8_e5m2}}) {
        SmmProblem p = make_smm_problem(sh.M, sh.K, sh.N, ta, tb, block);
        if (sh.b_transposed) p.b = transpose(contiguous(transpose(p.b)));
        for (Dtype out : {bfloat16, float32}) {
          array g = scaled_matmul(p.a, p.b, p.sa, p.sb, out, Device::gpu);
          array c = scaled_matmul(p.a, p.b, p.sa, p.sb, out, Device::cpu);
          std::string what = std::to_string(sh.M) + "x" + std::to_string(sh.K) + "x" + std::to_string(sh.N) +
                             (block ? " block " : " tensor ") + dtype_name(ta) + " x " + dtype_name(tb) + " -> " +
                             dtype_name(out);
          const double sum_rtol = block && GetParam() ? 5e-4 : 1e-4;
          EXPECT_TRUE(smm_matches_reference(g, p, sum_rtol)) << what;
          std::vector<double> gv = to_double(g), cv = to_double(c), want, mag;
          smm_reference(p, want, mag);
          const double out_rtol = out == bfloat16 ? std::ldexp(1.0, -7) : 0.0;
          for (size_t i = 0; i < gv.size(); ++i) {
            ASSERT_LE(std::fabs(gv[i] - cv[i]), out_rtol * std::fabs(cv[i]) + 2 * sum_rtol * mag[i] + 1e-30)
                << what << " element " << i;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(GpuFp8, GpuFp8BlockPath, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "cublaslt_blocks" : "dequantize_blocks"; });

TEST_F(GpuFp8, ScaledMatmulRefusesWhatTheCpuRefuses) {
  array a = astype(random_array({16, 128}, float32), float8_e5m2);
  EXPECT_TRUE(throws_error([&] { scaled_matmul(a, transpose(a), array(1.0f), array(1.0f), bfloat16, Device::gpu); },
                           {"float8_e5m2 x float8_e5m2"}));
}

}  // namespace
}  // namespace kiln::test
