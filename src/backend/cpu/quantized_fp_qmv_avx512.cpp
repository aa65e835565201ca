// Microscaling QMV with AVX-512 (16 lanes, a 32-value chunk is two
// vectors): the kernel text is quantized_fp_qmv.inc. fp4 decodes through
// one 16-entry permute of the code table; fp8 through vcvtph2ps.
// Measured by `kiln bench` rows qmv_mxfp4 / qmv_mxfp8 (drill D4).
#include <immintrin.h>

#include "backend/cpu/avx512_target.h"
#include "backend/cpu/quantized.h"

#define KILN_FP_QMV_TARGET KILN_AVX512

namespace kiln::cpu {
namespace {

struct FpAvx512 {
  static constexpr int L = 16;
  static constexpr int kVecs = 2;
  using f = __m512;
  struct Tables {
    __m512 lut;
  };
  KILN_AVX512 static Tables tables() {
    return {_mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f,
                           -4.0f, -6.0f)};
  }
  // fp4: lane j of vector 0 is byte j's low nibble (element 2j), of vector
  // 1 its high nibble; fp8: vector i holds elements 16i + j.
  static int element(int bits, int i, int j) { return bits == 4 ? 2 * j + i : 16 * i + j; }
  KILN_AVX512 static f zero() { return _mm512_setzero_ps(); }
  KILN_AVX512 static f load_f(const float* p) { return _mm512_loadu_ps(p); }
  KILN_AVX512 static f mul(f a, f b) { return _mm512_mul_ps(a, b); }
  KILN_AVX512 static f add(f a, f b) { return _mm512_add_ps(a, b); }
  KILN_AVX512 static f fma(f a, f b, f c) { return _mm512_fmadd_ps(a, b, c); }
  KILN_AVX512 static float hsum(f v) { return _mm512_reduce_add_ps(v); }
  // s0 scales elements 0-15 of the chunk, s1 elements 16-31.
  KILN_AVX512 static f scale_vec(int bits, int i, float s0, float s1) {
    if (bits == 8) return _mm512_set1_ps(i == 0 ? s0 : s1);
    return _mm512_insertf32x8(_mm512_set1_ps(s0), _mm256_set1_ps(s1), 1);
  }
  KILN_AVX512 static void decode4(const uint8_t* p, const Tables& t, f (&v)[kVecs]) {
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    v[0] = _mm512_permutexvar_ps(_mm512_and_si512(b, _mm512_set1_epi32(15)), t.lut);
    v[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), t.lut);
  }
  KILN_AVX512 static void decode8(const uint8_t* p, f (&v)[kVecs]) {
    __m512i h = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    __m512i mag = _mm512_slli_epi16(_mm512_and_si512(h, _mm512_set1_epi16(0x7f)), 7);
    __m512i sign = _mm512_slli_epi16(_mm512_and_si512(h, _mm512_set1_epi16(0x80)), 8);
    __m512i bits = _mm512_or_si512(mag, sign);
    // 0x7f / 0xff are NaN (a float16 NaN).
    __mmask32 nan = _mm512_cmpeq_epi16_mask(_mm512_and_si512(h, _mm512_set1_epi16(0x7f)), _mm512_set1_epi16(0x7f));
    bits = _mm512_mask_mov_epi16(bits, nan, _mm512_set1_epi16(0x7e00));
    v[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(bits));
    v[1] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(bits, 1));
  }
};

}  // namespace
}  // namespace kiln::cpu

#include "backend/cpu/quantized_fp_qmv.inc"

namespace kiln::cpu {
bool fp_qmv_avx512(const FpQmvArgs& a) { return fp_qmv_dispatch<FpAvx512>(a); }
}  // namespace kiln::cpu
