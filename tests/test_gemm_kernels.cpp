// Direct tests of the CPU GEMM kernels (gemm_f32 / gemm_bf16) against a
// double-precision reference: odd sizes, transposed and strided operands,
// the small-M / small-N matrix-vector paths, and every ISA level this CPU
// has (forced down through set_cpu_target_override).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gemm.h"

namespace kiln::cpu {
namespace {

enum class Layout { row_major, col_major, strided };

// A rows x cols operand stored with the given layout inside a larger buffer
// (padding between lines, so reading outside the view shows up as errors).
struct Operand {
  std::vector<float> f32;
  std::vector<bfloat16_t> bf16;
  int64_t row_stride = 0, col_stride = 0;

  Operand(int64_t rows, int64_t cols, Layout layout, std::mt19937& rng) {
    int64_t size = 0;
    switch (layout) {
      case Layout::row_major: row_stride = cols + 3, col_stride = 1, size = rows * row_stride; break;
      case Layout::col_major: row_stride = 1, col_stride = rows + 5, size = cols * col_stride; break;
      case Layout::strided: row_stride = 2 * cols + 7, col_stride = 2, size = rows * row_stride; break;
    }
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    f32.resize(size + 1);
    bf16.resize(size + 1);
    for (size_t i = 0; i < f32.size(); ++i) {
      bf16[i] = bfloat16_t(dist(rng));
      f32[i] = i % 2 ? dist(rng) : float(bf16[i]);
    }
  }
  double at(int64_t r, int64_t c, bool as_bf16) const {
    int64_t i = r * row_stride + c * col_stride;
    return as_bf16 ? double(float(bf16[i])) : double(f32[i]);
  }
};

enum class Kind { f32, bf16_to_f32, bf16_to_bf16 };

// Runs one GEMM and returns the worst |error| / tolerance (> 1 fails).
double run_case(int64_t M, int64_t N, int64_t K, Layout la, Layout lb, Kind kind, int threads, std::mt19937& rng) {
  Operand a(M, K, la, rng), b(K, N, lb, rng);
  const bool in_bf16 = kind != Kind::f32, out_bf16 = kind == Kind::bf16_to_bf16;
  const int64_t ldc = N + 2;
  constexpr float kSentinel = 512.0f;  // exact in bf16; must survive in the padding
  std::vector<float> c32(M * ldc + 1, kSentinel);
  std::vector<bfloat16_t> c16(M * ldc + 1, bfloat16_t(kSentinel));
  GemmArgs g{M, N, K,
             in_bf16 ? static_cast<const void*>(a.bf16.data()) : a.f32.data(), a.row_stride, a.col_stride,
             in_bf16 ? static_cast<const void*>(b.bf16.data()) : b.f32.data(), b.row_stride, b.col_stride,
             out_bf16 ? static_cast<void*>(c16.data()) : c32.data(), ldc, threads};
  if (kind == Kind::f32) {
    gemm_f32(g);
  } else {
    gemm_bf16(g, out_bf16 ? Dtype::bfloat16 : Dtype::float32);
  }
  auto got = [&](int64_t i) { return out_bf16 ? double(float(c16[i])) : double(c32[i]); };
  double worst = 0;
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      if (j >= N) {
        if (got(i * ldc + j) != kSentinel) return 1e30;  // wrote outside C
        continue;
      }
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        double p = a.at(i, k, in_bf16) * b.at(k, j, in_bf16);
        ref += p;
        mag += std::fabs(p);
      }
      // fp32 accumulation error grows ~sqrt(K); bf16 output adds 2^-8 relative.
      double tol = 1.2e-7 * (4.0 + std::sqrt(double(K))) * mag + 1e-30;
      if (out_bf16) tol += std::fabs(ref) / 256.0;
      double e = std::fabs(got(i * ldc + j) - ref) / tol;
      if (!(e <= 1e29)) return 1e30;  // NaN
      worst = std::max(worst, e);
    }
  }
  if (got(M * ldc) != kSentinel) return 1e30;
  return worst;
}

class GemmKernels : public ::testing::TestWithParam<CpuTarget> {
 protected:
  void SetUp() override {
    if (static_cast<int>(GetParam()) > static_cast<int>(cpu_target_detected())) GTEST_SKIP() << "CPU lacks it";
    set_cpu_target_override(GetParam());
  }
  void TearDown() override { clear_cpu_target_override(); }
};

const Layout kLayouts[] = {Layout::row_major, Layout::col_major, Layout::strided};
const Kind kKinds[] = {Kind::f32, Kind::bf16_to_f32, Kind::bf16_to_bf16};

TEST_P(GemmKernels, RandomOddSizesAndLayouts) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> size(1, 45);
  for (int r = 0; r < 60; ++r) {
    int64_t M = size(rng), N = size(rng), K = size(rng);
    if (r % 4 == 0) M = 1 + r % 8;  // matrix-vector path
    if (r % 6 == 0) N = 1 + r % 8;  // small-N (mirrored) path
    Layout la = kLayouts[r % 3], lb = kLayouts[(r / 3) % 3];
    Kind kind = kKinds[r % 3];
    double e = run_case(M, N, K, la, lb, kind, 1 + r % 2, rng);
    EXPECT_LE(e, 1.0) << "M=" << M << " N=" << N << " K=" << K << " la=" << int(la) << " lb=" << int(lb)
                      << " kind=" << int(kind) << " target=" << cpu_target_name();
  }
}

TEST_P(GemmKernels, SeveralCacheBlocksAndThreads) {
  // K beyond one KC block (fp32 accumulation across blocks, bf16 output via
  // the fp32 workspace), M and N beyond one register tile with ragged edges;
  // M = 16 and 24 take the 8 x 48 tiles (prefer_small_m_tile); bf16 at M
  // <= 32 with a row-major B the in-place vdpbf16ps path (odd K, column
  // tails, several y blocks: 1030 columns at M = 16). On AMX, bf16 at 8 <= M
  // <= 32 streams B into tiles (try_amx_small_m): partial 64-column groups,
  // K past a chunk of 256 with a partial last 32, one and two row tiles.
  std::mt19937 rng(99);
  const int64_t shapes[][3] = {{37, 45, 1031}, {129, 33, 257},  {5, 300, 700},  {300, 3, 601}, {16, 101, 1031},
                               {24, 300, 333}, {16, 1030, 515}, {9, 77, 1031},  {1, 2100, 99}, {32, 130, 515},
                               {8, 200, 600},  {13, 70, 33},    {17, 129, 601}, {31, 64, 290}};
  for (const auto& s : shapes) {
    for (Kind kind : kKinds) {
      double e = run_case(s[0], s[1], s[2], Layout::row_major, Layout::row_major, kind, 2, rng);
      EXPECT_LE(e, 1.0) << s[0] << "x" << s[1] << "x" << s[2] << " kind=" << int(kind) << " " << cpu_target_name();
    }
  }
  double e = run_case(45, 39, 1029, Layout::strided, Layout::col_major, Kind::bf16_to_bf16, 2, rng);
  EXPECT_LE(e, 1.0) << cpu_target_name();
  e = run_case(20, 150, 333, Layout::strided, Layout::row_major, Kind::bf16_to_bf16, 2, rng);
  EXPECT_LE(e, 1.0) << cpu_target_name();
  // bf16 with a transposed B at M <= 8 (the dot form of gemm_gemv_bf16.cpp;
  // on AMX from M = 6 W's rows as tiles in place, amx_small_m_transposed):
  // K with a partial last 32, columns past a group of eight (of 64 / 32 rows
  // of W), strided x.
  // On AMX, products of more than 32 rows up to 512^3 with K a multiple of
  // 32 read A in place (try_amx_small_product): a partial last row block
  // (staged), partial 32-column panels, row-major and transposed B, fewer
  // panels than threads (row blocks split instead).
  const int64_t small[][3] = {{33, 45, 64},   {100, 70, 96},  {129, 33, 256},
                              {64, 300, 128}, {250, 96, 512}, {512, 20, 64}};
  for (const auto& s : small) {
    for (Kind kind : kKinds) {
      for (Layout lb : {Layout::row_major, Layout::col_major}) {
        e = run_case(s[0], s[1], s[2], Layout::row_major, lb, kind, 2, rng);
        EXPECT_LE(e, 1.0) << s[0] << "x" << s[1] << "x" << s[2] << " kind=" << int(kind) << " lb=" << int(lb) << " "
                          << cpu_target_name();
      }
    }
  }
  for (int64_t m : {2, 3, 6, 8, 13, 17, 32}) {
    e = run_case(m, 77, 1031, Layout::strided, Layout::col_major, Kind::bf16_to_f32, 2, rng);
    EXPECT_LE(e, 1.0) << "M " << m << " " << cpu_target_name();
    e = run_case(m, 19, 70, Layout::row_major, Layout::col_major, Kind::bf16_to_bf16, 1, rng);
    EXPECT_LE(e, 1.0) << "M " << m << " " << cpu_target_name();
  }
}

TEST_P(GemmKernels, DegenerateSizes) {
  std::mt19937 rng(7);
  for (Kind kind : kKinds) {
    EXPECT_LE(run_case(1, 1, 1, Layout::row_major, Layout::row_major, kind, 2, rng), 1.0);
    EXPECT_LE(run_case(33, 17, 1, Layout::col_major, Layout::row_major, kind, 2, rng), 1.0);
    EXPECT_LE(run_case(4, 9, 0, Layout::row_major, Layout::row_major, kind, 2, rng), 1.0);  // C = 0
    EXPECT_LE(run_case(0, 9, 5, Layout::row_major, Layout::row_major, kind, 2, rng), 1.0);
    EXPECT_LE(run_case(3, 0, 5, Layout::row_major, Layout::row_major, kind, 2, rng), 1.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, GemmKernels,
                         ::testing::Values(CpuTarget::scalar, CpuTarget::avx2, CpuTarget::avx512,
                                           CpuTarget::avx512_bf16, CpuTarget::amx_bf16),
                         [](const auto& info) { return std::string(cpu_target_name(info.param)); });

}  // namespace
}  // namespace kiln::cpu
