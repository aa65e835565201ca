#pragma once
// The in-register transpose of a 16 x 16 block of 4-byte elements shared by
// the transpose kernel (transpose_avx512.cpp) and the GEMM's packing of
// K-contiguous operands (gemm_pack_avx512.h).
#include <immintrin.h>

#include "backend/cpu/avx512_target.h"

namespace kiln::cpu {

// v[k] holds source row k (16 elements) on entry and destination row k on
// exit. 128-bit lane L of a vector holds elements 4L..4L+3.
KILN_AVX512 inline void transpose_16x16(__m512* v) {
  __m512 a[16], b[16];
  for (int p = 0; p < 8; ++p) {  // pairs of rows interleaved, per lane
    a[2 * p] = _mm512_unpacklo_ps(v[2 * p], v[2 * p + 1]);
    a[2 * p + 1] = _mm512_unpackhi_ps(v[2 * p], v[2 * p + 1]);
  }
  for (int q = 0; q < 4; ++q) {  // b[4q + m], lane L: column 4L + m of rows 4q..4q+3
    __m512d a0 = _mm512_castps_pd(a[4 * q]), a1 = _mm512_castps_pd(a[4 * q + 1]);
    __m512d a2 = _mm512_castps_pd(a[4 * q + 2]), a3 = _mm512_castps_pd(a[4 * q + 3]);
    b[4 * q] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
    b[4 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
    b[4 * q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
    b[4 * q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
  }
  for (int m = 0; m < 4; ++m) {  // gather lane L of b[m], b[4+m], b[8+m], b[12+m]
    __m512 c0 = _mm512_shuffle_f32x4(b[m], b[4 + m], 0x88), c1 = _mm512_shuffle_f32x4(b[m], b[4 + m], 0xDD);
    __m512 d0 = _mm512_shuffle_f32x4(b[8 + m], b[12 + m], 0x88), d1 = _mm512_shuffle_f32x4(b[8 + m], b[12 + m], 0xDD);
    v[m] = _mm512_shuffle_f32x4(c0, d0, 0x88);
    v[8 + m] = _mm512_shuffle_f32x4(c0, d0, 0xDD);
    v[4 + m] = _mm512_shuffle_f32x4(c1, d1, 0x88);
    v[12 + m] = _mm512_shuffle_f32x4(c1, d1, 0xDD);
  }
}

}  // namespace kiln::cpu
