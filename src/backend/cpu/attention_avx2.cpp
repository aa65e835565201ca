// The attention kernel (attention_kernel.inc) for AVX2 (8 float lanes; the
// library's baseline, x86-64-v3, includes F16C for the fp16 loads) and for
// plain scalar code (1 lane: the KILN_CPU_TARGET=scalar path).
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

namespace kiln::cpu {
namespace attention_avx2 {

struct Vec {
  static constexpr int W = 8;
  using R = __m256;
  static R zero() { return _mm256_setzero_ps(); }
  static R set1(float x) { return _mm256_set1_ps(x); }
  static R load(const float* p) { return _mm256_loadu_ps(p); }
  static R load(const bfloat16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static R load(const float16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static void store(float* p, R x) { _mm256_storeu_ps(p, x); }
  static R fmadd(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R add(R a, R b) { return _mm256_add_ps(a, b); }
  static R max(R a, R b) { return _mm256_max_ps(a, b); }
  static float sum(R x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

#include "backend/cpu/attention_kernel.inc"

}  // namespace attention_avx2

namespace attention_scalar {

struct Vec {
  static constexpr int W = 1;
  using R = float;
  static R zero() { return 0.0f; }
  static R set1(float x) { return x; }
  template <typename T>
  static R load(const T* p) {
    if constexpr (std::is_same_v<T, float>) return *p;
    else if constexpr (std::is_same_v<T, bfloat16_t>) return simd::bf16_to_float(p->bits);
    else return simd::f16_to_float(p->bits);
  }
  static void store(float* p, R x) { *p = x; }
  static R fmadd(R a, R b, R c) { return std::fma(a, b, c); }
  static R mul(R a, R b) { return a * b; }
  static R add(R a, R b) { return a + b; }
  static R max(R a, R b) { return std::max(a, b); }
  static float sum(R x) { return x; }
};

#include "backend/cpu/attention_kernel.inc"

}  // namespace attention_scalar

void sdpa_avx2(const SdpaArgs& a) { attention_avx2::sdpa_entry(a); }
void sdpa_scalar(const SdpaArgs& a) { attention_scalar::sdpa_entry(a); }

}  // namespace kiln::cpu
