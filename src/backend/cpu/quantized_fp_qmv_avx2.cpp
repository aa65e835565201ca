// Microscaling QMV with AVX2 + F16C (8 lanes, a 32-value chunk is four
// vectors), for CPUs without AVX-512: the kernel text is
// quantized_fp_qmv.inc. fp4 decodes through an 8-entry permute of the
// magnitudes and the code's sign bit moved to bit 31; fp8 through vcvtph2ps.
#include <immintrin.h>

#include "backend/cpu/quantized.h"

#define KILN_FP_QMV_TARGET

namespace kiln::cpu {
namespace {

struct FpAvx2 {
  static constexpr int L = 8;
  static constexpr int kVecs = 4;
  using f = __m256;
  using i = __m256i;
  struct Tables {
    __m256 mag;
  };
  static Tables tables() { return {_mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f)}; }
  // fp4: vectors 2h and 2h + 1 are the low and high nibbles of bytes
  // 8h..8h+7 (elements 16h + 2j and 16h + 2j + 1); fp8: vector i holds
  // elements 8i + j.
  static int element(int bits, int v, int j) { return bits == 4 ? 16 * (v / 2) + 2 * j + v % 2 : 8 * v + j; }
  static f zero() { return _mm256_setzero_ps(); }
  static f load_f(const float* p) { return _mm256_loadu_ps(p); }
  static f mul(f a, f b) { return _mm256_mul_ps(a, b); }
  static f add(f a, f b) { return _mm256_add_ps(a, b); }
  static f fma(f a, f b, f c) { return _mm256_fmadd_ps(a, b, c); }
  static float hsum(f v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // s0 scales elements 0-15 of the chunk (vectors 0, 1), s1 elements 16-31.
  static f scale_vec(int, int v, float s0, float s1) { return _mm256_set1_ps(v < 2 ? s0 : s1); }
  static f lookup(i code, const Tables& t) {
    __m256 mag = _mm256_permutevar8x32_ps(t.mag, code);
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(code, _mm256_set1_epi32(8)), 28);
    return _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
  }
  static void decode4(const uint8_t* p, const Tables& t, f (&v)[kVecs]) {
    for (int h = 0; h < 2; ++h) {
      i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * h)));
      v[2 * h] = lookup(_mm256_and_si256(b, _mm256_set1_epi32(15)), t);
      v[2 * h + 1] = lookup(_mm256_srli_epi32(b, 4), t);
    }
  }
  static void decode8(const uint8_t* p, f (&v)[kVecs]) {
    for (int h = 0; h < 2; ++h) {
      i u = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
      i mag = _mm256_slli_epi16(_mm256_and_si256(u, _mm256_set1_epi16(0x7f)), 7);
      i sign = _mm256_slli_epi16(_mm256_and_si256(u, _mm256_set1_epi16(0x80)), 8);
      i bits = _mm256_or_si256(mag, sign);
      // 0x7f / 0xff are NaN (a float16 NaN).
      i nan = _mm256_cmpeq_epi16(_mm256_and_si256(u, _mm256_set1_epi16(0x7f)), _mm256_set1_epi16(0x7f));
      bits = _mm256_blendv_epi8(bits, _mm256_set1_epi16(0x7e00), nan);
      v[2 * h] = _mm256_cvtph_ps(_mm256_castsi256_si128(bits));
      v[2 * h + 1] = _mm256_cvtph_ps(_mm256_extracti128_si256(bits, 1));
    }
  }
};

}  // namespace
}  // namespace kiln::cpu

#include "backend/cpu/quantized_fp_qmv.inc"

namespace kiln::cpu {
bool fp_qmv_avx2(const FpQmvArgs& a) { return fp_qmv_dispatch<FpAvx2>(a); }
}  // namespace kiln::cpu
