#pragma once
// The (a, b) of each sub-block of the block formats that have SIMD QMV
// decoders (Q8_0, Q4_0, Q4_K, Q6_K), with the fp16 fields converted by F16C
// rather than quant_blocks_math.h's portable qb::sub_params (same values):
// shared by the float kernel (quant_blocks_qmv.cpp) and the bf16 one
// (quant_blocks_qmv_bf16.cpp). Weight = a[j] * q + b[j] with q the signed
// code of qb::quant_value; j counts sub-blocks of 32 weights (16 for Q6_K).
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/quant_blocks_math.h"

namespace kiln::cpu::qparams {

struct Params {
  float a[16], b[16];
};

inline __attribute__((always_inline)) float half_at(const uint8_t* p) { return _cvtsh_ss(qb::load_u16(p)); }

// Q4_0 and Q8_0: one fp16 scale at the start of the block.
inline __attribute__((always_inline)) void one_scale(const uint8_t* blk, Params& p) {
  p.a[0] = half_at(blk);
  p.b[0] = 0.f;
}

// The 8 6-bit scales and mins of qb::scale_min_k4 from the 12 bytes as
// three words, four sub-blocks per word operation: sub-blocks 0-3 keep the
// low 6 bits of bytes 0-3 (scales) and 4-7 (mins); 4-7 take 4 bits of
// bytes 8-11 and the top 2 bits of bytes 0-3 (scales) or 4-7 (mins).
inline __attribute__((always_inline)) void q4_k(const uint8_t* blk, Params& p) {
  const float d = half_at(blk), dmin = half_at(blk + 2);
  const uint32_t w0 = qb::load_u32(blk + 4), w1 = qb::load_u32(blk + 8), w2 = qb::load_u32(blk + 12);
  const uint32_t sc_lo = w0 & 0x3F3F3F3Fu, m_lo = w1 & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (w2 & 0x0F0F0F0Fu) | (((w0 >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((w2 >> 4) & 0x0F0F0F0Fu) | (((w1 >> 6) & 0x03030303u) << 4);
  const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi), 0, 0)));
  const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_setr_epi32(static_cast<int>(m_lo), static_cast<int>(m_hi), 0, 0)));
  // d * sc and -(dmin * m), rounded as the scalar reference rounds them.
  _mm256_storeu_ps(p.a, _mm256_mul_ps(_mm256_set1_ps(d), sc));
  _mm256_storeu_ps(p.b, _mm256_xor_ps(_mm256_mul_ps(_mm256_set1_ps(dmin), m), _mm256_set1_ps(-0.0f)));
}

inline __attribute__((always_inline)) void q6_k(const uint8_t* blk, Params& p) {
  const float d = half_at(blk + 208);
  for (int j = 0; j < 16; ++j) {
    p.a[j] = d * static_cast<float>(static_cast<int8_t>(blk[192 + j]));
    p.b[j] = 0.f;
  }
}

}  // namespace kiln::cpu::qparams
