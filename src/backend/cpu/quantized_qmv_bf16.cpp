// 4- and 8-bit QMV for bfloat16 x on CPUs with AVX512-BF16 (`kiln bench`
// rows qmv_affine4, qmv_affine8, qmv_mxfp4, qmv_mxfp8). The general kernel
// (quantized_qmv.inc) spends a shift, a mask, an int->float conversion
// and an fma on every value, about 39
// instructions per 64 bytes of weights; that is more than one core can issue
// while DRAM delivers 64 bytes. Here a pair of values is one bf16 pair of a
// vdpbf16ps: a shift and one vpternlogd turn 16 words into 32 bf16 values
// (nibble i of each word in the low half of a lane, nibble i + 4 in the
// high half, each OR-ed into the bits of 128.0, so the lane holds 128 + q
// exactly), and the dot product with x is 4 instructions per 128 values.
// The 128 offset is removed per group through the bias: with t = sum
// (128 + q) x, the group's share s sum q x + b sum x is s t + (b - 128 s)
// sum x. 8-bit weights take the same four vectors: a word's bytes b0..b3
// give (low nibble of b0, of b2), (high nibble of b0, of b2), then b1 and b3
// likewise, so x is paired as (x0, x2) and (x1, x3) and the high nibbles'
// pairs carry 16 x (exact in bf16); the offset is then 128 * 17 = 2176. (The
// float kernel ran 8-bit at 0.28 of STREAM on this session's Zen 5.)
// Memory: a row of 4-bit weights is 2 KB at K = 4096, too short for the
// hardware prefetcher to reach full speed before the row (and the pass of
// four rows) ends, so one core streamed ~10 GB/s from DRAM where a plain
// read streams ~25. Each pass prefetches the same chunk of the next pass's
// rows into L2: 4096 x 14336 4-bit 1.63 -> 0.86 ms, 8-bit 2.42 -> 1.75 ms
// on two cores of the Zen 4/5 VM (docs/performance.md, session 25). (A
// VPMULTISHIFTQB unpack instead of the shifts was ~10% faster in a lab
// copy of the loop and 5% slower here: not kept.)
// x must be bf16 (then
// the bf16 pairs hold it exactly); the result differs from the float kernel
// only by fp32 rounding of the larger partial sums (about 17x, far below
// the bf16 output's rounding).
// The 4-bit floating-point modes (mxfp4, nvfp4: e2m1 codes packed as 4-bit
// affine weights are, one 8-bit scale per 32 or 16 values, no bias) take
// the same loop with another decode: vpermw looks each 16-bit lane's low
// five bits up in a 32-entry table of the e2m1 values in bf16 (exact; the
// table repeats its 16 entries, so the next nibble's low bit in bit 4 of
// the index does not matter and no mask is needed), and the group's scale
// (its byte through the caller's table) multiplies the lanes' sums as the
// affine scale does. The float kernel (quantized_fp_qmv.inc) decoded
// 32 values with a permute each and ran at 0.09 of the roofline.
#include <immintrin.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "backend/cpu/avx512_target.h"
#include "backend/cpu/cast.h"
#include "backend/cpu/quantized.h"
#include "backend/cpu/threading.h"

#define KILN_QMV_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace kiln::cpu {
namespace {

constexpr int kWords = 16;  // words per chunk (one zmm); a chunk is 16 * 32 / bits values

// What the row kernels read, whatever the format.
struct Job {
  const float* x;  // [M, K], values exact in bf16
  int64_t M, N, K;
  const uint32_t* w;  // [N, K * bits / 32]
  int bits, group_size;
  float* out;  // [M, N]
};

// What the row kernels derive from the job, once per call.
struct RowShape {
  int vpw;                // values per word
  int64_t words, groups;  // per row of w
  int log2_group;         // the chunk's first group by a shift, no division in the loop
  alignas(64) int idx_lanes[16];  // lane j's group within its chunk
};

RowShape row_shape(const Job& a) {
  RowShape r;
  r.vpw = 32 / a.bits;
  r.words = a.K / r.vpw;
  r.groups = a.K / a.group_size;
  r.log2_group = __builtin_ctz(static_cast<unsigned>(a.group_size));
  for (int j = 0; j < 16; ++j) r.idx_lanes[j] = (r.vpw * j) / a.group_size;
  return r;
}

// x as bf16 pairs in the order of the unpacked vectors: chunk c, vector i,
// lane j holds, for 4 bits, (x[c*128 + 8j + i], x[c*128 + 8j + i + 4]); for
// 8 bits (k = c*64 + 4j) (x[k], x[k+2]), 16 (x[k], x[k+2]), (x[k+1],
// x[k+3]), 16 (x[k+1], x[k+3]); and the group sums of x where the format
// has biases.
struct Bf16Prep {
  int64_t chunks, groups_padded;
  std::vector<uint32_t> xp;  // [M][chunks][4][16]
  std::vector<float> xsum;   // [M][groups_padded]
};

uint32_t bf16_bits(float v) { return bfloat16_t::from_float(v); }

Bf16Prep prepare(const Job& a, bool sums) {
  Bf16Prep p;
  const int vpw = 32 / a.bits;  // values per word
  const int64_t words = a.K / vpw, groups = a.K / a.group_size;
  p.chunks = (words + kWords - 1) / kWords;
  p.groups_padded = (groups + 15) / 16 * 16;
  p.xp.assign(a.M * p.chunks * 64, 0u);
  p.xsum.assign(sums ? a.M * p.groups_padded : 0, 0.0f);
  for (int64_t m = 0; m < a.M; ++m) {
    const float* x = a.x + m * a.K;
    uint32_t* xp = p.xp.data() + m * p.chunks * 64;
    for (int64_t c = 0; c < p.chunks; ++c) {
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < kWords; ++j) {
          // The pair's first value, the distance to its second, and 16 for
          // the high nibbles of 8-bit weights.
          const int64_t k = vpw == 4 ? c * kWords * 4 + 4 * j + i / 2 : c * kWords * 8 + 8 * j + i;
          const int64_t gap = vpw == 4 ? 2 : 4;
          const float f = vpw == 4 && i % 2 ? 16.0f : 1.0f;
          if (k >= a.K) continue;
          xp[c * 64 + i * 16 + j] = bf16_bits(f * x[k]) | (bf16_bits(f * x[k + gap]) << 16);
        }
      }
    }
    if (!sums) continue;
    for (int64_t g = 0; g < groups; ++g) {
      float s = 0.0f;
      for (int k = 0; k < a.group_size; ++k) s += x[g * a.group_size + k];
      p.xsum[m * p.groups_padded + g] = s;
    }
  }
  return p;
}

KILN_QMV_BF16 inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

KILN_QMV_BF16 inline __m512 widen(const uint16_t* q, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, q)), 16));
}

KILN_QMV_BF16 inline __m512i load_chunk(const uint32_t* w, const RowShape& r, int64_t c) {
  return _mm512_maskz_loadu_epi32(first_lanes(r.words - c * kWords), w + c * kWords);
}

// MLX's affine mode: bf16 scales and biases per group.
struct Affine {
  static constexpr bool kBias = true;
  const uint16_t* scales;  // [N, groups]
  const uint16_t* biases;
  float offset;  // what the bf16 pairs add per unit of x (see the top of the file)

  // The scales and biases of row n as floats, the offset folded into the
  // biases (b - offset s).
  KILN_QMV_BF16 void row_scales(const RowShape& r, int64_t n, float* srow, float* brow) const {
    const int64_t G = r.groups;
    const __m512 off = _mm512_set1_ps(offset);
    for (int64_t g = 0; g < G; g += 16) {
      const __mmask16 m = first_lanes(G - g);
      const __m512 s = widen(scales + n * G + g, m);
      _mm512_storeu_ps(srow + g, s);
      _mm512_storeu_ps(brow + g, _mm512_fnmadd_ps(off, s, widen(biases + n * G + g, m)));
    }
  }

  // Chunk c of a row (16 words, masked at the row's end) as four vectors of
  // bf16 pairs: (v >> 4i) & 0x000F000F | 0x43004300 (truth table 0xEA is
  // (A & B) | C). Masked-off lanes hold 128 + 0: their x pairs are zero.
  KILN_QMV_BF16 static void unpack(const uint32_t* w, const RowShape& r, int64_t c, __m512bh (&q)[4]) {
    const __m512i low4 = _mm512_set1_epi32(0x000F000F), one28 = _mm512_set1_epi32(0x43004300);
    const __m512i v = load_chunk(w, r, c);
    q[0] = (__m512bh)_mm512_ternarylogic_epi32(v, low4, one28, 0xEA);
    q[1] = (__m512bh)_mm512_ternarylogic_epi32(_mm512_srli_epi32(v, 4), low4, one28, 0xEA);
    q[2] = (__m512bh)_mm512_ternarylogic_epi32(_mm512_srli_epi32(v, 8), low4, one28, 0xEA);
    q[3] = (__m512bh)_mm512_ternarylogic_epi32(_mm512_srli_epi32(v, 12), low4, one28, 0xEA);
  }
};

// e2m1 codes with one 8-bit scale per group (mxfp4, nvfp4).
struct Fp4 {
  static constexpr bool kBias = false;
  const uint8_t* scales;  // [N, groups]
  const float* lut;       // a scale byte's value

  KILN_QMV_BF16 void row_scales(const RowShape& r, int64_t n, float* srow, float*) const {
    for (int64_t g = 0; g < r.groups; ++g) srow[g] = lut[scales[n * r.groups + g]];
  }

  // Code i (0-15) as bf16 at entries i and i + 16: 0, 0.5, 1, 1.5, 2, 3, 4,
  // 6 and their negatives.
  KILN_QMV_BF16 static __m512i table() {
    return _mm512_set_epi16(static_cast<short>(0xC0C0), static_cast<short>(0xC080), static_cast<short>(0xC040),
                            static_cast<short>(0xC000), static_cast<short>(0xBFC0), static_cast<short>(0xBF80),
                            static_cast<short>(0xBF00), static_cast<short>(0x8000), 0x40C0, 0x4080, 0x4040, 0x4000,
                            0x3FC0, 0x3F80, 0x3F00, 0x0000, static_cast<short>(0xC0C0), static_cast<short>(0xC080),
                            static_cast<short>(0xC040), static_cast<short>(0xC000), static_cast<short>(0xBFC0),
                            static_cast<short>(0xBF80), static_cast<short>(0xBF00), static_cast<short>(0x8000), 0x40C0,
                            0x4080, 0x4040, 0x4000, 0x3FC0, 0x3F80, 0x3F00, 0x0000);
  }

  // As Affine::unpack, the nibbles looked up instead of masked; masked-off
  // lanes hold code 0, the value 0.
  KILN_QMV_BF16 static void unpack(const uint32_t* w, const RowShape& r, int64_t c, __m512bh (&q)[4]) {
    const __m512i t = table();
    const __m512i v = load_chunk(w, r, c);
    q[0] = (__m512bh)_mm512_permutexvar_epi16(v, t);
    q[1] = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi32(v, 4), t);
    q[2] = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi32(v, 8), t);
    q[3] = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi32(v, 12), t);
  }
};

// The scales of chunk c's lanes (groups are 16 or more values, a chunk 64
// or 128: at most 8 groups per chunk).
KILN_QMV_BF16 inline __m512 chunk_scales(const float* srow, const RowShape& r, int64_t c) {
  return _mm512_permutexvar_ps(_mm512_load_si512(r.idx_lanes),
                               _mm512_loadu_ps(srow + ((c * kWords * r.vpw) >> r.log2_group)));
}

template <int M, class F>
KILN_QMV_BF16 void rows_bf16(const Job& a, const F& f, const Bf16Prep& p, int64_t n0, int64_t n1) {
  constexpr int P = M == 1 ? 2 : 1;
  const RowShape r = row_shape(a);
  std::vector<float> sb(2 * (r.groups + 16), 0.0f);
  float* srow = sb.data();
  float* brow = sb.data() + r.groups + 16;
  const int64_t xstride = p.chunks * 64;
  for (int64_t n = n0; n < n1; ++n) {
    const uint32_t* w = a.w + n * r.words;
    const char* ahead = reinterpret_cast<const char*>(n + 1 < a.N ? w + r.words : w);  // the next row
    f.row_scales(r, n, srow, brow);
    __m512 tot[M];
    for (int m = 0; m < M; ++m) tot[m] = _mm512_setzero_ps();
    for (int64_t c = 0; c < p.chunks; ++c) {
      _mm_prefetch(ahead + c * 64, _MM_HINT_T1);
      __m512bh q[4];
      F::unpack(w, r, c, q);
      const uint32_t* xc = p.xp.data() + c * 64;
      const __m512 s = chunk_scales(srow, r, c);
      for (int m = 0; m < M; ++m) {
        const uint32_t* xm = xc + m * xstride;
        __m512 t[P];
        for (int k = 0; k < P; ++k) t[k] = _mm512_setzero_ps();
        t[0] = _mm512_dpbf16_ps(t[0], q[0], (__m512bh)_mm512_loadu_si512(xm));
        t[1 % P] = _mm512_dpbf16_ps(t[1 % P], q[1], (__m512bh)_mm512_loadu_si512(xm + 16));
        t[0] = _mm512_dpbf16_ps(t[0], q[2], (__m512bh)_mm512_loadu_si512(xm + 32));
        t[1 % P] = _mm512_dpbf16_ps(t[1 % P], q[3], (__m512bh)_mm512_loadu_si512(xm + 48));
        __m512 sum = P == 2 ? _mm512_add_ps(t[0], t[1 % P]) : t[0];
        tot[m] = _mm512_fmadd_ps(sum, s, tot[m]);
      }
    }
    if constexpr (F::kBias) {
      for (int64_t g = 0; g < r.groups; g += 16) {
        __m512 b = _mm512_loadu_ps(brow + g);
        for (int m = 0; m < M; ++m) {
          tot[m] = _mm512_fmadd_ps(b, _mm512_loadu_ps(p.xsum.data() + m * p.groups_padded + g), tot[m]);
        }
      }
    }
    for (int m = 0; m < M; ++m) a.out[m * a.N + n] = _mm512_reduce_add_ps(tot[m]);
  }
}

// One row of x against four rows of w per pass: four streams of weights in
// flight per thread where one row at a time was one (a core read a single
// stream at ~20 GB/s on the Zen 4 VM, ~31 with four), and each x vector
// loaded once for the four rows. Per row the arithmetic is rows_bf16<1>'s,
// in the same order.
template <class F>
KILN_QMV_BF16 void rows_bf16_four(const Job& a, const F& f, const Bf16Prep& p, int64_t n0, int64_t n1) {
  constexpr int R = 4;
  const RowShape rs = row_shape(a);
  const int64_t G = rs.groups;
  std::vector<float> sb(2 * R * (G + 16), 0.0f);
  int64_t n = n0;
  for (; n + R <= n1; n += R) {
    const uint32_t* w[R];
    const char* ahead[R];  // the same chunk of the next pass's rows
    float* srow[R];
    float* brow[R];
    for (int r = 0; r < R; ++r) {
      w[r] = a.w + (n + r) * rs.words;
      ahead[r] = reinterpret_cast<const char*>(n + R + r < a.N ? w[r] + R * rs.words : w[r]);
      srow[r] = sb.data() + 2 * r * (G + 16);
      brow[r] = srow[r] + G + 16;
      f.row_scales(rs, n + r, srow[r], brow[r]);
    }
    __m512 tot[R];
    for (int r = 0; r < R; ++r) tot[r] = _mm512_setzero_ps();
    for (int64_t c = 0; c < p.chunks; ++c) {
      const uint32_t* xc = p.xp.data() + c * 64;
      const __m512bh x0 = (__m512bh)_mm512_loadu_si512(xc), x1 = (__m512bh)_mm512_loadu_si512(xc + 16);
      const __m512bh x2 = (__m512bh)_mm512_loadu_si512(xc + 32), x3 = (__m512bh)_mm512_loadu_si512(xc + 48);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        _mm_prefetch(ahead[r] + c * 64, _MM_HINT_T1);
        __m512bh q[4];
        F::unpack(w[r], rs, c, q);
        __m512 t0 = _mm512_dpbf16_ps(_mm512_setzero_ps(), q[0], x0);
        __m512 t1 = _mm512_dpbf16_ps(_mm512_setzero_ps(), q[1], x1);
        t0 = _mm512_dpbf16_ps(t0, q[2], x2);
        t1 = _mm512_dpbf16_ps(t1, q[3], x3);
        tot[r] = _mm512_fmadd_ps(_mm512_add_ps(t0, t1), chunk_scales(srow[r], rs, c), tot[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      if constexpr (F::kBias) {
        for (int64_t g = 0; g < G; g += 16) {
          tot[r] = _mm512_fmadd_ps(_mm512_loadu_ps(brow[r] + g), _mm512_loadu_ps(p.xsum.data() + g), tot[r]);
        }
      }
      a.out[n + r] = _mm512_reduce_add_ps(tot[r]);
    }
  }
  if (n < n1) rows_bf16<1>(a, f, p, n, n1);
}

template <int M, class F>
void run(const Job& a, const F& f, const Bf16Prep& p) {
  int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, a.K / 2));
  if constexpr (M == 1) {
    // Pieces from a shared counter: the two vCPUs of a VM finish at
    // different times (threading.h).
    parallel_for_balanced(a.N, std::max<int64_t>(grain, 4),
                          [&](int64_t n0, int64_t n1) { rows_bf16_four(a, f, p, n0, n1); });
  } else {
    parallel_for(a.N, grain, [&](int64_t n0, int64_t n1) { rows_bf16<M>(a, f, p, n0, n1); });
  }
}

// go(std::integral_constant<int, M>) for M in 1 .. kQmvMaxRows (8).
template <typename Go>
void with_rows(int64_t M, Go&& go) {
  switch (M) {
    case 1: return go(std::integral_constant<int, 1>{});
    case 2: return go(std::integral_constant<int, 2>{});
    case 3: return go(std::integral_constant<int, 3>{});
    case 4: return go(std::integral_constant<int, 4>{});
    case 5: return go(std::integral_constant<int, 5>{});
    case 6: return go(std::integral_constant<int, 6>{});
    case 7: return go(std::integral_constant<int, 7>{});
    default: return go(std::integral_constant<int, 8>{});
  }
}

template <class F>
void run_rows(const Job& a, const F& f) {
  const Bf16Prep p = prepare(a, F::kBias);
  with_rows(a.M, [&](auto m) { run<decltype(m)::value>(a, f, p); });
}

// ---- mxfp8: e4m3 codes, one e8m0 scale per 32 ----
//
// A byte widened to a 16-bit lane becomes its bf16 bits with integer
// operations: ((b & 0x7f) << 4) + (120 << 7) is e4m3's exponent rebased to
// bf16's and its 3 mantissa bits on top of bf16's 7, exact for the normal
// codes; the subnormal codes (exponent 0: m * 2^-9) take a masked vpermw
// from an 8-entry table, the NaN codes (0x7f, 0xff) a masked move, and the
// sign bit moves to bit 15. Lane pairs are consecutive values, so x is
// plain bf16 and a zmm of 32 codes is one group: one vdpbf16ps and one FMA
// by the group's scale. (The float kernel of quantized_fp_qmv.inc decodes
// through float16 and vcvtph2ps and ran at 0.15 of the roofline.)

KILN_QMV_BF16 inline __m512bh decode_e4m3(__m256i bytes) {
  const __m512i b = _mm512_cvtepu8_epi16(bytes);
  const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi16(0x7f));
  __m512i v = _mm512_add_epi16(_mm512_slli_epi16(mag, 4), _mm512_set1_epi16(120 << 7));
  // Exponent 0: m * 2^-9 for m = 0..7 (index = the low five bits: m).
  const __m512i sub = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x3C60,
                                       0x3C40, 0x3C20, 0x3C00, 0x3BC0, 0x3B80, 0x3B00, 0);
  v = _mm512_mask_permutexvar_epi16(v, _mm512_testn_epi16_mask(b, _mm512_set1_epi16(0x78)), b, sub);
  v = _mm512_mask_mov_epi16(v, _mm512_cmpeq_epi16_mask(mag, _mm512_set1_epi16(0x7f)), _mm512_set1_epi16(0x7fc0));
  // v | ((b << 8) & 0x8000): the sign (truth table 0xEA: (A & B) | C).
  return (__m512bh)_mm512_ternarylogic_epi32(_mm512_slli_epi16(b, 8), _mm512_set1_epi16(static_cast<short>(0x8000)), v,
                                             0xEA);
}

// Rows [n0, n1) of w (K bytes each) against M rows of bf16 x (xb, [M][K]).
template <int M>
KILN_QMV_BF16 void rows_fp8(const FpQmvArgs& a, const uint16_t* xb, int64_t n0, int64_t n1) {
  const int64_t G = a.K / 32;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* w = a.w + n * a.K;
    const uint8_t* sc = a.scales + n * G;
    const char* ahead = reinterpret_cast<const char*>(n + 1 < a.N ? w + a.K : w);  // the next row
    __m512 tot[M][2];
    for (int m = 0; m < M; ++m) tot[m][0] = tot[m][1] = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; ++g) {
      if (g % 2 == 0) _mm_prefetch(ahead + 32 * g, _MM_HINT_T1);
      const __m512bh q = decode_e4m3(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32 * g)));
      const __m512 s = _mm512_set1_ps(a.scale_lut[sc[g]]);
      for (int m = 0; m < M; ++m) {
        const __m512bh x = (__m512bh)_mm512_loadu_si512(xb + m * a.K + 32 * g);
        tot[m][g & 1] = _mm512_fmadd_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), q, x), s, tot[m][g & 1]);
      }
    }
    for (int m = 0; m < M; ++m) a.out[m * a.N + n] = _mm512_reduce_add_ps(_mm512_add_ps(tot[m][0], tot[m][1]));
  }
}

// M = 1: four rows a quarter of the range apart per pass, four streams per
// core (4096 x 14336, alternating in one process: 2.32-2.51 -> 2.04-2.19 ms).
KILN_QMV_BF16 void rows_fp8_four(const FpQmvArgs& a, const uint16_t* xb, int64_t n0, int64_t n1) {
  constexpr int R = 4;
  const int64_t G = a.K / 32, h = (n1 - n0) / R;
  for (int64_t n = n0; n < n0 + h; ++n) {
    const uint8_t* w[R];
    const uint8_t* sc[R];
    __m512 tot[R];
    for (int r = 0; r < R; ++r) {
      w[r] = a.w + (n + r * h) * a.K;
      sc[r] = a.scales + (n + r * h) * G;
      tot[r] = _mm512_setzero_ps();
    }
    for (int64_t g = 0; g < G; ++g) {
      const __m512bh x = (__m512bh)_mm512_loadu_si512(xb + 32 * g);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512bh q = decode_e4m3(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[r] + 32 * g)));
        tot[r] = _mm512_fmadd_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), q, x), _mm512_set1_ps(a.scale_lut[sc[r][g]]),
                                 tot[r]);
      }
    }
    for (int r = 0; r < R; ++r) a.out[n + r * h] = _mm512_reduce_add_ps(tot[r]);
  }
  if (n0 + R * h < n1) rows_fp8<1>(a, xb, n0 + R * h, n1);
}

template <int M>
void run_fp8(const FpQmvArgs& a, const uint16_t* xb) {
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, a.K));
  parallel_for_balanced(a.N, grain, [&](int64_t n0, int64_t n1) {
    if constexpr (M == 1) {
      rows_fp8_four(a, xb, n0, n1);
    } else {
      rows_fp8<M>(a, xb, n0, n1);
    }
  });
}

}  // namespace

bool qmv4_avx512_bf16(const QmvArgs& a) {
  if ((a.bits != 4 && a.bits != 8) || a.t != bfloat16 || a.M < 1 || a.M > kQmvMaxRows) return false;
  const Job job{a.x, a.M, a.N, a.K, a.w, a.bits, a.group_size, a.out};
  const Affine f{static_cast<const uint16_t*>(a.scales), static_cast<const uint16_t*>(a.biases),
                 a.bits == 8 ? 2176.0f : 128.0f};
  run_rows(job, f);
  return true;
}

bool fp_qmv_avx512_bf16(const FpQmvArgs& a) {
  if (a.M < 1 || a.M > kQmvMaxRows || a.K % 32 != 0) return false;
  if (a.bits == 4 && a.group_size % 8 == 0) {  // mxfp4, nvfp4
    const Job job{a.x, a.M, a.N, a.K, reinterpret_cast<const uint32_t*>(a.w), 4, a.group_size, a.out};
    run_rows(job, Fp4{a.scales, a.scale_lut});
    return true;
  }
  if (a.bits == 8 && a.group_size == 32) {  // mxfp8
    std::vector<uint16_t> xb(a.M * a.K);
    for (int64_t i = 0; i < a.M * a.K; ++i) xb[i] = static_cast<uint16_t>(bf16_bits(a.x[i]));
    with_rows(a.M, [&](auto m) { run_fp8<decltype(m)::value>(a, xb.data()); });
    return true;
  }
  return false;
}

}  // namespace kiln::cpu
