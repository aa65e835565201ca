// AVX-512 softmax rows (see softmax_avx512.h). Three passes per row: the max
// (the only pass that reads DRAM; four rows at once, prefetched into L2
// during the previous group's arithmetic), exp(x - max) into an
// L1/L2-resident scratch row while summing, and the scaled write-out. The row is read from
// memory once and written once; the exp is the only real arithmetic, so it
// is a short one (exp_avx512.h) instead of simd_math.h's full-range exp.
#include "backend/cpu/softmax_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "backend/cpu/avx512_target.h"
#include "backend/cpu/exp_avx512.h"

namespace kiln::cpu {
namespace {

KILN_AVX512 inline __mmask16 first_lanes(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }

KILN_AVX512 float row_max(const float* x, int64_t len) {
  const __m512 lowest = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m0 = lowest, m1 = lowest, m2 = lowest, m3 = lowest;
  int64_t i = 0;
  for (; i + 64 <= len; i += 64) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + 16));
    m2 = _mm512_max_ps(m2, _mm512_loadu_ps(x + i + 32));
    m3 = _mm512_max_ps(m3, _mm512_loadu_ps(x + i + 48));
  }
  for (; i + 16 <= len; i += 16) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
  if (i < len) m1 = _mm512_max_ps(m1, _mm512_mask_loadu_ps(lowest, first_lanes(len - i), x + i));
  // A NaN lost here still reaches every output: exp(NaN - m) is NaN, so is
  // the sum, so is every scaled value.
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
}

// The maxima of four rows, their loads interleaved: the max pass is the one
// that reads DRAM, and one thread reading one stream gets far less
// bandwidth than reading four (see reduce_avx512.cpp).
KILN_AVX512 void four_row_max(const float* x, int64_t len, float* m) {
  const __m512 lowest = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 a[4] = {lowest, lowest, lowest, lowest};
  int64_t i = 0;
  for (; i + 16 <= len; i += 16) {
    for (int k = 0; k < 4; ++k) a[k] = _mm512_max_ps(a[k], _mm512_loadu_ps(x + k * len + i));
  }
  for (int k = 0; k < 4; ++k) {
    if (i < len) a[k] = _mm512_max_ps(a[k], _mm512_mask_loadu_ps(lowest, first_lanes(len - i), x + k * len + i));
    m[k] = _mm512_reduce_max_ps(a[k]);
  }
}

// e[i] = exp(x[i] - m); returns the sum of e. The sum is blocked as the
// reductions' are (reduce_avx512.cpp): 1024 elements (32 adds per lane) into
// fresh accumulators, the blocks joined with Kahan's compensation, so a long
// row's normalizer stays within a few ulps. (The terms are in [0, 1]: no
// inf for the compensation to trip on.)
// pf: a row of the next group of four, asked into L2 one line per 16
// elements as this row is worked on (nullptr: none), so that the next max
// pass finds its rows there instead of waiting on DRAM with the core idle.
KILN_AVX512 float exp_and_sum(const float* x, float m, int64_t len, float* e, const float* pf) {
  constexpr int64_t kBlock = 1024;
  const __m512 vm = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps(), comp = sum;
  int64_t i = 0;
  while (i < len) {
    const int64_t end = std::min(len, i + kBlock);
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    for (; i + 32 <= end; i += 32) {
      if (pf) {
        _mm_prefetch(reinterpret_cast<const char*>(pf + i), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(pf + i + 16), _MM_HINT_T1);
      }
      __m512 a = exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
      __m512 b = exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vm));
      _mm512_storeu_ps(e + i, a);
      _mm512_storeu_ps(e + i + 16, b);
      s0 = _mm512_add_ps(s0, a);
      s1 = _mm512_add_ps(s1, b);
    }
    for (; i < end; i += 16) {
      __mmask16 k = end - i >= 16 ? __mmask16(0xffff) : first_lanes(end - i);
      // Lanes past the row are zeroed so they add nothing to the sum.
      __m512 a = _mm512_maskz_mov_ps(k, exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm)));
      _mm512_mask_storeu_ps(e + i, k, a);
      s0 = _mm512_add_ps(s0, a);
    }
    __m512 y = _mm512_sub_ps(_mm512_add_ps(s0, s1), comp);
    __m512 t = _mm512_add_ps(sum, y);
    comp = _mm512_sub_ps(_mm512_sub_ps(t, sum), y);
    sum = t;
  }
  return _mm512_reduce_add_ps(_mm512_sub_ps(sum, comp));
}

// y = e * scale. Streaming stores need 64-byte aligned addresses: the row's
// unaligned head goes through an ordinary masked store.
KILN_AVX512 void scale_out(const float* e, float scale, int64_t len, float* y, bool stream) {
  const __m512 vs = _mm512_set1_ps(scale);
  int64_t i = 0;
  if (stream) {
    int64_t head = (64 - reinterpret_cast<uintptr_t>(y) % 64) % 64 / sizeof(float);
    if (reinterpret_cast<uintptr_t>(y) % sizeof(float) != 0) head = len;  // never aligned: no streaming
    head = std::min(head, len);
    if (head > 0) {
      __mmask16 k = first_lanes(head);
      _mm512_mask_storeu_ps(y, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, e), vs));
    }
    for (i = head; i + 16 <= len; i += 16) _mm512_stream_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(e + i), vs));
  } else {
    for (; i + 16 <= len; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(e + i), vs));
  }
  if (i < len) {
    __mmask16 k = first_lanes(len - i);
    _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, e + i), vs));
  }
}

}  // namespace

KILN_AVX512 void softmax_rows_avx512(const float* in, float* out, int64_t rows, int64_t len, float* scratch,
                                     bool stream) {
  // Four rows at a time while they stay in L2 for the passes after the max.
  constexpr int64_t kFourRowsMaxLen = 16384;
  int64_t r = 0;
  for (; len <= kFourRowsMaxLen && r + 4 <= rows; r += 4) {
    float m[4];
    four_row_max(in + r * len, len, m);
    const bool more = r + 8 <= rows;
    for (int k = 0; k < 4; ++k) {
      float s = exp_and_sum(in + (r + k) * len, m[k], len, scratch, more ? in + (r + 4 + k) * len : nullptr);
      scale_out(scratch, 1.0f / s, len, out + (r + k) * len, stream);
    }
  }
  for (; r < rows; ++r) {
    const float* x = in + r * len;
    float m = row_max(x, len);
    float s = exp_and_sum(x, m, len, scratch, nullptr);
    scale_out(scratch, 1.0f / s, len, out + r * len, stream);
  }
  // Streaming stores are weakly ordered: make them visible before the
  // caller (another thread, after the parallel region) reads the output.
  if (stream) _mm_sfence();
}

}  // namespace kiln::cpu
