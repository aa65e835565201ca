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
// - The codes stay unsigned (u = q_w + off, w = a (u - off) + b): the
//   offset's share, -off * (sum of x's 4 codes of a lane), is precomputed
//   per call and is vpdpbusd's accumulator input (Q4_0 off 8, Q6_K 32,
//   Q8_0 128 after an xor, Q4_K 0). Sub-block offsets b (Q4_K's mins)
//   multiply d * sum q per sub-block, also precomputed: one 8- or 16-wide
//   FMA per super-block.
// - Per-format decoders (V256 / V32) bring 64 weights to one zmm of u8
//   codes with two to six instructions; the formats without one (Q4_1,
//   Q5_0, Q5_1, Q2_K, Q3_K, Q5_K) take the scalar decoder of
//   quant_blocks_dec.h, correct and slower, with off 128.
// - AVX2 (no VNNI, or KILN_CPU_TARGET=avx2): 32 weights per step through
//   vpmaddubsw on |q_w| and x's codes with q_w's sign (exact: |products
//   pair| <= 2 * 128 * 127 < 2^15), then vpmaddwd: the same lanes of 4.
// The integer sums are exact; the float work is one rounding of a * d per
// lane and the float32 accumulation, so the result is x's 8-bit rounding
// times w, to float32 accuracy (tests/test_quant_blocks.cpp checks it
// against that product in float64).
// Threads split N (each streams its own rows of w); x's codes (K bytes,
// plus 8 bytes per 4 codes of seeds and scales) stay in L2.
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

// The rows of x as the kernels read them. kp is K rounded up to 64 (whole
// pairs of 32-blocks); the padding is zero codes with zero scales.
struct Q8Rows {
  int64_t kp = 0;
  std::vector<int8_t> q;      // [M][kp]
  std::vector<float> dl;      // [M][kp / 4]: d of the block of each 4 codes (a vpdpbusd lane)
  std::vector<int32_t> seed;  // [M][kp / 4]: -off * (sum of the 4 codes); AVX-512 only
  std::vector<float> s16;     // [M][kp / 16]: d * (sum of 16 codes), for sub-block offsets b
  std::vector<float> s32;     // [M][kp / 32]
};

void quantize_rows(const float* x, int64_t M, int64_t K, int off, Q8Rows& r) {
  const int64_t kp = (K + 63) / 64 * 64;
  r.kp = kp;
  r.q.assign(M * kp, 0);
  r.dl.assign(M * kp / 4, 0.f);
  r.seed.assign(off ? M * kp / 4 : 0, 0);
  r.s16.assign(M * kp / 16, 0.f);
  r.s32.assign(M * kp / 32, 0.f);
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < K / 32; ++b) {
      int8_t* q = r.q.data() + m * kp + 32 * b;
      const float d = round_block(x + m * K + 32 * b, q);
      // Sums of 4 codes (exact in int32): u8 ones times the s8 codes.
      const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
      const __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, qv), ones16);
      alignas(32) int32_t l[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(l), s4);
      const int64_t lane = m * kp / 4 + 8 * b;
      _mm256_storeu_ps(r.dl.data() + lane, _mm256_set1_ps(d));
      if (off) _mm256_storeu_si256(reinterpret_cast<__m256i*>(r.seed.data() + lane), _mm256_mullo_epi32(s4, _mm256_set1_epi32(-off)));
      const int h0 = l[0] + l[1] + l[2] + l[3], h1 = l[4] + l[5] + l[6] + l[7];
      r.s16[m * kp / 16 + 2 * b] = d * static_cast<float>(h0);
      r.s16[m * kp / 16 + 2 * b + 1] = d * static_cast<float>(h1);
      r.s32[m * kp / 32 + b] = d * static_cast<float>(h0 + h1);
    }
  }
}

// One kernel call's view: rows m0.. of x.
struct Q8View {
  const int8_t* q;
  const float* dl;
  const int32_t* seed;
  const float *s16, *s32;
  int64_t kp, K;
};

Q8View view(const Q8Rows& r, int64_t m0, int64_t K) {
  return {r.q.data() + m0 * r.kp,
          r.dl.data() + m0 * r.kp / 4,
          r.seed.empty() ? nullptr : r.seed.data() + m0 * r.kp / 4,
          r.s16.data() + m0 * r.kp / 16,
          r.s32.data() + m0 * r.kp / 32,
          r.kp,
          K};
}

template <BlockFormat F>
constexpr bool has_bias() {
  return F == BlockFormat::q4_1 || F == BlockFormat::q5_1 || F == BlockFormat::q2_k || F == BlockFormat::q4_k ||
         F == BlockFormat::q5_k;
}

// ---- AVX-512 VNNI decoders: 64 weights as one zmm of u8 codes ----

// Super-block formats: pair g (chunks 2g and 2g + 1) of a 256-weight block.
template <BlockFormat F>
struct V256 {  // through the scalar decoder: signed codes + 128
  static constexpr int kBytes = block_layout(F).bytes, kOff = 128;
  static constexpr bool kSub16 = Dec<F>::kHalves;
  static KILN_VNNI KILN_QINLINE __m512i pair(const uint8_t* blk, int g) {
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(Dec<F>::chunk(blk, 2 * g)), Dec<F>::chunk(blk, 2 * g + 1), 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
};

template <>
struct V256<BlockFormat::q4_k> {
  static constexpr int kBytes = 144, kOff = 0;
  static constexpr bool kSub16 = false;
  // 32 bytes per pair: chunk 2g the low nibbles, 2g + 1 the high ones.
  static KILN_VNNI KILN_QINLINE __m512i pair(const uint8_t* blk, int g) {
    const __m512i v = _mm512_broadcast_i64x4(qdec::load32(blk + 16 + 32 * g));
    return _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4)), _mm512_set1_epi8(0x0F));
  }
};

template <>
struct V256<BlockFormat::q6_k> {
  static constexpr int kBytes = 210, kOff = 32;
  static constexpr bool kSub16 = true;
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

// x's lane scales times the weights' scales, one FMA into acc.
KILN_VNNI KILN_QINLINE __m512 fma_lanes(__m512i t, __m512 sa, const float* dl, __m512 acc) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(sa, _mm512_loadu_ps(dl)), acc);
}

// Row m's 16 lane sums of u times x's codes from k on, plus the seeds.
template <int kOff>
KILN_VNNI KILN_QINLINE __m512i dot64(__m512i u, const Q8View& x, int m, int64_t k) {
  __m512i s = _mm512_setzero_si512();
  if constexpr (kOff != 0) s = _mm512_loadu_si512(x.seed + m * (x.kp / 4) + k / 4);
  return _mm512_dpbusd_epi32(s, u, _mm512_loadu_si512(x.q + m * x.kp + k));
}

template <BlockFormat F, int M>
KILN_VNNI void qmv_vnni_256(const Q8View& x, const uint8_t* w, int64_t n0, int64_t n1, float* y, int64_t N) {
  using D = V256<F>;
  constexpr bool kBias = has_bias<F>();
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
      for (int l = 0; l < D::kBytes; l += 64) _mm_prefetch(reinterpret_cast<const char*>(blk) + 1024 + l, _MM_HINT_T0);
      Params p;
      Dec<F>::params(blk, p);
      const __m512 av = _mm512_loadu_ps(p.a);
      if constexpr (kBias) {
        if constexpr (D::kSub16) {
          const __m512 bv = _mm512_loadu_ps(p.b);
          for (int m = 0; m < M; ++m) bias[m] = _mm512_fmadd_ps(bv, _mm512_loadu_ps(x.s16 + m * (x.kp / 16) + 16 * sb), bias[m]);
        } else {
          const __m512 bv = _mm512_zextps256_ps512(_mm256_loadu_ps(p.b));
          for (int m = 0; m < M; ++m)
            bias[m] = _mm512_fmadd_ps(bv, _mm512_zextps256_ps512(_mm256_loadu_ps(x.s32 + m * (x.kp / 32) + 8 * sb)), bias[m]);
        }
      }
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const __m512i u = D::pair(blk, g);
        const __m512 sa = _mm512_permutexvar_ps(_mm512_add_epi32(sub_of_lane, _mm512_set1_epi32(D::kSub16 ? 4 * g : 2 * g)), av);
        const int64_t k = 256 * sb + 64 * g;
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
          const __m512i t = dot64<D::kOff>(u, x, m, k);
          acc[g % A][m] = fma_lanes(t, sa, x.dl + m * (x.kp / 4) + k / 4, acc[g % A][m]);
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

// 32-weight block formats: a pair is two blocks.
template <BlockFormat F>
struct V32 {  // through the scalar decoder: signed codes + 128
  static constexpr int kBytes = block_layout(F).bytes, kOff = 128;
  static KILN_VNNI KILN_QINLINE __m512i pair(const uint8_t* a, const uint8_t* b) {
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(Dec<F>::chunk(a, 0)), Dec<F>::chunk(b, 0), 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
};

template <>
struct V32<BlockFormat::q8_0> {
  static constexpr int kBytes = 34, kOff = 128;
  static KILN_VNNI KILN_QINLINE __m512i pair(const uint8_t* a, const uint8_t* b) {
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(qdec::load32(a + 2)), qdec::load32(b + 2), 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
};

template <>
struct V32<BlockFormat::q4_0> {
  static constexpr int kBytes = 18, kOff = 8;
  // Byte j holds weight j (low nibble) and j + 16 (high): the 128-bit lanes
  // a, a, b, b, the odd ones shifted by 4.
  static KILN_VNNI KILN_QINLINE __m512i pair(const uint8_t* a, const uint8_t* b) {
    const __m512i ab = _mm512_castsi256_si512(_mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)),
                                                               _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 2))));
    const __m512i v = _mm512_shuffle_i64x2(ab, ab, _MM_SHUFFLE(1, 1, 0, 0));
    return _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0F));
  }
};

// Blocks b0 and b1 (b1 = b0 for the last block of an odd count: x's padding
// makes its half zero).
template <BlockFormat F, int M>
KILN_VNNI KILN_QINLINE void step_vnni_32(const uint8_t* row, const Q8View& x, int64_t b0, int64_t b1, __m512 (&acc)[M],
                                         float (&bias)[M]) {
  using D = V32<F>;
  const uint8_t *ba = row + b0 * D::kBytes, *bb = row + b1 * D::kBytes;
  _mm_prefetch(reinterpret_cast<const char*>(ba) + 1024, _MM_HINT_T0);
  Params pa, pb;
  Dec<F>::params(ba, pa);
  Dec<F>::params(bb, pb);
  const __m512 sa = _mm512_insertf32x8(_mm512_set1_ps(pa.a[0]), _mm256_set1_ps(pb.a[0]), 1);
  const __m512i u = D::pair(ba, bb);
  const int64_t k = 32 * b0;
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
    const __m512i t = dot64<D::kOff>(u, x, m, k);
    acc[m] = fma_lanes(t, sa, x.dl + m * (x.kp / 4) + k / 4, acc[m]);
    if constexpr (has_bias<F>()) {
      bias[m] += pa.b[0] * x.s32[m * (x.kp / 32) + b0];
      if (b1 != b0) bias[m] += pb.b[0] * x.s32[m * (x.kp / 32) + b1];
    }
  }
}

template <BlockFormat F, int M>
KILN_VNNI void qmv_vnni_32(const Q8View& x, const uint8_t* w, int64_t n0, int64_t n1, float* y, int64_t N) {
  constexpr int A = M == 1 ? 2 : 1;
  const int64_t nb = x.K / 32, row_bytes = nb * V32<F>::kBytes;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    __m512 acc[A][M];
    float bias[M];
    for (int m = 0; m < M; ++m) {
      bias[m] = 0.f;
      for (int u = 0; u < A; ++u) acc[u][m] = _mm512_setzero_ps();
    }
    int64_t b = 0;
    for (; b + 2 * A <= nb; b += 2 * A) {
#pragma GCC unroll 2
      for (int u = 0; u < A; ++u) step_vnni_32<F, M>(row, x, b + 2 * u, b + 2 * u + 1, acc[u], bias);
    }
    for (; b + 2 <= nb; b += 2) step_vnni_32<F, M>(row, x, b, b + 1, acc[0], bias);
    if (b < nb) step_vnni_32<F, M>(row, x, b, b, acc[0], bias);
    for (int m = 0; m < M; ++m) {
      __m512 s = acc[0][m];
      if (A == 2) s = _mm512_add_ps(s, acc[A - 1][m]);
      y[m * N + n] = _mm512_reduce_add_ps(s) + bias[m];
    }
  }
}

// ---- AVX2: 32 weights per step, vpmaddubsw + vpmaddwd ----

template <BlockFormat F, int M>
void qmv_avx2_i8(const Q8View& x, const uint8_t* w, int64_t n0, int64_t n1, float* y, int64_t N) {
  using D = Dec<F>;
  constexpr int C = D::kChunks;
  constexpr int kSubs = D::kHalves ? 2 * C : C;  // (a, b) pairs per block
  constexpr int A = M == 1 ? 2 : 1;
  const int64_t nb = x.K / D::kBlock, row_bytes = nb * D::kBytes;
  const float* sx = D::kHalves ? x.s16 : x.s32;
  const int64_t sx_row = D::kHalves ? x.kp / 16 : x.kp / 32;
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
      _mm_prefetch(reinterpret_cast<const char*>(blk) + 1024, _MM_HINT_T0);
      Params p;
      D::params(blk, p);
      if constexpr (has_bias<F>()) {
        for (int m = 0; m < M; ++m) {
          const float* s = sx + m * sx_row + b * kSubs;
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
          const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + m * x.kp + k));
          const __m256i t = _mm256_madd_epi16(_mm256_maddubs_epi16(as, _mm256_sign_epi8(qv, s)), ones16);
          const __m256 sd = _mm256_mul_ps(sa, _mm256_loadu_ps(x.dl + m * (x.kp / 4) + k / 4));
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
  if constexpr (block_layout(F).block == 256) {
    return qmv_vnni_256<F, M>;
  } else {
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
  switch (f) {
    case BlockFormat::q4_0: return pick<BlockFormat::q4_0>(M, vnni);
    case BlockFormat::q4_1: return pick<BlockFormat::q4_1>(M, vnni);
    case BlockFormat::q5_0: return pick<BlockFormat::q5_0>(M, vnni);
    case BlockFormat::q5_1: return pick<BlockFormat::q5_1>(M, vnni);
    case BlockFormat::q8_0: return pick<BlockFormat::q8_0>(M, vnni);
    case BlockFormat::q2_k: return pick<BlockFormat::q2_k>(M, vnni);
    case BlockFormat::q3_k: return pick<BlockFormat::q3_k>(M, vnni);
    case BlockFormat::q4_k: return pick<BlockFormat::q4_k>(M, vnni);
    case BlockFormat::q5_k: return pick<BlockFormat::q5_k>(M, vnni);
    case BlockFormat::q6_k: return pick<BlockFormat::q6_k>(M, vnni);
  }
  return nullptr;
}

// The AVX-512 decoders' code offset (the seeds' factor).
int vnni_offset(BlockFormat f) {
  switch (f) {
    case BlockFormat::q4_0: return V32<BlockFormat::q4_0>::kOff;
    case BlockFormat::q8_0: return V32<BlockFormat::q8_0>::kOff;
    case BlockFormat::q4_k: return V256<BlockFormat::q4_k>::kOff;
    case BlockFormat::q6_k: return V256<BlockFormat::q6_k>::kOff;
    default: return 128;
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

void block_qmv_int8(BlockFormat f, const float* x, int64_t M, const uint8_t* w, int64_t N, int64_t K, float* y) {
  const bool vnni = cpu_has_avx512_vnni();
  Q8Rows r;
  quantize_rows(x, M, K, vnni ? vnni_offset(f) : 0, r);
  const int64_t row_bytes = K / block_layout(f).block * block_layout(f).bytes;
  // ~64 KB of weights per task at the least.
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(row_bytes, 1));
  for (int64_t m0 = 0; m0 < M; m0 += 8) {
    const int mr = static_cast<int>(std::min<int64_t>(8, M - m0));
    const Kernel k = pick(f, mr, vnni);
    const Q8View v = view(r, m0, K);
    float* ym = y + m0 * N;
    parallel_for(N, grain, [&](int64_t n0, int64_t n1) { k(v, w, n0, n1, ym, N); });
  }
}

void block_round_x(const float* x, int64_t M, int64_t K, float* out) {
  alignas(32) int8_t q[32];
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < K / 32; ++b) {
      const float d = round_block(x + m * K + 32 * b, q);
      for (int i = 0; i < 32; ++i) out[m * K + 32 * b + i] = d * static_cast<float>(q[i]);
    }
  }
}

}  // namespace kiln::cpu
