// QMV with AVX-512 (16 words per load): the kernel text is quantized_qmv.inc.
// Measured by `kiln bench` rows qmv_affine4 / qmv_affine8 (drill D4).
#include <immintrin.h>

#include "backend/cpu/avx512_target.h"
#include "backend/cpu/quantized.h"

#define KILN_QMV_TARGET KILN_AVX512

namespace kiln::cpu {
namespace {

struct Avx512 {
  static constexpr int L = 16;
  using f = __m512;
  using i = __m512i;
  KILN_AVX512 static f zero() { return _mm512_setzero_ps(); }
  KILN_AVX512 static i set1_i(unsigned v) { return _mm512_set1_epi32(static_cast<int>(v)); }
  KILN_AVX512 static i load_i(const int* p) { return _mm512_loadu_si512(p); }
  KILN_AVX512 static f load_f(const float* p) { return _mm512_loadu_ps(p); }
  // `left` words remain in the row: the last chunk loads only those (the
  // other lanes are zero).
  KILN_AVX512 static i load_words(const uint32_t* p, int64_t left) {
    if (left >= L) return _mm512_loadu_si512(p);
    return _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << left) - 1u), p);
  }
  template <int SHIFT, int BITS>
  KILN_AVX512 static f unpack(i v, i mask) {
    // The top value of a word needs no mask.
    if constexpr (SHIFT + BITS == 32) return _mm512_cvtepi32_ps(_mm512_srli_epi32(v, SHIFT));
    else if constexpr (SHIFT == 0) return _mm512_cvtepi32_ps(_mm512_and_si512(v, mask));
    else return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, SHIFT), mask));
  }
  KILN_AVX512 static f fma(f a, f b, f c) { return _mm512_fmadd_ps(a, b, c); }
  KILN_AVX512 static f add(f a, f b) { return _mm512_add_ps(a, b); }
  KILN_AVX512 static f permute(f v, i idx) { return _mm512_permutexvar_ps(idx, v); }
  KILN_AVX512 static float hsum(f v) { return _mm512_reduce_add_ps(v); }
};

}  // namespace
}  // namespace kiln::cpu

#include "backend/cpu/quantized_qmv.inc"

namespace kiln::cpu {
bool qmv_avx512(const QmvArgs& a) { return qmv_dispatch<Avx512>(a); }
}  // namespace kiln::cpu
