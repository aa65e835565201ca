// QMV on Q4_0 and Q4_K with x's codes laid out where the weights' nibbles
// sit (AVX-512 VNNI; M = 1 to 8 rows of x rounded to 8 bits by
// quant_blocks_qmv_int8.cpp's quantize_rows). Measured by the `qmv_q4_0`
// and `qmv_q4_k` rows of `kiln bench` (drill D4) and by `kiln bench llm
// --device cpu` on Q4_0 / Q4_K files.
//
// Why. At two cores a 4-bit QMV is bound by instructions, not by DRAM: the
// kernels of quant_blocks_qmv_int8.cpp bring the weights into zmms of 64
// codes in weight order (permutes, shifts, masks) and spent ~12 vector
// instructions per 64 Q4_0 weights, ~0.8 of the read bandwidth (session 23,
// docs/performance.md). Here the weights stay in their memory order and x
// moves instead, once per call: a 64-byte load of weights is split into its
// low nibbles (a mask) and its high nibbles (one GF2P8AFFINEQB where the
// CPU has GFNI, else a shift and a mask), and each meets a 64-byte row of
// x's codes holding, at every byte, the code of the x that byte's nibble
// multiplies (zero where the byte is not a code). Two vpdpbusd then give 16
// lane sums, each lane inside one scale's weights.
// - Q4_0 (18-byte blocks: an fp16 d, then byte i holds weight i low and
//   i + 16 high, as u - 8): one load covers three blocks (54 bytes, 96
//   weights); lanes 0-4 belong to the first block (bytes 0-19; 18-19 are
//   the second block's d, against zeros), 5-8 to the second (20-35), 9-13
//   to the third (36-55). The d come from the same load: one word permute
//   picks each lane's fp16 d, one conversion, one multiply by x's d of the
//   lane's block. The offset 8 enters as vpdpbusd's accumulator: per lane
//   -8 times the sum of x's codes it meets, precomputed (int16). ~11
//   instructions per 96 weights. x costs 176 bytes per group (codes 128,
//   seeds 32, the three d 16) against 54 of weights: 26 KB at K = 14336,
//   in L1/L2 while the weights stream. The last group of a row loads only
//   its blocks (a masked load): K / 32 need not be a multiple of 3, and the
//   matrix's last row ends there.
// - Q4_K (144-byte super-blocks of 256: d, dmin, 12 bytes of 6-bit scales
//   and mins, 128 bytes of codes, 32 bytes per 64 weights: byte j holds
//   weight j low and j + 32 high): one load covers 128 weights, its low
//   nibbles two sub-blocks and its high nibbles two more, so each
//   vpdpbusd's lanes 0-7 and 8-15 take one sub-block scale each (a
//   permute of the super-block's eight d * sc * d_x). x's layout is its
//   codes reordered, no larger.
// - Several rows of w per pass at M = 1, a quarter (Q4_0) or half (Q4_K)
//   of the thread's range apart: long sequential streams sharing x's
//   loads. A core keeps more misses in flight over more streams (a plain
//   read on the Zen 4 VM: one core 21 GB/s over one stream, 31 over four);
//   four rows took Q4_0 4096 x 14336 from 0.77-0.85 to 0.65-0.74 ms and
//   the 1B model's 8192 x 2048 from 34 to 40 GB/s. Q4_K (whose
//   super-block state is larger) gains 2-4% with four rows up to K = 4096
//   and loses at 8192 (43 -> 37 GB/s), where it keeps two.
// - The kernels' non-GFNI instantiations carry the gfni target too (one
//   attribute for both); they use no GFNI intrinsic, and the compiler emits
//   none for the intrinsics they use.
// The integer sums are exact and the float work is the same as the other
// kernels' (one rounding of d_w * d_x per lane, float32 accumulation), so
// all agree with x's 8-bit rounding times w to float32 accuracy
// (tests/test_quant_blocks_int8.cpp, both high-nibble paths).
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "backend/cpu/avx512_target.h"
#include "backend/cpu/quant_blocks_cpu.h"
#include "backend/cpu/quant_blocks_int8.h"
#include "backend/cpu/threading.h"

#define KILN_Q4L __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#define KILN_Q4L_GFNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,gfni")))

namespace kiln::cpu {
namespace {

constexpr int kGroupW = 54;      // bytes of w per group (three blocks)
constexpr int kGroupX = 192;     // bytes of x's layout per group (176 used; 64-byte aligned)
constexpr int kSeeds = 128, kD = 160;

// Byte p (0..63) of a group load: which block (0-2) and which code (0-15)
// it carries, or -1 for a scale byte or past the third block.
constexpr int block_of_byte(int p) { return p < 54 && p % 18 >= 2 ? p / 18 : -1; }
constexpr int code_of_byte(int p) { return p % 18 - 2; }

// Q4_0: group g of a row of x's codes (blocks 3g .. 3g + 2; codes past K are
// zero). Block j's code c sits at byte 18 j + 2 + c of the weights' load,
// an even byte: pairs of codes move as words (vpermt2w, AVX512-BW).
KILN_Q4L void lay_q4_0_group(const int8_t* q, const float* d, int64_t K, int64_t g, uint8_t* o) {
  struct Idx {
    uint16_t lo[32], hi[32];
    uint32_t mask;
  };
  static constexpr Idx kIdx = [] {
    Idx t{};
    for (int w = 0; w < 32; ++w) {
      const int j = block_of_byte(2 * w);
      if (j < 0) continue;
      t.lo[w] = static_cast<uint16_t>(16 * j + code_of_byte(2 * w) / 2);
      t.hi[w] = static_cast<uint16_t>(16 * j + 8 + code_of_byte(2 * w) / 2);
      t.mask |= 1u << w;
    }
    return t;
  }();
  const int64_t valid = std::min<int64_t>(96, K - 96 * g);  // bytes of codes in the group
  const __m512i a = _mm512_maskz_loadu_epi8(~__mmask64{0} >> (64 - std::min<int64_t>(valid, 64)), q + 96 * g);
  const __m512i b = valid > 64 ? _mm512_maskz_loadu_epi8(~__mmask64{0} >> (128 - valid), q + 96 * g + 64)
                               : _mm512_setzero_si512();
  const __m512i lo = _mm512_maskz_permutex2var_epi16(kIdx.mask, a, _mm512_loadu_si512(kIdx.lo), b);
  const __m512i hi = _mm512_maskz_permutex2var_epi16(kIdx.mask, a, _mm512_loadu_si512(kIdx.hi), b);
  // Seeds: -8 times each lane's sum of codes (|8 * 8 * 127| fits int16).
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i sum = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, lo), ones, hi);
  _mm512_store_si512(o, lo);
  _mm512_store_si512(o + 64, hi);
  _mm256_store_si256(reinterpret_cast<__m256i*>(o + kSeeds),
                     _mm512_cvtepi32_epi16(_mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 3))));
  float dd[4] = {};
  for (int j = 0; j < 3 && 96 * g + 32 * j < K; ++j) dd[j] = d[3 * g + j];
  std::memcpy(o + kD, dd, 16);
}

}  // namespace

bool lanes_format(BlockFormat f) { return f == BlockFormat::q4_0 || f == BlockFormat::q4_k; }

void lay_lanes(BlockFormat f, const Q8Rows& r, int64_t M, int64_t K, XLanes& L) {
  const bool q4_0 = f == BlockFormat::q4_0;
  const int64_t groups = q4_0 ? (K / 32 + 2) / 3 : K / 256;
  L.rs = groups * (q4_0 ? kGroupX : 256);
  L.buf.resize(static_cast<size_t>(M * L.rs + 64));
  L.p = L.buf.data() + (64 - reinterpret_cast<uintptr_t>(L.buf.data()) % 64) % 64;
  for (int64_t m = 0; m < M; ++m) {
    const int8_t* q = r.q + m * r.rs;
    uint8_t* o = L.p + m * L.rs;
    if (q4_0) {
      for (int64_t g = 0; g < groups; ++g) lay_q4_0_group(q, r.d32.data() + m * r.ss, K, g, o + g * kGroupX);
      continue;
    }
    // Q4_K: per 128 codes, the low nibbles' x (codes 0-31, 64-95), then the
    // high nibbles' (32-63, 96-127).
    for (int64_t c = 0; c < K; c += 128) {
      static constexpr int kFrom[4] = {0, 64, 32, 96};
      for (int i = 0; i < 4; ++i) std::memcpy(o + c + 32 * i, q + c + kFrom[i], 32);
    }
  }
}

namespace {

// The high nibble of every byte, in its low four bits.
template <bool kGfni>
KILN_Q4L_GFNI inline __attribute__((always_inline)) __m512i high_nibbles(__m512i v) {
  if constexpr (kGfni) {
    // Output bit i (i < 4) is input bit i + 4: matrix row 7 - i = 1 << (i + 4).
    return _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64(0x1020408000000000LL), 0);
  } else {
    return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F));
  }
}

// One group (three blocks) of R rows of w against M rows of x.
template <bool kGfni, int M, int R, bool kTail>
KILN_Q4L_GFNI inline __attribute__((always_inline)) void step(const uint8_t* const (&r)[R], int64_t g, __mmask64 tail,
                                                              const uint8_t* xg, int64_t xrs, __m512 (&acc)[R][M]) {
  // Lane l's block: lanes 0-4, 5-8, 9-13; 14-15 see only zeros (block 0's d
  // and x's d 0).
  alignas(64) static constexpr uint16_t kScaleWord[32] = {0, 0, 0, 0, 0, 9, 9, 9, 9, 18, 18, 18, 18, 18, 0, 0};
  const __m512i d_lane = _mm512_setr_epi32(0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3);
  __m512i lo[R], hi[R];
  __m512 dw[R];
#pragma GCC unroll 8
  for (int j = 0; j < R; ++j) {
    const uint8_t* p = r[j] + g * kGroupW;
    const __m512i raw = kTail ? _mm512_maskz_loadu_epi8(tail, p) : _mm512_loadu_si512(p);
    lo[j] = _mm512_and_si512(raw, _mm512_set1_epi8(0x0F));
    hi[j] = high_nibbles<kGfni>(raw);
    // Lane l's fp16 d as word l (the words at bytes 0, 18 and 36).
    dw[j] = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_load_si512(kScaleWord), raw)));
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
    const uint8_t* gx = xg + m * xrs;
    const __m512i xlo = _mm512_load_si512(gx), xhi = _mm512_load_si512(gx + 64);
    const __m512i seed = _mm512_cvtepi16_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(gx + kSeeds)));
    const __m512 dx =
        _mm512_permutexvar_ps(d_lane, _mm512_castps128_ps512(_mm_load_ps(reinterpret_cast<const float*>(gx + kD))));
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      const __m512i t = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(seed, lo[j], xlo), hi[j], xhi);
      acc[j][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dw[j], dx), acc[j][m]);
    }
  }
}

template <bool kGfni, int M, int R>
KILN_Q4L_GFNI void qmv_lanes(const uint8_t* xl, int64_t xrs, const uint8_t* w, int64_t nb, int64_t n0, int64_t n1,
                             float* y, int64_t N) {
  const int64_t row_bytes = nb * 18, G = (nb + 2) / 3;
  const __mmask64 tail = (~__mmask64{0}) >> (64 - 18 * (nb - 3 * (G - 1)));
  const int64_t h = (n1 - n0) / R;
  for (int64_t n = n0; n < n0 + h; ++n) {
    const uint8_t* r[R];
    __m512 acc[R][M];
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      r[j] = w + (n + j * h) * row_bytes;
      for (int m = 0; m < M; ++m) acc[j][m] = _mm512_setzero_ps();
    }
    int64_t g = 0;
    for (; g + 1 < G; ++g) step<kGfni, M, R, false>(r, g, tail, xl + g * kGroupX, xrs, acc);
    step<kGfni, M, R, true>(r, g, tail, xl + g * kGroupX, xrs, acc);
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      for (int m = 0; m < M; ++m) y[m * N + n + j * h] = _mm512_reduce_add_ps(acc[j][m]);
    }
  }
  if (n0 + R * h < n1) qmv_lanes<kGfni, M, 1>(xl, xrs, w, nb, n0 + R * h, n1, y, N);
}

using Kernel = void (*)(const uint8_t*, int64_t, const uint8_t*, int64_t, int64_t, int64_t, float*, int64_t);

template <bool kGfni>
Kernel pick(int M) {
  switch (M) {
    case 1: return qmv_lanes<kGfni, 1, 4>;
    case 2: return qmv_lanes<kGfni, 2, 1>;
    case 3: return qmv_lanes<kGfni, 3, 1>;
    case 4: return qmv_lanes<kGfni, 4, 1>;
    case 5: return qmv_lanes<kGfni, 5, 1>;
    case 6: return qmv_lanes<kGfni, 6, 1>;
    case 7: return qmv_lanes<kGfni, 7, 1>;
    default: return qmv_lanes<kGfni, 8, 1>;
  }
}

// ---- Q4_K ----

// A super-block's eight sub-block scales d * sc (lanes 0-7 of a) and
// offsets -dmin * m (lanes 0-7 of b), in registers (quant_blocks_params.h's
// q4_k; a round trip through its arrays costs a failed store-to-load
// forward per block).
KILN_Q4L inline __attribute__((always_inline)) void q4_k_scales(const uint8_t* blk, __m512& a, __m256& b) {
  const uint32_t w0 = qb::load_u32(blk + 4), w1 = qb::load_u32(blk + 8), w2 = qb::load_u32(blk + 12);
  const uint32_t sc_hi = (w2 & 0x0F0F0F0Fu) | (((w0 >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((w2 >> 4) & 0x0F0F0F0Fu) | (((w1 >> 6) & 0x03030303u) << 4);
  const __m128i sm = _mm_setr_epi32(static_cast<int>(w0 & 0x3F3F3F3Fu), static_cast<int>(sc_hi),
                                    static_cast<int>(w1 & 0x3F3F3F3Fu), static_cast<int>(m_hi));
  // Lanes 0-7 the scales, 8-15 the mins, times d and -dmin.
  const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sm));
  const __m512 dd = _mm512_insertf32x8(_mm512_set1_ps(qparams::half_at(blk)), _mm256_set1_ps(-qparams::half_at(blk + 2)), 1);
  a = _mm512_mul_ps(v, dd);
  b = _mm512_extractf32x8_ps(a, 1);
}

// One super-block of R rows of w against M rows of x. A 64-byte load of the
// codes (bytes 16 + 64 h) holds 128 weights: its low nibbles sub-blocks 4h
// (bytes 0-31) and 4h + 2 (32-63), its high ones 4h + 1 and 4h + 3; x's
// layout has the matching codes at 256 sb + 128 h (low) and + 64 (high).
template <bool kGfni, int M, int R, int A>
KILN_Q4L_GFNI inline __attribute__((always_inline)) void step_q4_k(const uint8_t* const (&r)[R], int64_t sb,
                                                                   const Q8View& x, const uint8_t* xl, int64_t xrs,
                                                                   __m512 (&acc)[A][R][M], __m256 (&bias)[R][M]) {
  __m512 ad[R][M];
#pragma GCC unroll 8
  for (int j = 0; j < R; ++j) {
    __m512 a;
    __m256 b;
    q4_k_scales(r[j] + sb * 144, a, b);
    for (int m = 0; m < M; ++m) {
      // Sub-block s's a times x's d of the same 32 weights (lanes 0-7).
      ad[j][m] = _mm512_mul_ps(a, _mm512_castps256_ps512(_mm256_loadu_ps(x.d32(m, 256 * sb))));
      bias[j][m] = _mm256_fmadd_ps(b, _mm256_loadu_ps(x.s32(m, 256 * sb)), bias[j][m]);
    }
  }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512i sub_lo = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
    const __m512i idx_lo = _mm512_add_epi32(sub_lo, _mm512_set1_epi32(4 * h));
    const __m512i idx_hi = _mm512_add_epi32(idx_lo, _mm512_set1_epi32(1));
    __m512i lo[R], hi[R];
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      const __m512i raw = _mm512_loadu_si512(r[j] + sb * 144 + 16 + 64 * h);
      lo[j] = _mm512_and_si512(raw, _mm512_set1_epi8(0x0F));
      hi[j] = high_nibbles<kGfni>(raw);
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const uint8_t* gx = xl + m * xrs + 256 * sb + 128 * h;
      const __m512i xlo = _mm512_load_si512(gx), xhi = _mm512_load_si512(gx + 64);
#pragma GCC unroll 8
      for (int j = 0; j < R; ++j) {
        const __m512i tlo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[j], xlo);
        const __m512i thi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi[j], xhi);
        acc[0][j][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tlo), _mm512_permutexvar_ps(idx_lo, ad[j][m]), acc[0][j][m]);
        acc[A - 1][j][m] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(thi), _mm512_permutexvar_ps(idx_hi, ad[j][m]), acc[A - 1][j][m]);
      }
    }
  }
}

template <bool kGfni, int M, int R>
KILN_Q4L_GFNI void qmv_q4_k(const Q8View& x, const uint8_t* xl, int64_t xrs, const uint8_t* w, int64_t n0, int64_t n1,
                            float* y, int64_t N) {
  constexpr int A = M * R <= 2 ? 2 : 1;  // accumulators per row: two chains where there are few
  const int64_t nb = x.K / 256, row_bytes = nb * 144;
  const int64_t h = (n1 - n0) / R;
  for (int64_t n = n0; n < n0 + h; ++n) {
    const uint8_t* r[R];
    __m512 acc[A][R][M];
    __m256 bias[R][M];
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      r[j] = w + (n + j * h) * row_bytes;
      for (int m = 0; m < M; ++m) {
        bias[j][m] = _mm256_setzero_ps();
        for (int a = 0; a < A; ++a) acc[a][j][m] = _mm512_setzero_ps();
      }
    }
    for (int64_t sb = 0; sb < nb; ++sb) step_q4_k<kGfni, M, R, A>(r, sb, x, xl, xrs, acc, bias);
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      for (int m = 0; m < M; ++m) {
        const __m512 s = A == 2 ? _mm512_add_ps(acc[0][j][m], acc[A - 1][j][m]) : acc[0][j][m];
        const __m256 b = bias[j][m];
        __m128 b4 = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
        b4 = _mm_add_ps(b4, _mm_movehl_ps(b4, b4));
        b4 = _mm_add_ss(b4, _mm_movehdup_ps(b4));
        y[m * N + n + j * h] = _mm512_reduce_add_ps(s) + _mm_cvtss_f32(b4);
      }
    }
  }
  if (n0 + R * h < n1) qmv_q4_k<kGfni, M, 1>(x, xl, xrs, w, n0 + R * h, n1, y, N);
}

using KernelK = void (*)(const Q8View&, const uint8_t*, int64_t, const uint8_t*, int64_t, int64_t, float*, int64_t);

template <bool kGfni>
KernelK pick_q4_k(int M, int64_t K) {
  switch (M) {
    case 1: return K <= 4096 ? qmv_q4_k<kGfni, 1, 4> : qmv_q4_k<kGfni, 1, 2>;
    case 2: return qmv_q4_k<kGfni, 2, 1>;
    case 3: return qmv_q4_k<kGfni, 3, 1>;
    case 4: return qmv_q4_k<kGfni, 4, 1>;
    case 5: return qmv_q4_k<kGfni, 5, 1>;
    case 6: return qmv_q4_k<kGfni, 6, 1>;
    case 7: return qmv_q4_k<kGfni, 7, 1>;
    default: return qmv_q4_k<kGfni, 8, 1>;
  }
}

std::atomic<int> g_gfni_override{-1};

}  // namespace

void set_lanes_gfni_override(int on) { g_gfni_override.store(on < 0 ? -1 : on != 0, std::memory_order_relaxed); }

void qmv_lanes(BlockFormat f, const XLanes& L, const Q8Rows& r, int64_t m0, int M, const uint8_t* w, int64_t N,
               int64_t K, float* y, int64_t n0, int64_t n1) {
  static const bool has_gfni = __builtin_cpu_supports("gfni") != 0;
  const bool gfni = has_gfni && g_gfni_override.load(std::memory_order_relaxed) != 0;
  if (f == BlockFormat::q4_0) {
    const Kernel k = gfni ? pick<true>(M) : pick<false>(M);
    k(L.p + m0 * L.rs, L.rs, w, K / 32, n0, n1, y, N);
  } else {
    const KernelK k = gfni ? pick_q4_k<true>(M, K) : pick_q4_k<false>(M, K);
    k(view(r, m0, K), L.p + m0 * L.rs, L.rs, w, n0, n1, y, N);
  }
}

}  // namespace kiln::cpu
