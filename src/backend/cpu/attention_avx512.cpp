// The attention kernel (attention_kernel.inc) compiled for AVX-512: 16
// float lanes, 16-bit K/V widened in registers.
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/simd_math.h"
#include "backend/cpu/threading.h"
#include "kiln/error.h"

#include "backend/cpu/avx512_target.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=512")

namespace kiln::cpu {
namespace attention_avx512 {

struct Vec {
  static constexpr int W = 16;
  using R = __m512;
  static R zero() { return _mm512_setzero_ps(); }
  static R set1(float x) { return _mm512_set1_ps(x); }
  static R load(const float* p) { return _mm512_loadu_ps(p); }
  static R load(const bfloat16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static R load(const float16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static void store(float* p, R x) { _mm512_storeu_ps(p, x); }
  static R fmadd(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R add(R a, R b) { return _mm512_add_ps(a, b); }
  static R max(R a, R b) { return _mm512_max_ps(a, b); }
  static float sum(R x) { return _mm512_reduce_add_ps(x); }
};

#include "backend/cpu/attention_kernel.inc"

}  // namespace attention_avx512

void sdpa_avx512(const SdpaArgs& a) { attention_avx512::sdpa_entry(a); }

}  // namespace kiln::cpu

#pragma GCC pop_options
