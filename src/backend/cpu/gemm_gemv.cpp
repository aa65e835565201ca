// Small-M GEMM (M <= 8, e.g. LLM decode: [1,4096] x [4096,14336]) and its
// mirror image, small N. Here the work is O(K*N) bytes of B against
// O(M*K*N) FLOPs, so the only goal is to stream B exactly once at memory
// bandwidth: no packing, N split across threads in contiguous chunks.
//
//  * B row-major ([K,N], unit column stride): y[m,:] += x[m,k] * B[k,:].
//    Each thread keeps y for its column chunk in an L1-resident buffer and
//    walks B row by row, a few rows at a time, so B is read as long
//    contiguous runs (friendly to the hardware prefetchers and the TLB).
//  * B column-major (unit row stride, i.e. a transposed weight [N,K]):
//    y[m,n] = dot(x[m,:], Bt[n,:]); several columns at once so each x load
//    feeds several FMAs, horizontal sums at the end.
// bf16 B is widened to fp32 in registers (a shift) and accumulated in fp32.
#include <omp.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "backend/cpu/gemm_avx512_store.h"
#include "backend/cpu/gemm_internal.h"

namespace kiln::cpu::gemm_detail {
namespace {


struct GemvProblem {
  int64_t M, N, K;
  const float* x;  // [M][K] contiguous rows, leading dimension ldx
  int64_t ldx;
  const void* B;
  int64_t b_rs, b_cs;
  bool b_bf16;
  void* C;
  int64_t c_rs, c_cs;
  bool c_bf16;
};

KILN_TARGET_AVX512 inline __m512 load16(const float* p, __mmask16 m) { return _mm512_mask_loadu_ps(_mm512_setzero_ps(), m, p); }
KILN_TARGET_AVX512 inline __m512 load16(const bfloat16_t* p, __mmask16 m) {
  __m512i w = _mm512_cvtepu16_epi32(_mm256_mask_loadu_epi16(_mm256_setzero_si256(), m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

inline __mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>(n >= 16 ? 0xffffu : (1u << n) - 1u); }

void write_out(const GemvProblem& p, int64_t m, int64_t n, float v) { store_c(p.C, p.c_bf16, m * p.c_rs + n * p.c_cs, v); }

// y[MM][ystride] += x[MM][k..k+G) * B[k..k+G)[0..w): G rows of B per pass
// over y, so each y load/store is shared by G FMAs.
template <int MM, int G, class TB>
KILN_TARGET_AVX512 void rows_pass(const float* x, int64_t ldx, const TB* b, int64_t ldb, int64_t k, int64_t K_total,
                                  int64_t w, float* y, int64_t ystride, int64_t ahead_rows) {
  __m512 xs[MM][G];
  const TB* rows[G];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    rows[g] = b + (k + g) * ldb;
#pragma GCC unroll 8
    for (int m = 0; m < MM; ++m) xs[m][g] = _mm512_set1_ps(x[m * ldx + k + g]);
  }
  // Each pass reads G row segments of w columns that start in new pages,
  // where the hardware prefetchers restart; so prefetch the segments
  // `ahead_rows` rows ahead in software (one prefetch per 64-byte line),
  // into L2: into L1 they evicted y's block (4096 x 14336 on the Zen 4/5 VM,
  // alternating in one process, session 25: float32 7.5-8.0 -> 6.6-7.0 ms,
  // bfloat16 4.2 -> 3.7-3.9 ms with the two FMA chains below).
  const int64_t ahead = (k + ahead_rows + G <= K_total) ? ahead_rows * ldb : 0;
  for (int64_t j = 0; j < w; j += 16) {
    __mmask16 mask = tail_mask(w - j);
    __m512 bv[G];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      if (ahead && (sizeof(TB) == 4 || (j & 31) == 0)) _mm_prefetch(reinterpret_cast<const char*>(rows[g] + j + ahead), _MM_HINT_T1);
      bv[g] = load16(rows[g] + j, mask);
    }
#pragma GCC unroll 8
    for (int m = 0; m < MM; ++m) {
      float* yp = y + m * ystride + j;
      // Two chains of G / 2 FMAs: one chain of G was latency-bound.
      __m512 acc = _mm512_load_ps(yp), acc2 = _mm512_setzero_ps();
#pragma GCC unroll 8
      for (int g = 0; g < G; g += 2) {
        acc = _mm512_fmadd_ps(xs[m][g], bv[g], acc);
        if (g + 1 < G) acc2 = _mm512_fmadd_ps(xs[m][g + 1], bv[g + 1], acc2);
      }
      _mm512_store_ps(yp, _mm512_add_ps(acc, acc2));
    }
  }
}

// y[MM][ystride] += x[MM][K] * B[K][w] for one column block of width w.
template <int MM, class TB>
KILN_TARGET_AVX512 void rows_block(const float* x, int64_t ldx, const TB* b, int64_t ldb, int64_t K, int64_t w,
                                   float* y, int64_t ystride) {
  // Rows of B per pass: bounded by the registers holding broadcast x values.
  constexpr int KG = MM <= 2 ? 8 : MM <= 4 ? 4 : 2;
  const int64_t ahead_rows = gemv_ahead_rows(4 * KG > 8 ? 4 * KG : 8, w * int64_t{sizeof(TB)});
  int64_t k = 0;
  for (; k + KG <= K; k += KG) rows_pass<MM, KG, TB>(x, ldx, b, ldb, k, K, w, y, ystride, ahead_rows);
  for (; k < K; ++k) rows_pass<MM, 1, TB>(x, ldx, b, ldb, k, K, w, y, ystride, ahead_rows);
}

// Column-block width: MM rows of y in 64 KB (in L2; B's row segments are
// then 64 KB of float32 per row of a pass, fewer restarts of the hardware
// prefetchers). 16 KB (in L1) measured slower on the Zen 4/5 VM, alternating
// in one process (session 25): 4096 x 14336 bfloat16 4.0-4.4 -> 3.0-3.5 ms,
// float32 7.4-7.6 -> 6.8-7.4 ms.
constexpr int64_t kRowsYFloats = 16384;

template <int MM, class TB>
KILN_TARGET_AVX512 void rows_range(const GemvProblem& p, int64_t n0, int64_t n1) {
  // y's rows one line more than W apart: W * 4 bytes is a multiple of 4 KB,
  // and rows that far apart share L1 sets (M = 8, 4096 x 4096 float32:
  // 5.6-5.9 -> 3.45-3.65 ms in alternation, session 25).
  constexpr int64_t W = kRowsYFloats / MM / 16 * 16;
  constexpr int64_t ys = W + 16;
  alignas(64) float y[MM * ys];
  const TB* B = static_cast<const TB*>(p.B);
  for (int64_t w0 = n0; w0 < n1; w0 += W) {
    const int64_t w = std::min(W, n1 - w0);
    const int64_t wpad = (w + 15) / 16 * 16;
    for (int m = 0; m < MM; ++m) std::fill(y + m * ys, y + m * ys + wpad, 0.0f);
    rows_block<MM, TB>(p.x, p.ldx, B + w0, p.b_rs, p.K, w, y, ys);
    for (int m = 0; m < MM; ++m)
      for (int64_t j = 0; j < w; ++j) write_out(p, m, w0 + j, y[m * ys + j]);
  }
}

// NC columns of the transposed B against MM rows of x. Each column is a
// run of K values (16 KB of float32 at K = 4096) that the hardware
// prefetcher barely ramps up on before the next NC columns start, so the
// loop prefetches the columns two groups ahead, at the same k, into L2:
// 4096 x 14336 (the LLM layout, B = W^T) bfloat16 2.45 -> 2.20 ms in
// alternation on two cores of the Zen 4/5 VM; float32 level at 6.5 ms in
// alternation (4.0-4.3 ms in runs of another hour) (session 25).
template <int MM, int NC, class TB>
KILN_TARGET_AVX512 void dot_columns(const GemvProblem& p, int64_t n) {
  constexpr int64_t kAhead = 2 * NC;
  const TB* B = static_cast<const TB*>(p.B);
  const TB* cols[NC];
  const char* ahead[NC];
#pragma GCC unroll 8
  for (int c = 0; c < NC; ++c) {
    cols[c] = B + (n + c) * p.b_cs;
    ahead[c] = reinterpret_cast<const char*>(n + c + kAhead < p.N ? cols[c] + kAhead * p.b_cs : cols[c]);
  }
  __m512 acc[MM][NC];
#pragma GCC unroll 8
  for (int m = 0; m < MM; ++m)
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) acc[m][c] = _mm512_setzero_ps();
  for (int64_t k = 0; k < p.K; k += 16) {
    __mmask16 mask = tail_mask(p.K - k);
    __m512 bv[NC];
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      if (sizeof(TB) == 4 || (k & 31) == 0) _mm_prefetch(ahead[c] + k * sizeof(TB), _MM_HINT_T1);
      bv[c] = load16(cols[c] + k, mask);
    }
#pragma GCC unroll 8
    for (int m = 0; m < MM; ++m) {
      __m512 xv = _mm512_mask_loadu_ps(_mm512_setzero_ps(), mask, p.x + m * p.ldx + k);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) acc[m][c] = _mm512_fmadd_ps(xv, bv[c], acc[m][c]);
    }
  }
  for (int m = 0; m < MM; ++m)
    for (int c = 0; c < NC; ++c) write_out(p, m, n + c, _mm512_reduce_add_ps(acc[m][c]));
}

template <int MM, class TB>
KILN_TARGET_AVX512 void dot_range(const GemvProblem& p, int64_t n0, int64_t n1) {
  // MM x NC accumulators + NC B vectors + 1 x vector within 32 registers.
  constexpr int NC = MM <= 3 ? 8 : MM <= 4 ? 6 : MM <= 6 ? 4 : 3;
  int64_t n = n0;
  for (; n + NC <= n1; n += NC) dot_columns<MM, NC, TB>(p, n);
  for (; n < n1; ++n) dot_columns<MM, 1, TB>(p, n);
}

using RangeFn = void (*)(const GemvProblem&, int64_t, int64_t);

template <class TB>
RangeFn pick(bool rows, int64_t M) {
  return pick_m(M, std::make_integer_sequence<int, kGemvMaxM>{}, [rows](auto mm) -> RangeFn {
    constexpr int k = decltype(mm)::value;
    return rows ? &rows_range<k, TB> : &dot_range<k, TB>;
  });
}

}  // namespace

bool try_gemv_avx512(const GemmArgs& g, bool a_is_bf16, bool b_is_bf16, bool out_bf16) {
  if (g.K <= 0 || g.M <= 0 || g.N <= 0) return false;
  GemvProblem p{};
  const void* X;
  int64_t x_rs, x_cs;
  bool x_bf16;
  if (g.M <= kGemvMaxM) {
    p.M = g.M, p.N = g.N;
    X = g.A, x_rs = g.a_row_stride, x_cs = g.a_col_stride, x_bf16 = a_is_bf16;
    p.B = g.B, p.b_rs = g.b_row_stride, p.b_cs = g.b_col_stride, p.b_bf16 = b_is_bf16;
    p.c_rs = g.ldc, p.c_cs = 1;
  } else if (g.N <= kGemvMaxM) {
    // C^T = B^T A^T: B becomes the small "x" side, A the streamed matrix.
    p.M = g.N, p.N = g.M;
    X = g.B, x_rs = g.b_col_stride, x_cs = g.b_row_stride, x_bf16 = b_is_bf16;
    p.B = g.A, p.b_rs = g.a_col_stride, p.b_cs = g.a_row_stride, p.b_bf16 = a_is_bf16;
    p.c_rs = 1, p.c_cs = g.ldc;
  } else {
    return false;
  }
  p.K = g.K;
  p.C = g.C;
  p.c_bf16 = out_bf16;
  const bool rows = p.b_cs == 1;
  if (!rows && p.b_rs != 1) return false;  // neither layout streams well

  // x as contiguous fp32 rows (tiny next to B).
  std::vector<float> xbuf;
  if (!x_bf16 && x_cs == 1) {
    p.x = static_cast<const float*>(X);
    p.ldx = x_rs;
  } else {
    xbuf.resize(p.M * p.K + 16);
    for (int64_t m = 0; m < p.M; ++m)
      for (int64_t k = 0; k < p.K; ++k) {
        int64_t off = m * x_rs + k * x_cs;
        xbuf[m * p.K + k] = x_bf16 ? float(static_cast<const bfloat16_t*>(X)[off]) : static_cast<const float*>(X)[off];
      }
    p.x = xbuf.data();
    p.ldx = p.K;
  }

  RangeFn fn = p.b_bf16 ? pick<bfloat16_t>(rows, p.M) : pick<float>(rows, p.M);
  // Chunks on 16-column (one vector) boundaries for the row-major kernel.
  over_columns(g.threads, double(p.K) * p.N * (p.b_bf16 ? 2 : 4), p.N, rows ? 16 : 1,
               [&](int64_t n0, int64_t n1) { fn(p, n0, n1); });
  return true;
}

}  // namespace kiln::cpu::gemm_detail
