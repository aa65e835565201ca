// QMV on llama.cpp's Q4_0, Q4_K and Q6_K blocks for bfloat16 x, on CPUs
// with AVX512-BF16 (`kiln bench` rows qmv_q4_0 / qmv_q4_k / qmv_q6_k, bf16,
// with KILN_BLOCK_X=float: by default bfloat16 x is rounded to 8 bits and
// takes quant_blocks_qmv_int8.cpp, which is faster).
//
// Why: the float kernel (quant_blocks_qmv.cpp) widens every 32 weights
// from int8 to int32, converts them to float and spends an FMA on a * q + b
// and one on the product with x: about 15 vector instructions per 32
// weights, more than one core issues while DRAM delivers a Q4_0 block's 18
// bytes. Here 32 weights become one zmm of bf16 values 128 + u (u the
// block's unsigned code, OR-ed into the bits of 128.0, exact for u < 128)
// and one vdpbf16ps multiplies them by 32 values of x: for Q4_0 a widening,
// a per-lane shift and one vpternlogd decode the 16 code bytes, and the
// block costs about 7 instructions. The offset 128 + off (w = a (u - off)
// + b) is not paid per chunk in scalar code (a serial scalar FMA per chunk
// is a chain of ~4 cycles per Q4_0 block): -(128 + off) sum x per chunk is
// precomputed once per call and, spread over the 16 lanes, is vdpbf16ps's
// accumulator input, so t = sum (u - off) x and a chunk costs one FMA by
// its scale. Q6_K (a scale per 16 weights) and Q4_K's biases b go in once
// per super-block instead: 16 a times 16 offset terms, 8 b times 8 sums.
// x must hold bf16 values (the caller passes them widened to float; the
// pairs then hold them exactly): the result differs from the float kernel
// only by the fp32 rounding of the larger partial sums.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/cast.h"
#include "backend/cpu/quant_blocks_cpu.h"
#include "backend/cpu/quant_blocks_params.h"
#include "backend/cpu/threading.h"
#include "backend/cpu/avx512_target.h"

#define KILN_QBF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace kiln::cpu {
namespace {

#define KILN_QINLINE inline __attribute__((always_inline))

constexpr uint16_t kMagic = 0x4300;  // bf16 128.0
constexpr int kTernAndOr = 0xEA;     // (a & b) | c

// u16 lanes (codes < 128) -> bf16 128 + u.
KILN_QBF16 KILN_QINLINE __m512i to_bf16(__m512i v, uint16_t mask) {
  return _mm512_ternarylogic_epi32(v, _mm512_set1_epi16(static_cast<short>(mask)),
                                   _mm512_set1_epi16(static_cast<short>(kMagic)), kTernAndOr);
}

// Each format: chunk c (32 weights) as bf16 128 + u, the offset off (w =
// a (u - off) + b), and its sub-blocks' (a, b) (quant_blocks_params.h):
// sub-block c of the chunk, or 2c and 2c + 1 where sub-blocks are halves.
template <BlockFormat F>
struct BfDec;

template <>
struct BfDec<BlockFormat::q4_0> {
  static constexpr int kBlock = 32, kBytes = 18, kChunks = 1, kOff = 8;
  static constexpr bool kHalves = false;  // one (a, b) per chunk
  static constexpr bool kBias = false;    // b = 0
  static KILN_QINLINE void params(const uint8_t* blk, qparams::Params& p) { qparams::one_scale(blk, p); }
  // Byte j: weight j in its low nibble, weight j + 16 in its high one.
  static KILN_QBF16 KILN_QINLINE __m512i chunk(const uint8_t* blk, int) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m512i v = _mm512_cvtepu8_epi16(_mm256_set_m128i(q, q));
    const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    return to_bf16(_mm512_srlv_epi16(v, shift), 0x0F);
  }
};

template <>
struct BfDec<BlockFormat::q4_k> {
  static constexpr int kBlock = 256, kBytes = 144, kChunks = 8, kOff = 0;
  static constexpr bool kHalves = false, kBias = true;
  static KILN_QINLINE void params(const uint8_t* blk, qparams::Params& p) { qparams::q4_k(blk, p); }
  // 32 bytes per two chunks: chunk 2g the low nibbles, 2g + 1 the high.
  static KILN_QBF16 KILN_QINLINE __m512i chunk(const uint8_t* blk, int c) {
    const __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + (c / 2) * 32)));
    return to_bf16(c % 2 ? _mm512_srli_epi16(v, 4) : v, 0x0F);
  }
};

template <>
struct BfDec<BlockFormat::q6_k> {
  static constexpr int kBlock = 256, kBytes = 210, kChunks = 8, kOff = 32;
  static constexpr bool kHalves = true, kBias = false;  // a scale per 16 weights
  static KILN_QINLINE void params(const uint8_t* blk, qparams::Params& p) { qparams::q6_k(blk, p); }
  // 4 low bits from ql, 2 high bits from qh (quant_blocks_qmv.cpp's layout).
  static KILN_QBF16 KILN_QINLINE __m512i chunk(const uint8_t* blk, int c) {
    const int h = c / 4, s = c % 4;
    const __m512i lo = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + h * 64 + (s & 1) * 32)));
    const __m512i hi = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + h * 32)));
    const __m512i l4 = _mm512_and_si512(_mm512_srli_epi16(lo, 4 * (s >> 1)), _mm512_set1_epi16(0x0F));
    const __m512i h2 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hi, 2 * s), _mm512_set1_epi16(0x03)), 4);
    return _mm512_ternarylogic_epi32(l4, h2, _mm512_set1_epi16(static_cast<short>(kMagic)), 0xFE);  // a | b | c
  }
};

// Rows n0..n1 of y[M, N]: xb [M, K] bf16 bits; xc the offset term
// -(128 + off) sum x (see block_qmv_bf16): one float per chunk, divided by
// 16 and broadcast as the seed of vdpbf16ps, or, where sub-blocks are
// halves (Q6_K), one per half, multiplied by the 16 scales of a super-block
// in one FMA. A chunk costs one dot product and one scale FMA and no scalar
// arithmetic; A accumulator sets hide the FMA latency (4 sets for one row
// of x, the rows themselves beyond).
template <BlockFormat F, int M>
KILN_QBF16 void qmv_bf16(const uint16_t* xb, const float* xc, const float* xs, int64_t K, const uint8_t* w, int64_t n0, int64_t n1,
                         float* y, int64_t N) {
  using D = BfDec<F>;
  constexpr int C = D::kChunks;
  constexpr int A = M == 1 ? 4 : M == 2 ? 2 : 1;
  constexpr int kXc = D::kHalves ? 2 : 1;  // floats of xc per chunk
  const int64_t nb = K / D::kBlock, row_bytes = nb * D::kBytes, xc_row = K / 32 * kXc;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    __m512 acc[A][M];
    __m256 bias[M];  // Q4_K: the b of 8 sub-blocks times their sums of x
    __m512 offs[M];  // Q6_K: the a of 16 halves times their offset terms
    for (int m = 0; m < M; ++m) {
      bias[m] = _mm256_setzero_ps();
      offs[m] = _mm512_setzero_ps();
      for (int u = 0; u < A; ++u) acc[u][m] = _mm512_setzero_ps();
    }
    for (int64_t bi = 0; bi < nb; ++bi) {
      const uint8_t* blk = row + bi * D::kBytes;
      _mm_prefetch(reinterpret_cast<const char*>(blk) + 1024, _MM_HINT_T0);
      qparams::Params p;
      D::params(blk, p);
      const int64_t k0 = bi * D::kBlock;
      if constexpr (D::kBias) {
        const __m256 bv = _mm256_loadu_ps(p.b);
        for (int m = 0; m < M; ++m) bias[m] = _mm256_fmadd_ps(bv, _mm256_loadu_ps(xs + m * (K / 32) + k0 / 32), bias[m]);
      }
      if constexpr (D::kHalves) {
        const __m512 av = _mm512_loadu_ps(p.a);
        for (int m = 0; m < M; ++m) offs[m] = _mm512_fmadd_ps(av, _mm512_loadu_ps(xc + m * xc_row + k0 / 16), offs[m]);
      }
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const int u = (C == 1 ? static_cast<int>(bi) : c) % A;
        const __m512i wv = D::chunk(blk, c);
        // One scale for the chunk, or one per 16-weight half (lanes 0-7 hold
        // weights 0-15, lanes 8-15 weights 16-31).
        const int j0 = D::kHalves ? 2 * c : c, j1 = D::kHalves ? 2 * c + 1 : c;
        const __m512 av = D::kHalves ? _mm512_insertf32x8(_mm512_set1_ps(p.a[j0]), _mm256_set1_ps(p.a[j1]), 1)
                                     : _mm512_set1_ps(p.a[j0]);
        const int64_t k = k0 + 32 * c;
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
          const __m512i xv = _mm512_loadu_si512(xb + m * K + k);
          const __m512 seed = D::kHalves ? _mm512_setzero_ps() : _mm512_set1_ps(xc[m * xc_row + k / 32]);
          const __m512 t = _mm512_dpbf16_ps(seed, (__m512bh)wv, (__m512bh)xv);
          acc[u][m] = _mm512_fmadd_ps(t, av, acc[u][m]);
        }
      }
    }
    for (int m = 0; m < M; ++m) {
      __m512 s = acc[0][m];
      for (int u = 1; u < A; ++u) s = _mm512_add_ps(s, acc[u][m]);
      if constexpr (D::kBias) s = _mm512_add_ps(s, _mm512_zextps256_ps512(bias[m]));
      if constexpr (D::kHalves) s = _mm512_add_ps(s, offs[m]);
      y[m * N + n] = _mm512_reduce_add_ps(s);
    }
  }
}

using Kernel = void (*)(const uint16_t*, const float*, const float*, int64_t, const uint8_t*, int64_t, int64_t, float*, int64_t);

template <BlockFormat F>
Kernel pick(int M) {
  switch (M) {
    case 1: return qmv_bf16<F, 1>;
    case 2: return qmv_bf16<F, 2>;
    case 3: return qmv_bf16<F, 3>;
    case 4: return qmv_bf16<F, 4>;
    case 5: return qmv_bf16<F, 5>;
    case 6: return qmv_bf16<F, 6>;
    case 7: return qmv_bf16<F, 7>;
    default: return qmv_bf16<F, 8>;
  }
}

// What block_qmv_bf16 precomputes for format F, as F's decoder defines it:
// one offset term per chunk or per half (Q6_K), and the shift 128 + off.
struct OffsetLayout {
  bool halves;
  float shift;
};
template <BlockFormat F>
constexpr OffsetLayout offset_layout() {
  return {BfDec<F>::kHalves, 128.0f + BfDec<F>::kOff};
}

}  // namespace

bool block_qmv_bf16_supported(BlockFormat f) {
  return f == BlockFormat::q4_0 || f == BlockFormat::q4_k || f == BlockFormat::q6_k;
}

void block_qmv_bf16(BlockFormat f, const float* x, int64_t M, const uint8_t* w, int64_t N, int64_t K, float* y) {
  // x as bf16 bits (exact: it holds bf16 values); xc: -(128 + off) sum x
  // per chunk, spread over 16 lanes (/ 16), or per half (Q6_K); xs: the
  // sums of x per 32 (Q4_K's biases).
  const auto [halves, shift] = f == BlockFormat::q4_0   ? offset_layout<BlockFormat::q4_0>()
                               : f == BlockFormat::q4_k ? offset_layout<BlockFormat::q4_k>()
                                                        : offset_layout<BlockFormat::q6_k>();
  const int kxc = halves ? 2 : 1;
  std::vector<uint16_t> xb(static_cast<size_t>(M * K));
  std::vector<float> xc(static_cast<size_t>(M * (K / 32) * kxc)), xs(static_cast<size_t>(M * (K / 32)));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t c = 0; c < K / 32; ++c) {
      const float* xk = x + m * K + c * 32;
      float s0 = 0.f, s1 = 0.f;
      for (int i = 0; i < 16; ++i) {
        xb[m * K + c * 32 + i] = bfloat16_t::from_float(xk[i]);
        xb[m * K + c * 32 + 16 + i] = bfloat16_t::from_float(xk[16 + i]);
        s0 += xk[i];
        s1 += xk[16 + i];
      }
      xs[m * (K / 32) + c] = s0 + s1;
      float* cm = xc.data() + (m * (K / 32) + c) * kxc;
      if (halves) {
        cm[0] = -shift * s0;
        cm[1] = -shift * s1;
      } else {
        cm[0] = -shift * (s0 + s1) / 16.f;
      }
    }
  }
  const int64_t row_bytes = K / block_layout(f).block * block_layout(f).bytes;
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(row_bytes, 1));
  for (int64_t m0 = 0; m0 < M; m0 += 8) {
    const int mr = static_cast<int>(std::min<int64_t>(8, M - m0));
    Kernel k = f == BlockFormat::q4_0   ? pick<BlockFormat::q4_0>(mr)
               : f == BlockFormat::q4_k ? pick<BlockFormat::q4_k>(mr)
                                        : pick<BlockFormat::q6_k>(mr);
    const uint16_t* xm = xb.data() + m0 * K;
    const float* cm = xc.data() + m0 * (K / 32) * kxc;
    const float* sm = xs.data() + m0 * (K / 32);
    float* ym = y + m0 * N;
    parallel_for(N, grain, [&](int64_t n0, int64_t n1) { k(xm, cm, sm, K, w, n0, n1, ym, N); });
  }
}

}  // namespace kiln::cpu
