// Small-M bfloat16 GEMM on vdpbf16ps with B read in place (M <= 32, B
// row-major [K, N], AVX512-BF16 CPUs): `kiln bench` rows bf16_gemv and
// bf16_gemm at M = 16.
//
// Why. At M <= 16 the product is a stream over B (K * N * 2 bytes) with
// little arithmetic per byte. The blocked GEMM packs B first (a second read
// and a write of all of it: at M = 16, 4096 x 4096, the packing took more
// samples than the kernel), and the float matrix-vector path (gemm_gemv.cpp)
// widens every B value and keeps M rows of y in flight per FMA: at M = 8 it
// ran 4096 x 4096 in 6.2 ms, slower than the packed GEMM at M = 16.
//
// How. Rows k and k + 1 of B interleave into bf16 pairs with one vpunpck
// per 16 columns (vpunpcklwd / vpunpckhwd work within 128-bit lanes, so a
// 32-column strip comes out as columns {0-3, 8-11, 16-19, 24-27} and {4-7,
// 12-15, 20-23, 28-31}; y keeps that order and the write-out puts columns
// back), and each pair vector meets x's (x[m][k], x[m][k + 1]) pair,
// broadcast, in one vdpbf16ps per row of x. Four pairs of rows per pass, a
// block of y (M rows x W columns, <= 64 KB) in L1/L2 as in gemm_gemv.cpp,
// threads over column ranges. An odd K pairs its last row with zeros.
// Products are exact (bf16 x bf16 in float32) and the sums float32, as the
// blocked bf16 GEMM's vdpbf16ps kernel computes them.
// Measured (Zen 4/5 VM, 2 threads, 4096 x 4096, session 25): M = 1 0.73 ms
// (the float path 0.6-0.7), M = 8 6.2 -> 1.06 ms, M = 16 3.6 -> 1.87 ms,
// M = 32 4.9 -> 3.2 ms (the packed GEMM before); from M = 33 the packed GEMM.
// A transposed B (x W^T) at 2 <= M <= 8 takes the dot form below: 4096 x
// 4096 M = 4 2.5 -> 1.4 ms, M = 8 3.8 -> 1.9 ms, M = 2 level (alternating).
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/avx512_target.h"
#include "backend/cpu/gemm_internal.h"

#define KILN_GEMV_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace kiln::cpu::gemm_detail {
namespace {

constexpr int kPairsPerPass = 4;
constexpr int64_t kYFloats = 16384;  // 64 KB of y per block
constexpr int64_t kAheadRows = 32;   // B rows prefetched ahead into L2 (AMD; gemv_ahead_rows)

struct Problem {
  int64_t M, N, K, Kp;  // Kp: pairs of rows of B
  const uint32_t* xp;   // [Kp][M] x's bf16 pairs, pair-major
  const uint16_t* B;
  int64_t ldb;
  void* C;
  int64_t ldc;
  bool c_bf16;
};

KILN_GEMV_BF16 inline __mmask32 strip_mask(int64_t n) {
  return n >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1u);
}

// y[MM][ystride] += pairs [p0, p0 + G) of B's rows against x, columns [0, w)
// of the block at b (B + the block's first column).
// y's block: MM rows of W columns, row stride YS (W plus a line: rows W * 4
// bytes apart, a multiple of 4 KB, all fell in the same L1 sets; M = 16
// ran 4.9 ms unpadded, 3.2 padded).
template <int MM>
constexpr int64_t kW = std::max<int64_t>(32, kYFloats / MM / 32 * 32);
template <int MM>
constexpr int64_t kYS = kW<MM> + 16;

template <int MM, int G>
KILN_GEMV_BF16 void pass(const Problem& p, const uint16_t* b, int64_t p0, int64_t w, float* y, int64_t ahead_rows) {
  constexpr int64_t ystride = kYS<MM>;
  const uint16_t* rows[2 * G];
  for (int r = 0; r < 2 * G; ++r) {
    const int64_t k = 2 * p0 + r;
    rows[r] = k < p.K ? b + k * p.ldb : nullptr;  // an odd K's missing row: zeros
  }
  const int64_t ahead = 2 * p0 + 2 * G + ahead_rows <= p.K ? ahead_rows * p.ldb : 0;
  for (int64_t j = 0; j < w; j += 32) {
    const __mmask32 mask = strip_mask(w - j);
    __m512i lo[G], hi[G];
#pragma GCC unroll 4
    for (int q = 0; q < G; ++q) {
      const __m512i r0 = _mm512_maskz_loadu_epi16(mask, rows[2 * q] + j);
      const __m512i r1 = rows[2 * q + 1] ? _mm512_maskz_loadu_epi16(mask, rows[2 * q + 1] + j) : _mm512_setzero_si512();
      if (ahead) {
        _mm_prefetch(reinterpret_cast<const char*>(rows[2 * q] + j + ahead), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(rows[2 * q + 1] + j + ahead), _MM_HINT_T1);
      }
      lo[q] = _mm512_unpacklo_epi16(r0, r1);
      hi[q] = _mm512_unpackhi_epi16(r0, r1);
    }
#pragma GCC unroll 16
    for (int m = 0; m < MM; ++m) {
      float* ym = y + m * ystride + j;
      __m512 a = _mm512_load_ps(ym), c = _mm512_load_ps(ym + 16);
#pragma GCC unroll 4
      for (int q = 0; q < G; ++q) {
        const __m512bh xv = (__m512bh)_mm512_set1_epi32(static_cast<int>(p.xp[(p0 + q) * MM + m]));
        a = _mm512_dpbf16_ps(a, (__m512bh)lo[q], xv);
        c = _mm512_dpbf16_ps(c, (__m512bh)hi[q], xv);
      }
      _mm512_store_ps(ym, a);
      _mm512_store_ps(ym + 16, c);
    }
  }
}

// Column of a strip's lane: lo lane 4 q + t is column 8 q + t, hi lane
// 4 q + t column 8 q + 4 + t.
inline int64_t strip_lane(int64_t c) { return (c % 8 < 4 ? 0 : 16) + 4 * (c / 8) + c % 4; }

template <int MM>
KILN_GEMV_BF16 void columns(const Problem& p, int64_t n0, int64_t n1) {
  constexpr int64_t W = kW<MM>, YS = kYS<MM>;
  std::vector<float> ybuf(MM * YS + 16);
  float* y = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(ybuf.data()) + 63) / 64 * 64);
  for (int64_t w0 = n0; w0 < n1; w0 += W) {
    const int64_t w = std::min(W, n1 - w0);
    std::fill(y, y + MM * YS, 0.0f);
    const uint16_t* b = p.B + w0;
    const int64_t ahead_rows = gemv_ahead_rows(kAheadRows, 2 * w);
    int64_t q = 0;
    for (; q + kPairsPerPass <= p.Kp; q += kPairsPerPass) pass<MM, kPairsPerPass>(p, b, q, w, y, ahead_rows);
    for (; q < p.Kp; ++q) pass<MM, 1>(p, b, q, w, y, ahead_rows);
    for (int m = 0; m < MM; ++m) {
      for (int64_t c = 0; c < w; ++c) {
        store_c(p.C, p.c_bf16, m * p.ldc + w0 + c, y[m * YS + (c / 32) * 32 + strip_lane(c % 32)]);
      }
    }
  }
}

// ---- B transposed (column-major, the weight [N, K] of a linear layer) ----
//
// Column n of B is a row of the weight with k contiguous: 32 values are
// 16 bf16 pairs as they sit, and x's rows (bf16, contiguous) pair up the
// same way, so y[m][n] is a vdpbf16ps chain over k and one horizontal sum.
// NC columns per pass share each load of x; MM x NC accumulators stay in
// registers. (The float path widened both and ran 4096 x 4096 at M = 8 in
// 4.7 ms, slower than the packed GEMM at M = 16.)

struct DotProblem {
  int64_t M, N, K;
  const uint16_t* x;  // [M][K] bf16, contiguous
  const uint16_t* B;  // column n at B + n * ldb
  int64_t ldb;
  void* C;
  int64_t ldc;
  bool c_bf16;
};

template <int MM, int NC>
KILN_GEMV_BF16 void dot_group(const DotProblem& p, int64_t n) {
  constexpr int64_t kAhead = 2 * NC;  // columns prefetched ahead, into L2
  const uint16_t* cols[NC];
  const char* ahead[NC];
  for (int c = 0; c < NC; ++c) {
    cols[c] = p.B + (n + c) * p.ldb;
    ahead[c] = reinterpret_cast<const char*>(n + c + kAhead < p.N ? cols[c] + kAhead * p.ldb : cols[c]);
  }
  __m512 acc[MM][NC];
  for (int m = 0; m < MM; ++m)
    for (int c = 0; c < NC; ++c) acc[m][c] = _mm512_setzero_ps();
  for (int64_t k = 0; k < p.K; k += 32) {
    const __mmask32 mask = strip_mask(p.K - k);
    __m512i w[NC];
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      _mm_prefetch(ahead[c] + 2 * k, _MM_HINT_T1);
      w[c] = _mm512_maskz_loadu_epi16(mask, cols[c] + k);
    }
#pragma GCC unroll 16
    for (int m = 0; m < MM; ++m) {
      const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(mask, p.x + m * p.K + k);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) acc[m][c] = _mm512_dpbf16_ps(acc[m][c], (__m512bh)w[c], xv);
    }
  }
  for (int m = 0; m < MM; ++m) {
    for (int c = 0; c < NC; ++c) {
      store_c(p.C, p.c_bf16, m * p.ldc + n + c, _mm512_reduce_add_ps(acc[m][c]));
    }
  }
}

template <int MM>
KILN_GEMV_BF16 void dot_range(const DotProblem& p, int64_t n0, int64_t n1) {
  // MM x NC accumulators + NC columns + x within 32 registers; each pass
  // reads x's MM rows again (from L2), so NC as large as that allows.
  constexpr int NC = std::min(8, 24 / MM);
  int64_t n = n0;
  for (; n + NC <= n1; n += NC) dot_group<MM, NC>(p, n);
  for (; n < n1; ++n) dot_group<MM, 1>(p, n);
}

bool try_dot(const GemmArgs& g, bool out_bf16) {
  // M = 1 streams B at the memory's speed in gemm_gemv.cpp's float path
  // (2.7-2.9 ms at 4096 x 14336 against 3.65-3.7 here, alternating).
  if (g.M < 2 || g.M > kGemvBf16DotMaxM) return false;
  DotProblem p{g.M, g.N, g.K, nullptr, static_cast<const uint16_t*>(g.B), g.b_col_stride, g.C, g.ldc, out_bf16};
  std::vector<uint16_t> xbuf;
  const auto* A = static_cast<const uint16_t*>(g.A);
  if (g.a_col_stride == 1 && g.a_row_stride == g.K) {
    p.x = A;
  } else {
    xbuf.resize(g.M * g.K);
    for (int64_t m = 0; m < g.M; ++m)
      for (int64_t k = 0; k < g.K; ++k) xbuf[m * g.K + k] = A[m * g.a_row_stride + k * g.a_col_stride];
    p.x = xbuf.data();
  }
  const auto fn = pick_m(p.M, std::make_integer_sequence<int, kGemvBf16DotMaxM>{},
                         [](auto mm) { return &dot_range<decltype(mm)::value>; });
  over_columns(g.threads, 2.0 * g.K * g.N, g.N, 8, [&](int64_t n0, int64_t n1) { fn(p, n0, n1); });
  return true;
}

}  // namespace

bool try_gemv_bf16_dot(const GemmArgs& g, bool out_bf16) {
  if (g.M < 1 || g.N <= 0 || g.K <= 0) return false;
  if (g.b_row_stride == 1 && g.b_col_stride != 1) return try_dot(g, out_bf16);
  if (g.M > kGemvBf16MaxM || g.b_col_stride != 1) return false;
  Problem p{};
  p.M = g.M, p.N = g.N, p.K = g.K, p.Kp = (g.K + 1) / 2;
  p.B = static_cast<const uint16_t*>(g.B);
  p.ldb = g.b_row_stride;
  p.C = g.C, p.ldc = g.ldc, p.c_bf16 = out_bf16;
  std::vector<uint32_t> xp(p.M * p.Kp, 0u);
  const auto* A = static_cast<const uint16_t*>(g.A);
  for (int64_t m = 0; m < p.M; ++m) {
    for (int64_t k = 0; k < p.K; ++k) {
      const uint32_t v = A[m * g.a_row_stride + k * g.a_col_stride];
      xp[(k / 2) * p.M + m] |= k % 2 ? v << 16 : v;
    }
  }
  p.xp = xp.data();
  const auto fn = pick_m(p.M, std::make_integer_sequence<int, kGemvBf16MaxM>{},
                         [](auto mm) { return &columns<decltype(mm)::value>; });
  over_columns(g.threads, 2.0 * g.K * g.N, g.N, 32, [&](int64_t n0, int64_t n1) { fn(p, n0, n1); });  // strips
  return true;
}

}  // namespace kiln::cpu::gemm_detail
