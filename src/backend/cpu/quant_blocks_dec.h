#pragma once
// The per-format decoders of the block-format QMV kernels: 32 weights of a
// block ("a chunk") as 32 signed int8 codes in one AVX2 register plus the
// (a, b) of their sub-block(s), weight = a * q + b. Shared by the float-x
// kernels (quant_blocks_qmv.cpp) and the 8-bit-x ones
// (quant_blocks_qmv_int8.cpp). Q8_0, Q4_0, Q4_K and Q6_K have SIMD
// decoders; the other formats go through the scalar reference
// (quant_blocks_math.h), one code at a time.
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/quant_blocks_math.h"
#include "backend/cpu/quant_blocks_params.h"

#define KILN_QINLINE inline __attribute__((always_inline))

namespace kiln::cpu::qdec {

KILN_QINLINE __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
KILN_QINLINE __m256i shift_mask(__m256i v, int shift, int mask) {
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8(static_cast<char>(mask)));
}

// Per-chunk scales: chunk c covers sub-blocks c (32-weight subs) or 2c and
// 2c + 1 (16-weight subs).
using qparams::Params;

// Generic decoder: the scalar reference, one q at a time.
template <BlockFormat F>
struct Dec {
  static constexpr int kBlock = block_layout(F).block, kBytes = block_layout(F).bytes, kChunks = kBlock / 32;
  static constexpr bool kHalves = kBlock == 256 && (F == BlockFormat::q2_k || F == BlockFormat::q3_k);
  static KILN_QINLINE void params(const uint8_t* blk, Params& p) {
    int subs = kBlock / qb::sub_size(F);
    for (int j = 0; j < subs; ++j) qb::sub_params(F, blk, j, p.a[j], p.b[j]);
  }
  static KILN_QINLINE __m256i chunk(const uint8_t* blk, int c) {
    alignas(32) int8_t q[32];
    for (int i = 0; i < 32; ++i) q[i] = static_cast<int8_t>(qb::quant_value(F, blk, c * 32 + i));
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(q));
  }
};

template <>
struct Dec<BlockFormat::q8_0> {
  static constexpr int kBlock = 32, kBytes = 34, kChunks = 1;
  static constexpr bool kHalves = false;
  static KILN_QINLINE void params(const uint8_t* blk, Params& p) { qparams::one_scale(blk, p); }
  static KILN_QINLINE __m256i chunk(const uint8_t* blk, int) { return load32(blk + 2); }
};

template <>
struct Dec<BlockFormat::q4_0> {
  static constexpr int kBlock = 32, kBytes = 18, kChunks = 1;
  static constexpr bool kHalves = false;
  static KILN_QINLINE void params(const uint8_t* blk, Params& p) { qparams::one_scale(blk, p); }
  static KILN_QINLINE __m256i chunk(const uint8_t* blk, int) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    __m128i m = _mm_set1_epi8(0x0F);
    __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
    return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
  }
};

template <>
struct Dec<BlockFormat::q4_k> {
  static constexpr int kBlock = 256, kBytes = 144, kChunks = 8;
  static constexpr bool kHalves = false;
  static KILN_QINLINE void params(const uint8_t* blk, Params& p) { qparams::q4_k(blk, p); }
  static KILN_QINLINE __m256i chunk(const uint8_t* blk, int c) { return shift_mask(load32(blk + 16 + (c / 2) * 32), 4 * (c % 2), 0x0F); }
};

template <>
struct Dec<BlockFormat::q6_k> {
  static constexpr int kBlock = 256, kBytes = 210, kChunks = 8;
  static constexpr bool kHalves = true;
  static KILN_QINLINE void params(const uint8_t* blk, Params& p) { qparams::q6_k(blk, p); }
  static KILN_QINLINE __m256i chunk(const uint8_t* blk, int c) {
    int h = c / 4, s = c % 4;
    __m256i lo = shift_mask(load32(blk + h * 64 + (s & 1) * 32), 4 * (s >> 1), 0x0F);
    __m256i hi = shift_mask(load32(blk + 128 + h * 32), 2 * s, 0x03);
    return _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
  }
};

// Whether a chunk's two halves are two 16-weight sub-blocks.
template <BlockFormat F>
constexpr bool halves() {
  return Dec<F>::kHalves;
}

}  // namespace kiln::cpu::qdec
