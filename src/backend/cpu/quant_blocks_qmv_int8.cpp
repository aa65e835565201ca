// QMV on llama.cpp's block formats with x rounded to 8 bits (the default
// for float32 / float16 / bfloat16 x; quant_blocks_cpu.h): integer dot
// products of the weights' codes with x's codes. Measured by the
// `qmv_q4_0`, `qmv_q8_0`, `qmv_q4_k`, `qmv_q6_k` rows of `kiln bench`
// (drill D4) and by `kiln bench llm --device cpu`.
//
// Why. The product reads N * K * bytes_per_weight bytes of weights (x and y
// stay in L1/L2): the floor is DRAM bandwidth, ~1 ms for a 4096 x 14336
// Q4_K matrix on a 34 GB/s machine. The float kernels
// (quant_blocks_qmv.cpp, quant_blocks_qmv_bf16.cpp) spend 10-20 vector
// instructions per 32 weights widening codes to float32, which is more than
// two cores issue while DRAM delivers the bytes: they ran at 0.3-0.6 of the
// bandwidth. Here x is rounded once per call to blocks of 32 int8 codes q
// with a float scale d = max|x| / 127 (llama.cpp's Q8_0 of x, with a float
// d), and 64 weights of a row cost one vpdpbusd (u8 codes times x's s8
// codes, 16 int32 sums of 4 products) and three float operations per row
// of x: convert, multiply the per-lane weight scale a by x's d, FMA.
// - Unsigned codes stay unsigned (u = q_w + off, w = a (u - off) + b): the
//   offset's share, -off * (sum of x's codes under one weight scale), is
//   precomputed per call and enters as vpdpbusd's accumulator input (Q6_K
//   off 32). Signed codes (Q8_0, the scalar-decoded formats) go as |c|
//   against x's codes with c's sign. Sub-block offsets b multiply d * sum q
//   per sub-block, also precomputed: one 8- or 16-wide FMA per super-block.
// - Per-format decoders (V256 / V32) bring 64 weights to one zmm of u8
//   codes; Q8_0 and Q6_K have their own, the formats without one (Q4_1,
//   Q5_0, Q5_1, Q2_K, Q3_K, Q5_K) take the scalar decoder of
//   quant_blocks_dec.h, correct and slower.
// - Q4_0 and Q4_K, the 4-bit formats models ship in, go the other way
//   round: x is laid out where the weights' nibbles sit and the weights are
//   only masked and shifted (quant_blocks_qmv_lanes.cpp; AVX-512 only).
// - AVX2 (no VNNI, or KILN_CPU_TARGET=avx2): 32 weights per step through
//   vpmaddubsw on |q_w| and x's codes with q_w's sign (exact: |products
//   pair| <= 2 * 128 * 127 < 2^15), then vpmaddwd: the same lanes of 4.
// The integer sums are exact; the float work is one rounding of a * d per
// lane and the float32 accumulation, so the result is x's 8-bit rounding
// times w, to float32 accuracy (tests/test_quant_blocks.cpp checks it
// against that product in float64).
// Threads split N in pieces taken from a shared counter (parallel_for_balanced:
// each piece a run of rows, sequential streams the hardware prefetcher
// follows; a software prefetch 1-4 KB ahead measured no better and costs
// issue slots); x's codes (K bytes per row, plus ~K / 4
// of per-16 and per-32 scales and sums) stay in L1/L2, and what the kernels
// read of x per weight is kept small (Q8Rows).
// Measured on a 2-core Zen 5 (docs/performance.md, session 17): one core
// runs 30-35 G weights/s of every format from L3 (Q6_K 27 GB/s, Q8_0 32),
// the float kernels 8-22 GB/s; two cores stream Q6_K and Q8_0 at DRAM
// bandwidth.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/quant_blocks_cpu.h"
#include "backend/cpu/quant_blocks_dec.h"
#include "backend/cpu/quant_blocks_int8.h"
#include "backend/cpu/threading.h"
#include "backend/cpu/avx512_target.h"

#define KILN_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

namespace kiln::cpu {
namespace {

using qdec::Dec;
using qparams::Params;

// ---- x as 8-bit blocks ----

// Rounds 32 floats to q = round_half_even(x * (127 / amax)) and returns
// d = amax / 127 (both in float32: tests/test_quant_blocks.cpp repeats
// them). A block with a NaN or an infinity returns NaN (its row's outputs
// become NaN); one whose 127 / amax overflows (amax 0 or below ~4e-37)
// rounds to zero.
KILN_QINLINE float round_block(const float* x, int8_t* q) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), inf = _mm256_set1_ps(INFINITY);
  __m256 v[4], mx = _mm256_setzero_ps(), finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    const __m256 a = _mm256_and_ps(v[i], absmask);
    mx = _mm256_max_ps(mx, a);
    finite = _mm256_and_ps(finite, _mm256_cmp_ps(a, inf, _CMP_LT_OQ));  // false for NaN and inf
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float amax = _mm_cvtss_f32(m4);
  const float s = 127.f / amax;
  if (_mm256_movemask_ps(finite) != 0xFF || !(s <= FLT_MAX)) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_setzero_si256());
    return _mm256_movemask_ps(finite) != 0xFF ? NAN : 0.f;
  }
  const __m256 vs = _mm256_set1_ps(s);
  __m256i i[4];
  for (int k = 0; k < 4; ++k) i[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], vs));  // MXCSR: nearest even
  // packs interleave 128-bit lanes: 4-byte groups come out 0 2 4 6 1 3 5 7.
  const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  return amax / 127.f;
}

// ---- AVX-512 VNNI decoders: 64 weights as one zmm of u8 codes ----

// Super-block formats: pair g (chunks 2g and 2g + 1) of a 256-weight block.
// scales() gives the sub-blocks' a (and b) in registers (a round trip
// through Params' arrays costs a failed store-to-load forward per block).
template <BlockFormat F>
struct V256 {  // through the scalar decoder: signed codes + 128
  static constexpr int kBytes = block_layout(F).bytes, kOff = 0;
  static constexpr bool kSigned = true;
  static constexpr bool kSub16 = Dec<F>::kHalves;
  static KILN_VNNI KILN_QINLINE void scales(const uint8_t* blk, __m512& a, __m512& b) {
    Params p;
    Dec<F>::params(blk, p);
    a = kSub16 ? _mm512_loadu_ps(p.a) : _mm512_zextps256_ps512(_mm256_loadu_ps(p.a));
    b = kSub16 ? _mm512_loadu_ps(p.b) : _mm512_zextps256_ps512(_mm256_loadu_ps(p.b));
  }
  static KILN_VNNI KILN_QINLINE __m512i pair(const uint8_t* blk, int g) {
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(Dec<F>::chunk(blk, 2 * g)), Dec<F>::chunk(blk, 2 * g + 1), 1);
    return v;
  }
};

template <>
struct V256<BlockFormat::q6_k> {
  static constexpr int kBytes = 210, kOff = 32;
  static constexpr bool kSigned = false;
  static constexpr bool kSub16 = true;
  static KILN_VNNI KILN_QINLINE void scales(const uint8_t* blk, __m512& a, __m512&) {
    const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)));
    a = _mm512_mul_ps(_mm512_set1_ps(qparams::half_at(blk + 208)), _mm512_cvtepi32_ps(sc));
  }
  // Low 4 bits: 64 bytes at 64 h, shifted by 4 (g % 2); high 2 bits: 32
  // bytes at 128 + 32 h, shifted by 4 (g % 2) for chunk 2g and 2 more for
  // 2g + 1 (the layout of Dec<q6_k>::chunk).
  static KILN_VNNI KILN_QINLINE __m512i pair(const uint8_t* blk, int g) {
    const int h = g / 2, sh = 4 * (g % 2);
    const __m512i lo = _mm512_loadu_si512(blk + 64 * h);
    const __m512i hi = _mm512_broadcast_i64x4(qdec::load32(blk + 128 + 32 * h));
    const __m512i l4 = _mm512_and_si512(_mm512_srli_epi16(lo, sh), _mm512_set1_epi8(0x0F));
    const __m512i h2 = _mm512_and_si512(_mm512_srlv_epi64(hi, _mm512_setr_epi64(sh, sh, sh, sh, sh + 2, sh + 2, sh + 2, sh + 2)),
                                        _mm512_set1_epi8(0x03));
    return _mm512_or_si512(l4, _mm512_slli_epi16(h2, 4));
  }
};

// Row m's 16 lane sums of the weights' codes u times x's codes from k on.
// Unsigned codes (w = a (u - off) + b; Q6_K's off 32) start from the
// offset's share, -off * sum q, in the first lane of each group of four
// lanes that share a 16-weight scale (a 16-byte load and a masked permute:
// per-lane seeds cost a 64-byte load, and x's bytes per weight add to the
// weights' own). The offset stays small next to the lanes' own sums (32
// against codes up to 63), so float32's cancellation in the lane sum costs
// nothing measurable. Signed codes (Q8_0, and the scalar-decoded formats)
// go as |c| times x's codes negated where c < 0 (vpdpbusd is u8 x s8), with
// no offset. (Q4_0 and Q4_K have their own kernels:
// quant_blocks_qmv_lanes.cpp.)
template <int kOff, bool kSub16>
KILN_VNNI KILN_QINLINE __m512i offset_seeds(const Q8View& x, int m, int64_t k) {
  if constexpr (kOff == 0) {
    return _mm512_setzero_si512();
  } else {
    static_assert(kSub16, "offsets come with 16-weight sub-blocks (Q6_K)");
    const __m128i o = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.o16(m, k)));
    return _mm512_maskz_permutexvar_epi32(0x1111, _mm512_setr_epi32(0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0),
                                          _mm512_castsi128_si512(o));
  }
}

template <int kOff, bool kSub16, bool kSigned>
KILN_VNNI KILN_QINLINE __m512i dot64(__m512i u, const Q8View& x, int m, int64_t k) {
  const __m512i qx = _mm512_loadu_si512(x.q(m, k));
  if constexpr (kSigned) {
    const __mmask64 neg = _mm512_movepi8_mask(u);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(u), _mm512_mask_sub_epi8(qx, neg, _mm512_setzero_si512(), qx));
  }
  return _mm512_dpbusd_epi32(offset_seeds<kOff, kSub16>(x, m, k), u, qx);
}

// Two floats as lanes 0-7 and 8-15.
KILN_VNNI KILN_QINLINE __m512 two_halves(const float* p) {
  const __m128 v = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(p)));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), _mm512_castps128_ps512(v));
}

template <BlockFormat F, int M>
KILN_VNNI void qmv_vnni_256(const Q8View& x, const uint8_t* w, int64_t n0, int64_t n1, float* y, int64_t N) {
  using D = V256<F>;
  constexpr bool kBias = qb::has_offset(F);
  constexpr int A = M == 1 ? 2 : 1;
  const int64_t nb = x.K / 256, row_bytes = nb * D::kBytes;
  // Lane i of pair g takes sub-block 2g + i / 8 (32-weight subs) or 4g + i / 4.
  const __m512i sub_of_lane = D::kSub16 ? _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)
                                        : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    __m512 acc[A][M], bias[M];
    for (int m = 0; m < M; ++m) {
      bias[m] = _mm512_setzero_ps();
      for (int u = 0; u < A; ++u) acc[u][m] = _mm512_setzero_ps();
    }
    for (int64_t sb = 0; sb < nb; ++sb) {
      const uint8_t* blk = row + sb * D::kBytes;
      __m512 av, bv, ad[M];
      D::scales(blk, av, bv);
      // The sub-blocks' a times x's d of the same weights, once per block.
      for (int m = 0; m < M; ++m) {
        ad[m] = _mm512_mul_ps(av, D::kSub16 ? _mm512_loadu_ps(x.d16(m, 256 * sb))
                                            : _mm512_castps256_ps512(_mm256_loadu_ps(x.d32(m, 256 * sb))));
      }
      if constexpr (kBias) {
        if constexpr (D::kSub16) {
          for (int m = 0; m < M; ++m) bias[m] = _mm512_fmadd_ps(bv, _mm512_loadu_ps(x.s16(m, 256 * sb)), bias[m]);
        } else {
          for (int m = 0; m < M; ++m)
            bias[m] = _mm512_fmadd_ps(bv, _mm512_zextps256_ps512(_mm256_loadu_ps(x.s32(m, 256 * sb))), bias[m]);
        }
      }
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const __m512i u = D::pair(blk, g);
        const __m512i lanes = _mm512_add_epi32(sub_of_lane, _mm512_set1_epi32(D::kSub16 ? 4 * g : 2 * g));
        const int64_t k = 256 * sb + 64 * g;
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
          const __m512i t = dot64<D::kOff, D::kSub16, D::kSigned>(u, x, m, k);
          acc[g % A][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_permutexvar_ps(lanes, ad[m]), acc[g % A][m]);
        }
      }
    }
    for (int m = 0; m < M; ++m) {
      __m512 s = _mm512_add_ps(acc[0][m], bias[m]);
      if (A == 2) s = _mm512_add_ps(s, acc[A - 1][m]);
      y[m * N + n] = _mm512_reduce_add_ps(s);
    }
  }
}

// Q4_0 and Q8_0: one fp16 scale at the start of the block, no b.
KILN_VNNI KILN_QINLINE __m512 scales_d16(const uint8_t* a, const uint8_t* b, float& ba, float& bb) {
  ba = bb = 0.f;
  const __m256i h = _mm256_setr_m128i(_mm_set1_epi16(static_cast<short>(qb::load_u16(a))),
                                      _mm_set1_epi16(static_cast<short>(qb::load_u16(b))));
  return _mm512_cvtph_ps(h);
}

// 32-weight block formats: a pair is two blocks.
template <BlockFormat F>
struct V32 {  // through the scalar decoder: signed codes + 128
  static constexpr int kBytes = block_layout(F).bytes, kOff = 0;
  static constexpr bool kSigned = true;
  // The two blocks' a in lanes 0-7 and 8-15, and their b.
  static KILN_VNNI KILN_QINLINE __m512 scales(const uint8_t* a, const uint8_t* b, float& ba, float& bb) {
    Params pa, pb;
    Dec<F>::params(a, pa);
    Dec<F>::params(b, pb);
    ba = pa.b[0];
    bb = pb.b[0];
    return _mm512_insertf32x8(_mm512_set1_ps(pa.a[0]), _mm256_set1_ps(pb.a[0]), 1);
  }
  static KILN_VNNI KILN_QINLINE __m512i pair(const uint8_t* a, const uint8_t* b) {
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(Dec<F>::chunk(a, 0)), Dec<F>::chunk(b, 0), 1);
    return v;
  }
};

template <>
struct V32<BlockFormat::q8_0> {
  static constexpr int kBytes = 34, kOff = 0;
  static constexpr bool kSigned = true;
  static KILN_VNNI KILN_QINLINE __m512 scales(const uint8_t* a, const uint8_t* b, float& ba, float& bb) {
    return scales_d16(a, b, ba, bb);
  }
  static KILN_VNNI KILN_QINLINE __m512i pair(const uint8_t* a, const uint8_t* b) {
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(qdec::load32(a + 2)), qdec::load32(b + 2), 1);
    return v;
  }
};

// Blocks b0 and b1 (b1 = b0 for the last block of an odd count: x's padding
// makes its half zero).
template <BlockFormat F, int M>
KILN_VNNI KILN_QINLINE void step_vnni_32(const uint8_t* row, const Q8View& x, int64_t b0, int64_t b1,
                                         __m512 (&acc)[M], float (&bias)[M]) {
  using D = V32<F>;
  const uint8_t *ba = row + b0 * D::kBytes, *bb = row + b1 * D::kBytes;
  float bias_a = 0.f, bias_b = 0.f;
  __m512 sa;
  __m512i u;
  sa = D::scales(ba, bb, bias_a, bias_b);
  u = D::pair(ba, bb);
  const int64_t k = 32 * b0;
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
    const __m512i t = dot64<D::kOff, false, D::kSigned>(u, x, m, k);
    acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(sa, two_halves(x.d32(m, k))), acc[m]);
    if constexpr (qb::has_offset(F)) {
      bias[m] += bias_a * *x.s32(m, 32 * b0);
      if (b1 != b0) bias[m] += bias_b * *x.s32(m, 32 * b1);
    }
  }
}

// M = 1 takes R = 4 rows of w per pass, a quarter of the range apart (as
// quant_blocks_qmv_lanes.cpp does): one core keeps more misses in flight
// over more streams. Q8_0 4096 x 14336 with bf16 x, alternating in one
// process on the Zen 4/5 VM (session 25): 1.81-1.94 -> 1.70-1.82 ms. (The
// same for the 256-weight formats moved Q6_K within the runs' spread.)
template <BlockFormat F, int M, int R = 1>
KILN_VNNI void qmv_vnni_32(const Q8View& x, const uint8_t* w, int64_t n0, int64_t n1, float* y, int64_t N) {
  constexpr int A = M == 1 && R == 1 ? 2 : 1;
  const int64_t nb = x.K / 32, row_bytes = nb * V32<F>::kBytes;
  const int64_t h = (n1 - n0) / R;
  for (int64_t n = n0; n < n0 + h; ++n) {
    const uint8_t* row[R];
    __m512 acc[R][A][M];
    float bias[R][M];
#pragma GCC unroll 4
    for (int j = 0; j < R; ++j) {
      row[j] = w + (n + j * h) * row_bytes;
      for (int m = 0; m < M; ++m) {
        bias[j][m] = 0.f;
        for (int u = 0; u < A; ++u) acc[j][u][m] = _mm512_setzero_ps();
      }
    }
    int64_t b = 0;
    for (; b + 2 * A <= nb; b += 2 * A) {
#pragma GCC unroll 4
      for (int j = 0; j < R; ++j) {
#pragma GCC unroll 2
        for (int u = 0; u < A; ++u) step_vnni_32<F, M>(row[j], x, b + 2 * u, b + 2 * u + 1, acc[j][u], bias[j]);
      }
    }
#pragma GCC unroll 4
    for (int j = 0; j < R; ++j) {
      int64_t c = b;
      for (; c + 2 <= nb; c += 2) step_vnni_32<F, M>(row[j], x, c, c + 1, acc[j][0], bias[j]);
      if (c < nb) step_vnni_32<F, M>(row[j], x, c, c, acc[j][0], bias[j]);
      for (int m = 0; m < M; ++m) {
        __m512 s = acc[j][0][m];
        if (A == 2) s = _mm512_add_ps(s, acc[j][A - 1][m]);
        y[m * N + n + j * h] = _mm512_reduce_add_ps(s) + bias[j][m];
      }
    }
  }
  if (n0 + R * h < n1) qmv_vnni_32<F, M, 1>(x, w, n0 + R * h, n1, y, N);
}

// ---- AVX2: 32 weights per step, vpmaddubsw + vpmaddwd ----

template <BlockFormat F, int M>
void qmv_avx2_i8(const Q8View& x, const uint8_t* w, int64_t n0, int64_t n1, float* y, int64_t N) {
  using D = Dec<F>;
  constexpr int C = D::kChunks;
  constexpr int kSubs = D::kHalves ? 2 * C : C;  // (a, b) pairs per block
  constexpr int A = M == 1 ? 2 : 1;
  const int64_t nb = x.K / D::kBlock, row_bytes = nb * D::kBytes;
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    __m256 acc[A][M], bias[M];
    for (int m = 0; m < M; ++m) {
      bias[m] = _mm256_setzero_ps();
      for (int u = 0; u < A; ++u) acc[u][m] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * D::kBytes;
      Params p;
      D::params(blk, p);
      if constexpr (qb::has_offset(F)) {
        for (int m = 0; m < M; ++m) {
          const float* s = D::kHalves ? x.s16(m, b * D::kBlock) : x.s32(m, b * D::kBlock);
          if constexpr (kSubs >= 8) {
            for (int j = 0; j < kSubs; j += 8) bias[m] = _mm256_fmadd_ps(_mm256_loadu_ps(p.b + j), _mm256_loadu_ps(s + j), bias[m]);
          } else {
            bias[m] = _mm256_fmadd_ps(_mm256_setr_ps(p.b[0], 0, 0, 0, 0, 0, 0, 0), _mm256_set1_ps(s[0]), bias[m]);
          }
        }
      }
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const int u = (C == 1 ? static_cast<int>(b) : c) % A;
        const __m256i s = D::chunk(blk, c), as = _mm256_abs_epi8(s);
        // Lanes 0-3 hold weights 0-15, lanes 4-7 weights 16-31.
        const __m256 sa = D::kHalves ? _mm256_setr_m128(_mm_set1_ps(p.a[2 * c]), _mm_set1_ps(p.a[2 * c + 1]))
                                     : _mm256_set1_ps(p.a[c]);
        const int64_t k = b * D::kBlock + 32 * c;
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
          const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q(m, k)));
          const __m256i t = _mm256_madd_epi16(_mm256_maddubs_epi16(as, _mm256_sign_epi8(qv, s)), ones16);
          const __m256 sd = _mm256_mul_ps(sa, _mm256_set1_ps(*x.d32(m, k)));
          acc[u][m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), sd, acc[u][m]);
        }
      }
    }
    for (int m = 0; m < M; ++m) {
      __m256 s = _mm256_add_ps(acc[0][m], bias[m]);
      if (A == 2) s = _mm256_add_ps(s, acc[A - 1][m]);
      __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
      h = _mm_add_ps(h, _mm_movehl_ps(h, h));
      h = _mm_add_ss(h, _mm_movehdup_ps(h));
      y[m * N + n] = _mm_cvtss_f32(h);
    }
  }
}

// ---- dispatch ----

using Kernel = void (*)(const Q8View&, const uint8_t*, int64_t, int64_t, float*, int64_t);

template <BlockFormat F, int M>
Kernel kernel(bool vnni) {
  if (!vnni) return qmv_avx2_i8<F, M>;
  if constexpr (F == BlockFormat::q4_0 || F == BlockFormat::q4_k) {
    return nullptr;  // quant_blocks_qmv_lanes.cpp (lanes_format)
  } else if constexpr (block_layout(F).block == 256) {
    return qmv_vnni_256<F, M>;
  } else {
    if constexpr (M == 1) return qmv_vnni_32<F, 1, 4>;
    return qmv_vnni_32<F, M>;
  }
}

template <BlockFormat F>
Kernel pick(int M, bool vnni) {
  switch (M) {
    case 1: return kernel<F, 1>(vnni);
    case 2: return kernel<F, 2>(vnni);
    case 3: return kernel<F, 3>(vnni);
    case 4: return kernel<F, 4>(vnni);
    case 5: return kernel<F, 5>(vnni);
    case 6: return kernel<F, 6>(vnni);
    case 7: return kernel<F, 7>(vnni);
    default: return kernel<F, 8>(vnni);
  }
}

Kernel pick(BlockFormat f, int M, bool vnni) {
  return dispatch_format(f, [&](auto fc) { return pick<decltype(fc)::value>(M, vnni); });
}

// The AVX-512 decoders' code offset (the seeds' factor).
int vnni_offset(BlockFormat f) {
  switch (f) {
    case BlockFormat::q8_0: return V32<BlockFormat::q8_0>::kOff;
    case BlockFormat::q6_k: return V256<BlockFormat::q6_k>::kOff;
    default: return 0;
  }
}

}  // namespace

namespace {
std::atomic<int> g_int8_override{-1};
}  // namespace

bool block_x_int8() {
  const int o = g_int8_override.load(std::memory_order_relaxed);
  if (o >= 0) return o != 0;
  static const bool from_env = [] {
    const char* e = std::getenv("KILN_BLOCK_X");
    return e == nullptr || std::strcmp(e, "float") != 0;
  }();
  return from_env;
}

void set_block_x_int8_override(int on) { g_int8_override.store(on < 0 ? -1 : on != 0, std::memory_order_relaxed); }

// From 9 rows of x on, the packed GEMM (quant_blocks_qmm_int8.cpp): at 8
// rows the two run level (pp8 80 / 81 t/s on the 1B Q4_K file), at 9 the
// QMV's second pass costs it (73 / 91), at 16 and more the GEMM leads.
constexpr int64_t kQmmMinRows = 9;

void block_qmv_int8(BlockFormat f, const float* x, int64_t M, const uint8_t* w, int64_t N, int64_t K, float* y) {
  const bool vnni = cpu_has_avx512_vnni();
  Q8Rows r;
  if (vnni && M >= kQmmMinRows) {  // prefill: the packed GEMM
    quantize_rows(x, M, K, 128, r);
    block_qmm_int8(f, r, M, w, N, K, y);
    return;
  }
  quantize_rows(x, M, K, vnni ? vnni_offset(f) : 0, r);
  const int64_t row_bytes = K / block_layout(f).block * block_layout(f).bytes;
  // ~64 KB of weights per task at the least.
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(row_bytes, 1));
  const bool lanes = vnni && lanes_format(f);  // Q4_0, Q4_K: x laid out where the nibbles sit
  XLanes L;
  if (lanes) lay_lanes(f, r, M, K, L);
  for (int64_t m0 = 0; m0 < M; m0 += 8) {
    const int mr = static_cast<int>(std::min<int64_t>(8, M - m0));
    float* ym = y + m0 * N;
    if (lanes) {
      parallel_for_balanced(N, grain, [&](int64_t n0, int64_t n1) { qmv_lanes(f, L, r, m0, mr, w, N, K, ym, n0, n1); });
      continue;
    }
    const Kernel k = pick(f, mr, vnni);
    const Q8View v = view(r, m0, K);
    parallel_for_balanced(N, grain, [&](int64_t n0, int64_t n1) { k(v, w, n0, n1, ym, N); });
  }
}

void quantize_rows(const float* x, int64_t M, int64_t K, int off, Q8Rows& r) {
  const int64_t kp = (K + 63) / 64 * 64;
  r.rs = kp + 64;
  r.ss = kp / 16 + 16;
  r.buf.assign(M * r.rs + 64, 0);
  r.q = r.buf.data() + (64 - reinterpret_cast<uintptr_t>(r.buf.data()) % 64) % 64;
  for (auto* v : {&r.s16, &r.s32, &r.d16, &r.d32}) v->assign(M * r.ss, 0.f);
  for (auto* v : {&r.o16, &r.o32}) v->assign(M * r.ss, 0);
  parallel_for(M, std::max<int64_t>(1, 16384 / std::max<int64_t>(K, 1)), [&](int64_t m0, int64_t m1) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int64_t m = m0; m < m1; ++m) {
      for (int64_t b = 0; b < K / 32; ++b) {
        int8_t* q = r.q + m * r.rs + 32 * b;
        const float d = round_block(x + m * K + 32 * b, q);
        // Sums of 4 codes (exact in int32): u8 ones times the s8 codes.
        const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
        const __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, qv), ones16);
        alignas(32) int32_t l[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(l), s4);
        const int h0 = l[0] + l[1] + l[2] + l[3], h1 = l[4] + l[5] + l[6] + l[7];
        const int64_t i16 = m * r.ss + 2 * b, i32 = m * r.ss + b;
        r.s16[i16] = d * static_cast<float>(h0);
        r.s16[i16 + 1] = d * static_cast<float>(h1);
        r.s32[i32] = d * static_cast<float>(h0 + h1);
        r.d16[i16] = r.d16[i16 + 1] = r.d32[i32] = d;
        r.o16[i16] = -off * h0;
        r.o16[i16 + 1] = -off * h1;
        r.o32[i32] = -off * (h0 + h1);
      }
    }
  });
}

}  // namespace kiln::cpu
