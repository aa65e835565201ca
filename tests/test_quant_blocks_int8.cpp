// quantized_matmul on block formats with x rounded to 8 bits (the CPU's
// default for float32 / float16 / bfloat16 x: quant_blocks_qmv_int8.cpp),
// on the AVX-512 VNNI kernels where the CPU has them and on the AVX2 ones
// (forced through set_cpu_target_override):
// - against the float64 product of the rounded x (quant_blocks_ref.h
//   repeats the rounding): the integer sums are exact, so the tolerance is
//   float32 accumulation's, as for the float kernels;
// - against the unrounded x within x8_bound, the bound the rounding allows;
// - every format, M = 1..8 (and the GEMM path beyond), odd N, odd block
//   counts; a row's result does not depend on the rows around it;
// - non-finite and tiny blocks; the float path (override 0) still exact.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/quant_blocks_cpu.h"
#include "core/block_format.h"
#include "core/quantize_blocks.h"
#include "quant_blocks_ref.h"
#include "test_util.h"

// A named namespace: the unity build puts this file next to
// test_quant_blocks.cpp, whose anonymous helpers share some names.
namespace kiln::quant_blocks_int8_test {

const std::vector<std::string> kModes = {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"};

int block_of(const std::string& mode) { return mode.back() == 'k' ? 256 : 32; }

array qmm(const array& x, const array& w, const std::string& mode) {
  return detail::block_quantized_matmul(x, w, true, mode, {});
}

array random_blocks(const std::string& mode, int n, int k) {
  return detail::block_quantize(test::random_array({n, k}), mode, {})[0];
}

// x with a spread of magnitudes per block (an outlier now and then), so the
// blocks' scales differ and the rounding is not uniform.
array spread_x(int m, int k) {
  std::vector<double> v = test::to_double(test::random_array({m, k}));
  for (size_t i = 0; i < v.size(); i += 37) v[i] *= 9.0;
  return array(v, {m, k}, float64);
}

// Each level the CPU has among {detected, avx2}: VNNI kernels and AVX2 ones.
std::vector<cpu::CpuTarget> levels() {
  std::vector<cpu::CpuTarget> out{cpu::cpu_target_detected()};
  if (cpu::cpu_target_detected() > cpu::CpuTarget::avx2) out.push_back(cpu::CpuTarget::avx2);
  return out;
}

struct LevelScope {
  explicit LevelScope(cpu::CpuTarget t) { cpu::set_cpu_target_override(t); }
  ~LevelScope() { cpu::clear_cpu_target_override(); }
};

// The 8-bit path, or the float one, whatever KILN_BLOCK_X says.
struct XModeScope {
  explicit XModeScope(bool int8) { cpu::set_block_x_int8_override(int8 ? 1 : 0); }
  ~XModeScope() { cpu::set_block_x_int8_override(-1); }
};

// |got - want| <= rtol * sum |x| |w| (+ slack[i] where given), x as given.
::testing::AssertionResult close(const array& got, const std::vector<double>& want, const std::vector<double>& x,
                                 int64_t k, const array& wq, const std::string& mode, double rtol,
                                 const std::vector<double>* slack = nullptr) {
  std::vector<double> g = test::to_double(got);
  std::vector<double> wa = test::to_double(abs(detail::block_dequantize(wq, mode, float32, {})));
  const int64_t n = wq.shape(0);
  for (size_t i = 0; i < want.size(); ++i) {
    const int64_t r = i / n, j = i % n;
    double mag = 0;
    for (int64_t t = 0; t < k; ++t) mag += std::fabs(x[r * k + t]) * wa[j * k + t];
    const double tol = rtol * mag + (slack ? (*slack)[i] : 0.0) + 1e-30;
    if (!(std::fabs(g[i] - want[i]) <= tol)) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << g[i] << ", want " << want[i]
                                           << " (tolerance " << tol << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(QuantBlocksInt8, MatchesRoundedProduct) {
  XModeScope int8(true);
  for (cpu::CpuTarget level : levels()) {
    LevelScope scope(level);
    for (const auto& mode : kModes) {
      // Odd block counts (25, 9; 5, 3 super-blocks), odd N.
      for (int k : block_of(mode) == 32 ? std::vector<int>{800, 288} : std::vector<int>{1280, 768}) {
        array w = random_blocks(mode, 37, k);
        for (int m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13}) {
          SCOPED_TRACE(std::string(cpu::cpu_target_name(level)) + " " + mode + " K=" + std::to_string(k) +
                       " M=" + std::to_string(m));
          array x = astype(spread_x(m, k), float32);
          std::vector<double> xd = test::to_double(x), xr = test::round_x8(xd);
          array y = qmm(x, w, mode);
          EXPECT_TRUE(close(y, test::block_product(xd, k, w, mode, true), xr, k, w, mode, 2e-6 * std::sqrt(k)));
        }
      }
    }
  }
}

// The Q4_0 and Q4_K kernels of quant_blocks_qmv_lanes.cpp with the high
// nibbles through GFNI and through a shift (where the CPU has GFNI, both).
// Q4_0 takes three blocks per load: block counts of every residue mod 3 (1,
// 2, 3, 25, 9, 130), so the masked last group holds one, two or three
// blocks; N odd, so the four-row pass at M = 1 leaves rows over; Q4_K
// at K up to 4096 and past it (four rows per pass, two).
TEST(QuantBlocksInt8, LaneKernelsEveryTail) {
  XModeScope int8(true);
  for (int gfni : {1, 0}) {
    cpu::set_lanes_gfni_override(gfni);
    for (const std::string mode : {"q4_0", "q4_k"}) {
      for (int k : mode == "q4_0" ? std::vector<int>{32, 64, 96, 800, 288, 4160} : std::vector<int>{256, 768, 2304, 4352}) {
        array w = random_blocks(mode, 23, k);
        for (int m : {1, 2, 5, 8}) {
          SCOPED_TRACE(mode + " gfni " + std::to_string(gfni) + " K=" + std::to_string(k) + " M=" + std::to_string(m));
          array x = astype(spread_x(m, k), float32);
          std::vector<double> xd = test::to_double(x), xr = test::round_x8(xd);
          array y = qmm(x, w, mode);
          EXPECT_TRUE(close(y, test::block_product(xd, k, w, mode, true), xr, k, w, mode, 2e-6 * std::sqrt(k)));
        }
      }
    }
  }
  cpu::set_lanes_gfni_override(-1);
}

// Against the unrounded product: the difference stays within the bound the
// rounding allows (and the bound is not vacuous: the largest error is a
// sizeable part of it, and above float32's accumulation error).
TEST(QuantBlocksInt8, WithinRoundingBound) {
  XModeScope int8(true);
  for (cpu::CpuTarget level : levels()) {
    LevelScope scope(level);
    for (const std::string mode : {"q4_0", "q8_0", "q4_k", "q6_k", "q5_k"}) {
      const int k = block_of(mode) == 32 ? 1024 : 2048;
      array w = random_blocks(mode, 29, k);
      SCOPED_TRACE(std::string(cpu::cpu_target_name(level)) + " " + mode);
      array x = astype(spread_x(3, k), float32);
      std::vector<double> xd = test::to_double(x);
      std::vector<double> slack = test::x8_bound(xd, k, w, mode);
      std::vector<double> exact = test::block_product(xd, k, w, mode, false);
      array y = qmm(x, w, mode);
      EXPECT_TRUE(close(y, exact, xd, k, w, mode, 2e-6 * std::sqrt(k), &slack));
      std::vector<double> g = test::to_double(y);
      double worst = 0, worst_share = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        worst = std::max(worst, std::fabs(g[i] - exact[i]));
        worst_share = std::max(worst_share, std::fabs(g[i] - exact[i]) / slack[i]);
      }
      EXPECT_GT(worst_share, 0.01);
      EXPECT_LT(worst_share, 1.0);
      EXPECT_GT(worst, 1e-4);
    }
  }
}

// The rows of x are rounded on their own: row r's result is the same as
// row r alone (QMV kernels for 1..8 rows, the GEMM path beyond), and
// bfloat16 / float16 x take the same rounding of their values.
TEST(QuantBlocksInt8, RowsIndependentAndDtypes) {
  XModeScope int8(true);
  for (const std::string mode : {"q4_0", "q4_k", "q6_k", "q8_0"}) {
    SCOPED_TRACE(mode);
    const int k = block_of(mode) == 32 ? 320 : 512;
    array w = random_blocks(mode, 21, k);
    array x = astype(spread_x(12, k), float32);
    std::vector<double> y12 = test::to_double(qmm(x, w, mode));
    for (int r : {0, 5, 11}) {
      std::vector<double> y1 = test::to_double(qmm(slice(x, {r, 0}, {r + 1, k}), w, mode));
      for (int j = 0; j < 21; ++j) EXPECT_NEAR(y1[j], y12[r * 21 + j], 1e-4 * (1 + std::fabs(y1[j])));
    }
    for (Dtype t : {bfloat16, float16}) {
      array xh = astype(x, t);
      std::vector<double> xd = test::to_double(xh);
      array y = qmm(slice(xh, {0, 0}, {4, k}), w, mode);
      std::vector<double> x4(xd.begin(), xd.begin() + 4 * k);
      EXPECT_TRUE(close(astype(y, float32), test::block_product(x4, k, w, mode, true), test::round_x8(x4), k, w, mode,
                        test::tolerance(t)));
    }
  }
}

// A block with NaN or inf makes its row NaN (not a silently finite sum); a
// block of zeros or of values whose 127 / max |x| overflows adds nothing.
TEST(QuantBlocksInt8, NonFiniteAndTinyBlocks) {
  XModeScope int8(true);
  for (cpu::CpuTarget level : levels()) {
    LevelScope scope(level);
    for (const std::string mode : {"q4_0", "q8_0", "q4_k", "q6_k", "q3_k"}) {
      SCOPED_TRACE(std::string(cpu::cpu_target_name(level)) + " " + mode);
      const int k = block_of(mode) == 32 ? 128 : 512;
      array w = random_blocks(mode, 9, k);
      std::vector<double> v = test::to_double(test::random_array({4, k}));
      v[0 * k + 3] = NAN;
      v[1 * k + 40] = INFINITY;
      for (int i = 0; i < 32; ++i) v[2 * k + i] = 0.0, v[3 * k + 32 + i] = 1e-39 * (i + 1);
      array x = astype(array(v, {4, k}, float64), float32);
      std::vector<double> y = test::to_double(qmm(x, w, mode));
      for (int j = 0; j < 9; ++j) {
        EXPECT_TRUE(std::isnan(y[0 * 9 + j]));
        EXPECT_TRUE(std::isnan(y[1 * 9 + j]));
      }
      std::vector<double> xd = test::to_double(x);
      std::vector<double> rows23(xd.begin() + 2 * k, xd.end());
      std::vector<double> want = test::block_product(rows23, k, w, mode, true);
      for (int j = 0; j < 18; ++j) EXPECT_NEAR(y[18 + j], want[j], 1e-5 * (1 + std::fabs(want[j])));
    }
  }
}

// The float path stays reachable (KILN_BLOCK_X=float, or the hook): x is
// used as it is, to float32 accuracy, on both ISA levels.
TEST(QuantBlocksInt8, FloatPathReachable) {
  XModeScope exact(false);
  for (cpu::CpuTarget level : levels()) {
    LevelScope scope(level);
    for (const std::string mode : {"q4_0", "q8_0", "q4_k", "q6_k"}) {
      SCOPED_TRACE(std::string(cpu::cpu_target_name(level)) + " " + mode);
      const int k = block_of(mode) == 32 ? 288 : 768;
      array w = random_blocks(mode, 19, k);
      for (int m : {1, 4, 11}) {
        array x = astype(spread_x(m, k), float32);
        std::vector<double> xd = test::to_double(x);
        EXPECT_TRUE(close(qmm(x, w, mode), test::block_product(xd, k, w, mode, false), xd, k, w, mode,
                          2e-6 * std::sqrt(k)));
      }
    }
  }
}

}  // namespace kiln::quant_blocks_int8_test
