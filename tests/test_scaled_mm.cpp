// scaled_matmul (fp8 operands with per-tensor or 1x128 / 128x128 block
// scales, float32 accumulation) on the CPU against a float64 reference:
// odd shapes (K and N not multiples of 128, partial blocks), both scale
// modes, both output dtypes, every accepted fp8 pairing, non-contiguous
// operands and scales; and the errors for what it refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "scaled_mm_reference.h"
#include "test_util.h"

namespace kiln::test {
namespace {

struct SmmCase {
  int M, K, N;
};
const SmmCase kSmmCases[] = {{1, 7, 5}, {5, 300, 130}, {33, 257, 200}, {16, 128, 128}, {3, 640, 64}};

TEST(ScaledMatmul, MatchesFloat64ReferenceInBothModesAndOutputDtypes) {
  for (const SmmCase& c : kSmmCases) {
    for (bool block : {false, true}) {
      for (auto [ta, tb] : {std::pair{float8_e4m3fn, float8_e4m3fn}, std::pair{float8_e4m3fn, float8_e5m2},
                            std::pair{float8_e5m2, float8_e4m3fn}}) {
        SmmProblem p = make_smm_problem(c.M, c.K, c.N, ta, tb, block);
        for (Dtype out : {bfloat16, float32}) {
          array y = scaled_matmul(p.a, p.b, p.sa, p.sb, out);
          ASSERT_EQ(y.dtype(), out);
          ASSERT_EQ(y.shape(), (Shape{c.M, c.N}));
          EXPECT_TRUE(smm_matches_reference(y, p)) << c.M << "x" << c.K << "x" << c.N << " block " << block << " "
                                               << dtype_name(ta) << " x " << dtype_name(tb) << " -> "
                                               << dtype_name(out);
        }
      }
    }
  }
}

TEST(ScaledMatmul, NonContiguousOperandsAndScales) {
  const int M = 9, K = 260, N = 140;
  // b as the transposed view of a row-major [N, K] weight; a as a strided
  // slice; the scales as transposed views.
  array w = astype(random_array({N, K}, float32, -4, 4), float8_e4m3fn);
  array big = astype(random_array({2 * M, K + 3}, float32, -4, 4), float8_e4m3fn);
  array a = slice(big, {0, 3}, {2 * M, K + 3}, {2, 1});
  const int kb = 3, nb = 2;
  array sa_t = exp(random_array({kb, M}, float32, -1, 1));
  array sb_t = exp(random_array({nb, kb}, float32, -1, 1));
  SmmProblem p{a, transpose(w), transpose(sa_t), transpose(sb_t), true};
  EXPECT_TRUE(smm_matches_reference(scaled_matmul(p.a, p.b, p.sa, p.sb, float32), p));
  // The same with contiguous copies gives the same bits.
  array ref = scaled_matmul(contiguous(p.a), contiguous(p.b), contiguous(p.sa), contiguous(p.sb), float32);
  EXPECT_TRUE(array_equal(scaled_matmul(p.a, p.b, p.sa, p.sb, float32), ref).item<bool>());
  // Per-tensor scales of shape (1) and broadcast views.
  SmmProblem q{a, transpose(w), array({0.5f}), broadcast_to(array(3.0f), {}), false};
  EXPECT_TRUE(smm_matches_reference(scaled_matmul(q.a, q.b, q.sa, q.sb), q));
}

TEST(ScaledMatmul, EmptyAndZeroK) {
  array a = astype(random_array({3, 0}, float32), float8_e4m3fn);
  array b = astype(random_array({0, 4}, float32), float8_e4m3fn);
  array y = scaled_matmul(a, b, array(1.0f), array(1.0f), float32);
  EXPECT_TRUE(all_close(y, std::vector<double>(12, 0.0), 0.0));
  array e = scaled_matmul(astype(random_array({0, 5}, float32), float8_e4m3fn),
                          astype(random_array({5, 2}, float32), float8_e4m3fn), array(1.0f), array(1.0f));
  EXPECT_EQ(e.shape(), (Shape{0, 2}));
  e.eval();
}

TEST(ScaledMatmul, RefusesBadInputsWithClearErrors) {
  array a = astype(random_array({4, 256}, float32), float8_e4m3fn);
  array b = astype(random_array({256, 8}, float32), float8_e4m3fn);
  array one(1.0f);
  EXPECT_TRUE(throws_error([&] { scaled_matmul(reshape(a, {1, 4, 256}), b, one, one); },
                           {"[scaled_matmul]", "2-d", "(1,4,256)"}));
  EXPECT_TRUE(throws_error([&] { scaled_matmul(astype(a, bfloat16), b, one, one); },
                           {"[scaled_matmul]", "float8_e4m3fn", "bfloat16"}));
  EXPECT_TRUE(throws_error(
      [&] { scaled_matmul(astype(a, float8_e5m2), astype(b, float8_e5m2), one, one); },
      {"[scaled_matmul]", "float8_e5m2 x float8_e5m2"}));
  EXPECT_TRUE(throws_error([&] { scaled_matmul(a, b, one, one, float16); }, {"out_dtype", "float16"}));
  EXPECT_TRUE(throws_error([&] { scaled_matmul(a, transpose(b), one, one); }, {"inner dimensions", "(4,256)"}));
  EXPECT_TRUE(throws_error([&] { scaled_matmul(a, b, array(1.0f, bfloat16), one); }, {"float32"}));
  EXPECT_TRUE(throws_error([&] { scaled_matmul(a, b, random_array({4, 3}), random_array({2, 1})); },
                           {"scale_a (4,2)", "scale_b (2,1)"}));
  EXPECT_TRUE(throws_error([&] { scaled_matmul(a, b, random_array({4, 2}), one); }, {"scalars"}));
  // No gradients.
  auto f = [&](const std::vector<array>& in) {
    return std::vector<array>{scaled_matmul(astype(in[0], float8_e4m3fn), b, one, one, float32)};
  };
  EXPECT_TRUE(throws_error([&] { vjp(f, {astype(a, float32)}, {random_array({4, 8})}); },
                           {"ScaledMatmul", "not differentiable"}));
}

}  // namespace
}  // namespace kiln::test
