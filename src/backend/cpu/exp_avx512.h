#pragma once
// A short e^x on 16 float lanes for the AVX-512 kernels whose exp is most of
// their arithmetic (softmax rows, the attention tiles' probabilities), where
// simd_math.h's full-range exp costs twice the instructions. Include it
// after the system headers (avx512_target.h).
#include <immintrin.h>

#include "backend/cpu/avx512_target.h"

namespace kiln::cpu {

// e^x for x <= 88 (a softmax's x - max, or a little above it). x = n ln2 + r
// with |r| <= ln2/2; e^r by its Taylor series to degree 6 (truncation below
// 1.2e-7 relative, about one ulp), and 2^n applied by vscalefps, which also
// underflows cleanly to 0. Inputs below -104 give e^-104 (a subnormal); a
// NaN stays NaN (vmaxps returns its second operand when one is NaN, and the
// rest of the arithmetic propagates it).
KILN_AVX512 inline __m512 exp_avx512(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln2 split in two so n * ln2_hi is exact: r carries no rounding from n.
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

}  // namespace kiln::cpu
