// QMV on llama.cpp's block formats (decode: y = x w^T with M <= 8 rows of
// x): the blocks are read once, decoded in registers and fused with the
// dot products. Measured by the `qmv_q4_0`, `qmv_q8_0`, `qmv_q4_k`,
// `qmv_q6_k` rows of `kiln bench` (drill D4).
//
// Why it is shaped this way. The product reads N * K * bytes_per_weight
// bytes of weights and almost nothing else (x and y stay in L1/L2), so the
// floor is DRAM bandwidth; the kernel must only decode fast enough to keep
// up with it on every core. Every format is brought to the same inner step:
// 32 weights as 32 int8 q (one AVX2 register) plus the (a, b) of their
// sub-block(s), then w = a * q + b in float32 registers (two zmm, or four
// ymm on AVX2) and one FMA per weight per row of x. Per-format decoders
// (Dec<F>) only unpack bits; the ISA kernels own the arithmetic:
// - Q8_0, Q4_0, Q4_K, Q6_K (the formats models ship in) have SIMD decoders:
//   a load, a shift, a mask (and for Q6_K an OR of the high bits).
// - The other formats decode their 32 q through the scalar reference
//   (quant_blocks_math.h): correct, slower, and still one pass over w.
// x stays float32. These kernels serve float64 x and KILN_BLOCK_X=float;
// float32 / float16 / bfloat16 x is rounded to 8 bits by default and takes
// quant_blocks_qmv_int8.cpp's integer dot products, which keep up with DRAM
// where these (10-20 instructions per 32 weights) reach 0.3-0.6 of it.
// With one row of x, two accumulator sets alternate so the FMA latency is
// hidden; with more rows, the rows provide the independent chains.
// On AVX-512, Q4_0 and Q8_0 (one scale, no bias) skip w = a q + b: the
// codes go to float and a * sum q x costs one FMA by the scale per block
// (qmv_avx512_scaled below).
// Threads split N (each thread streams its own rows of w).
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/quant_blocks_cpu.h"
#include "backend/cpu/quant_blocks_dec.h"
#include "backend/cpu/quant_blocks_math.h"
#include "backend/cpu/quant_blocks_params.h"
#include "backend/cpu/threading.h"
#include "backend/cpu/avx512_target.h"

namespace kiln::cpu {
namespace {

using namespace qdec;

// ---- AVX-512: a chunk is two zmm of weights ----

template <int M>
KILN_AVX512 KILN_QINLINE void consume512(__m256i q, float a0, float a1, float b0, float b1, const float* x, int64_t K,
                                         __m512 (&acc)[M][2]) {
  __m512 w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))), _mm512_set1_ps(a0),
                              _mm512_set1_ps(b0));
  __m512 w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))),
                              _mm512_set1_ps(a1), _mm512_set1_ps(b1));
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
    acc[m][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + m * K), acc[m][0]);
    acc[m][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + m * K + 16), acc[m][1]);
  }
}

template <BlockFormat F, int M>
KILN_AVX512 void qmv_avx512(const float* x, int64_t K, const uint8_t* w, int64_t n0, int64_t n1, float* y, int64_t N) {
  using D = Dec<F>;
  constexpr int C = D::kChunks;
  constexpr int A = M == 1 ? 2 : 1;  // accumulator sets
  const int64_t nb = K / D::kBlock, row_bytes = nb * D::kBytes;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    __m512 acc[A][M][2];
    for (int u = 0; u < A; ++u)
      for (int m = 0; m < M; ++m) acc[u][m][0] = acc[u][m][1] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * D::kBytes;
      _mm_prefetch(reinterpret_cast<const char*>(blk) + 1024, _MM_HINT_T0);
      Params p;
      D::params(blk, p);
      const float* xb = x + b * D::kBlock;
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const int u = (C == 1 ? static_cast<int>(b) : c) % A;
        float a0 = halves<F>() ? p.a[2 * c] : p.a[c], a1 = halves<F>() ? p.a[2 * c + 1] : p.a[c];
        float b0 = halves<F>() ? p.b[2 * c] : p.b[c], b1 = halves<F>() ? p.b[2 * c + 1] : p.b[c];
        if (A == 2 && u == 1) {
          consume512<M>(D::chunk(blk, c), a0, a1, b0, b1, xb + c * 32, K, acc[A - 1]);
        } else {
          consume512<M>(D::chunk(blk, c), a0, a1, b0, b1, xb + c * 32, K, acc[0]);
        }
      }
    }
    for (int m = 0; m < M; ++m) {
      __m512 s = _mm512_add_ps(acc[0][m][0], acc[0][m][1]);
      if (A == 2) s = _mm512_add_ps(s, _mm512_add_ps(acc[A - 1][m][0], acc[A - 1][m][1]));
      y[m * N + n] = _mm512_reduce_add_ps(s);
    }
  }
}

// ---- AVX-512, Q4_0 / Q8_0: scale after the dot product ----
// These blocks have one scale and no bias, so a * sum q x is cheaper than
// sum (a q) x: the 32 codes go straight to int32 lanes (vpmovzxbd /
// vpmovsxbd with the load folded in), to float, two FMAs with x, and one
// FMA by the broadcast scale: about 11 instructions per block instead of 20.
// For one row of x four accumulators hide the scale FMA's latency.

// The 32 codes of a block as two zmm of floats (weights 0-15, 16-31).
template <BlockFormat F>
KILN_AVX512 KILN_QINLINE void codes512(const uint8_t* blk, __m512& q0, __m512& q1) {
  if constexpr (F == BlockFormat::q8_0) {
    q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2))));
    q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18))));
  } else {  // Q4_0: byte j holds weight j (low nibble) and j + 16 (high)
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
    const __m512i eight = _mm512_set1_epi32(8);
    q0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x0F)), eight));
    q1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(v, 4), eight));
  }
}

// One block (index b of the row) into one accumulator set.
template <BlockFormat F, int M>
KILN_AVX512 KILN_QINLINE void step512(const uint8_t* blk, const float* xb, int64_t K, __m512 (&acc)[M]) {
  _mm_prefetch(reinterpret_cast<const char*>(blk) + 1024, _MM_HINT_T0);
  __m512 q0, q1;
  codes512<F>(blk, q0, q1);
  const __m512 a = _mm512_set1_ps(qparams::half_at(blk));
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
    const __m512 t = _mm512_fmadd_ps(q1, _mm512_loadu_ps(xb + m * K + 16), _mm512_mul_ps(q0, _mm512_loadu_ps(xb + m * K)));
    acc[m] = _mm512_fmadd_ps(t, a, acc[m]);
  }
}

template <BlockFormat F, int M>
KILN_AVX512 void qmv_avx512_scaled(const float* x, int64_t K, const uint8_t* w, int64_t n0, int64_t n1, float* y,
                                   int64_t N) {
  constexpr int kBytes = block_layout(F).bytes;
  constexpr int A = M == 1 ? 4 : M == 2 ? 2 : 1;
  const int64_t nb = K / 32, row_bytes = nb * kBytes;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    __m512 acc[A][M];
    for (int u = 0; u < A; ++u)
      for (int m = 0; m < M; ++m) acc[u][m] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + A <= nb; b += A) {
#pragma GCC unroll 4
      for (int u = 0; u < A; ++u) step512<F, M>(row + (b + u) * kBytes, x + (b + u) * 32, K, acc[u]);
    }
    for (; b < nb; ++b) step512<F, M>(row + b * kBytes, x + b * 32, K, acc[0]);
    for (int m = 0; m < M; ++m) {
      __m512 s = acc[0][m];
      for (int u = 1; u < A; ++u) s = _mm512_add_ps(s, acc[u][m]);
      y[m * N + n] = _mm512_reduce_add_ps(s);
    }
  }
}

// ---- AVX2: a chunk is four ymm of weights ----

template <int M>
KILN_QINLINE void consume256(__m256i q, float a0, float a1, float b0, float b1, const float* x, int64_t K,
                             __m256 (&acc)[M][2]) {
  __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  __m256 va0 = _mm256_set1_ps(a0), va1 = _mm256_set1_ps(a1), vb0 = _mm256_set1_ps(b0), vb1 = _mm256_set1_ps(b1);
  __m256 w[4] = {
      _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), va0, vb0),
      _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), va0, vb0),
      _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), va1, vb1),
      _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), va1, vb1),
  };
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) acc[m][v & 1] = _mm256_fmadd_ps(w[v], _mm256_loadu_ps(x + m * K + 8 * v), acc[m][v & 1]);
  }
}

KILN_QINLINE float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <BlockFormat F, int M>
void qmv_avx2(const float* x, int64_t K, const uint8_t* w, int64_t n0, int64_t n1, float* y, int64_t N) {
  using D = Dec<F>;
  constexpr int C = D::kChunks;
  const int64_t nb = K / D::kBlock, row_bytes = nb * D::kBytes;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    __m256 acc[M][2];
    for (int m = 0; m < M; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * D::kBytes;
      Params p;
      D::params(blk, p);
      const float* xb = x + b * D::kBlock;
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        float a0 = halves<F>() ? p.a[2 * c] : p.a[c], a1 = halves<F>() ? p.a[2 * c + 1] : p.a[c];
        float b0 = halves<F>() ? p.b[2 * c] : p.b[c], b1 = halves<F>() ? p.b[2 * c + 1] : p.b[c];
        consume256<M>(D::chunk(blk, c), a0, a1, b0, b1, xb + c * 32, K, acc);
      }
    }
    for (int m = 0; m < M; ++m) y[m * N + n] = hsum256(_mm256_add_ps(acc[m][0], acc[m][1]));
  }
}

using Kernel = void (*)(const float*, int64_t, const uint8_t*, int64_t, int64_t, float*, int64_t);

// Kernels for M = 1..8 rows of x.
template <BlockFormat F>
Kernel pick(int M, bool avx512) {
  constexpr bool kScaled = F == BlockFormat::q4_0 || F == BlockFormat::q8_0;
#define KILN_QMV_CASE(m) \
  case m:                \
    return avx512 ? (kScaled ? qmv_avx512_scaled<F, m> : qmv_avx512<F, m>) : qmv_avx2<F, m>;
  switch (M) {
    KILN_QMV_CASE(1)
    KILN_QMV_CASE(2)
    KILN_QMV_CASE(3)
    KILN_QMV_CASE(4)
    KILN_QMV_CASE(5)
    KILN_QMV_CASE(6)
    KILN_QMV_CASE(7)
    default:
      return avx512 ? (kScaled ? qmv_avx512_scaled<F, 8> : qmv_avx512<F, 8>) : qmv_avx2<F, 8>;
  }
#undef KILN_QMV_CASE
}

Kernel pick(BlockFormat f, int M, bool avx512) {
  return dispatch_format(f, [&](auto fc) { return pick<decltype(fc)::value>(M, avx512); });
}

}  // namespace

void block_qmv(BlockFormat f, const float* x, int64_t M, const uint8_t* w, int64_t N, int64_t K, float* y) {
  const bool avx512 = cpu_target() >= CpuTarget::avx512;
  const int64_t row_bytes = K / block_layout(f).block * block_layout(f).bytes;
  // Each chunk of 8 rows of x reads w once; its results go to y's rows.
  for (int64_t m0 = 0; m0 < M; m0 += 8) {
    int mr = static_cast<int>(std::min<int64_t>(8, M - m0));
    Kernel k = pick(f, mr, avx512);
    const float* xm = x + m0 * K;
    float* ym = y + m0 * N;
    // ~64 KB of weights per task at the least.
    int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(row_bytes, 1));
    parallel_for(N, grain, [&](int64_t n0, int64_t n1) { k(xm, K, w, n0, n1, ym, N); });
  }
}

}  // namespace kiln::cpu
