// QMV with AVX2 (8 words per load), for CPUs without AVX-512: the kernel
// text is quantized_qmv.inc.
#include <immintrin.h>

#include "backend/cpu/quantized.h"

#define KILN_QMV_TARGET

namespace kiln::cpu {
namespace {

struct Avx2 {
  static constexpr int L = 8;
  using f = __m256;
  using i = __m256i;
  static f zero() { return _mm256_setzero_ps(); }
  static i set1_i(unsigned v) { return _mm256_set1_epi32(static_cast<int>(v)); }
  static i load_i(const int* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static f load_f(const float* p) { return _mm256_loadu_ps(p); }
  static i load_words(const uint32_t* p, int64_t left) {
    if (left >= L) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)), lane);
    return _mm256_maskload_epi32(reinterpret_cast<const int*>(p), m);
  }
  template <int SHIFT, int BITS>
  static f unpack(i v, i mask) {
    if constexpr (SHIFT + BITS == 32) return _mm256_cvtepi32_ps(_mm256_srli_epi32(v, SHIFT));
    else if constexpr (SHIFT == 0) return _mm256_cvtepi32_ps(_mm256_and_si256(v, mask));
    else return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, SHIFT), mask));
  }
  static f fma(f a, f b, f c) { return _mm256_fmadd_ps(a, b, c); }
  static f add(f a, f b) { return _mm256_add_ps(a, b); }
  static f permute(f v, i idx) { return _mm256_permutevar8x32_ps(v, idx); }
  static float hsum(f v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

}  // namespace
}  // namespace kiln::cpu

#include "backend/cpu/quantized_qmv.inc"

namespace kiln::cpu {
bool qmv_avx2(const QmvArgs& a) { return qmv_dispatch<Avx2>(a); }
}  // namespace kiln::cpu
