// Affine dequantization with AVX-512: the `dequantize` op and the weight
// panels of the QMM path (quantized.cpp), bits 2, 4 and 8.
//
// Why: the scalar unpack-and-scale loop ran at ~0.8 G weights/s on this
// project's 2-core machines (4-bit 14336 x 4096 in ~70 ms, bound by its
// instructions, not by memory), a third of `quantized_matmul` at M = 512
// (`kiln bench` row qmm_affine4). Here a step is 16 values: the bits / 2
// words holding them are loaded (masked, so never past a row), spread to
// the lanes by one permute, shifted per lane and masked, converted; then
// MLX's rounding, the same as the scalar path bit for bit: the product
// s * q rounded to T, then the sum with the bias rounded to T.
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/avx512_target.h"
#include "backend/cpu/gemm_avx512_store.h"
#include "backend/cpu/quantized.h"

namespace kiln::cpu {
namespace {

// T-specific rounding and stores of 16 lanes.
template <typename T>
struct Lanes;

template <>
struct Lanes<float> {
  // No rounding, but the product must not fuse with the sum into an fma
  // (GCC contracts the vector operators the intrinsics are made of).
  KILN_AVX512 static __m512 round(__m512 v) {
    asm("" : "+v"(v));
    return v;
  }
  KILN_AVX512 static void store(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
  static float widen(float v) { return v; }
};

template <>
struct Lanes<bfloat16_t> {
  KILN_AVX512 static __m512 round(__m512 v) { return vec::round_bf16(v); }
  KILN_AVX512 static __m256i bits(__m512 v) { return gemm_detail::round_to_bf16(v); }
  KILN_AVX512 static void store(bfloat16_t* p, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bits(v));
  }
  static float widen(bfloat16_t v) { return bfloat16_t::to_float(v.bits); }
};

template <>
struct Lanes<float16_t> {
  KILN_AVX512 static __m512 round(__m512 v) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  KILN_AVX512 static __m256i bits(__m512 v) {
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  KILN_AVX512 static void store(float16_t* p, __m512 v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bits(v)); }
  static float widen(float16_t v) { return float16_t::to_float(v.bits); }
};

template <typename T, int BITS>
KILN_AVX512 void rows_kernel(const uint32_t* w, const T* scales, const T* biases, int64_t rows, int64_t K,
                             int group_size, T* out, int64_t ldo) {
  constexpr int kWords = BITS / 2;  // words holding 16 values
  alignas(64) int idx[16], shift[16];
  for (int i = 0; i < 16; ++i) {
    idx[i] = i * BITS / 32;
    shift[i] = i * BITS % 32;
  }
  const __m512i vidx = _mm512_load_si512(idx), vshift = _mm512_load_si512(shift);
  const __m512i mask = _mm512_set1_epi32((1 << BITS) - 1);
  const __mmask16 load_mask = static_cast<__mmask16>((1u << kWords) - 1u);
  const int64_t G = K / group_size, words = K * BITS / 32;
  for (int64_t r = 0; r < rows; ++r) {
    const uint32_t* wr = w + r * words;
    T* o = out + r * ldo;
    for (int64_t g = 0; g < G; ++g) {
      const __m512 s = _mm512_set1_ps(Lanes<T>::widen(scales[r * G + g]));
      const __m512 b = _mm512_set1_ps(Lanes<T>::widen(biases[r * G + g]));
      for (int64_t k = g * group_size; k < (g + 1) * group_size; k += 16) {
        __m512i v = _mm512_maskz_loadu_epi32(load_mask, wr + k / 16 * kWords);
        v = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(vidx, v), vshift), mask);
        __m512 prod = Lanes<T>::round(_mm512_mul_ps(_mm512_cvtepi32_ps(v), s));
        Lanes<T>::store(o + k, _mm512_add_ps(prod, b));
      }
    }
  }
}

// Bits 2 and 4 into a 16-bit type: a group's values are a function of q
// alone, at most 16 of them, so the arithmetic above runs once per group
// on q = 0 .. 15 (the same lanes, the same roundings: bit for bit) into a
// table, and a step of 32 values is a load, a spread of 16-bit words, a
// shift, a mask and one vpermw lookup: ~6 instructions per 32 values
// against ~18 per 16 (session 38, AMX Xeon, 2 threads: `dequantize` of a
// 4-bit 14336 x 4096 into bf16 8.8-9.3 -> 5.6-6.6 ms, the rest mostly the
// output's writes and page faults).
template <typename T, int BITS>
KILN_AVX512 void rows_kernel_table(const uint32_t* w, const T* scales, const T* biases, int64_t rows, int64_t K,
                                   int group_size, T* out, int64_t ldo) {
  static_assert(sizeof(T) == 2 && (BITS == 2 || BITS == 4));
  constexpr int kPerWord = 16 / BITS;    // values in a 16-bit word
  constexpr int kWords = 32 / kPerWord;  // 16-bit words holding 32 values
  alignas(64) int16_t idx[32], shift[32];
  alignas(64) float q[16];
  for (int i = 0; i < 32; ++i) {
    idx[i] = static_cast<int16_t>(i / kPerWord);
    shift[i] = static_cast<int16_t>(i % kPerWord * BITS);
  }
  for (int i = 0; i < 16; ++i) q[i] = static_cast<float>(i);
  const __m512i vidx = _mm512_load_si512(idx), vshift = _mm512_load_si512(shift);
  const __m512i mask = _mm512_set1_epi16((1 << BITS) - 1);
  const __m512 qv = _mm512_load_ps(q);
  const __mmask32 load_mask = static_cast<__mmask32>((1u << kWords) - 1u);
  const int64_t G = K / group_size, words = K * BITS / 32;
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* wr = reinterpret_cast<const uint16_t*>(w + r * words);
    T* o = out + r * ldo;
    for (int64_t g = 0; g < G; ++g) {
      const __m512 s = _mm512_set1_ps(Lanes<T>::widen(scales[r * G + g]));
      const __m512 b = _mm512_set1_ps(Lanes<T>::widen(biases[r * G + g]));
      const __m512 value = _mm512_add_ps(Lanes<T>::round(_mm512_mul_ps(qv, s)), b);
      const __m512i table = _mm512_zextsi256_si512(Lanes<T>::bits(value));
      for (int64_t k = g * group_size; k < (g + 1) * group_size; k += 32) {
        __m512i v = _mm512_maskz_loadu_epi16(load_mask, wr + k / kPerWord);
        v = _mm512_and_si512(_mm512_srlv_epi16(_mm512_permutexvar_epi16(vidx, v), vshift), mask);
        _mm512_storeu_si512(o + k, _mm512_permutexvar_epi16(v, table));
      }
    }
  }
}

}  // namespace

template <typename T>
bool dequantize_rows_avx512(const uint32_t* w, const T* scales, const T* biases, int64_t rows, int64_t K, int bits,
                            int group_size, T* out, int64_t ldo) {
  if (group_size % 16 != 0 || K % group_size != 0) return false;
  if constexpr (sizeof(T) == 2) {
    if (group_size % 32 == 0 && bits == 2)
      return rows_kernel_table<T, 2>(w, scales, biases, rows, K, group_size, out, ldo), true;
    if (group_size % 32 == 0 && bits == 4)
      return rows_kernel_table<T, 4>(w, scales, biases, rows, K, group_size, out, ldo), true;
  }
  switch (bits) {
    case 2: rows_kernel<T, 2>(w, scales, biases, rows, K, group_size, out, ldo); return true;
    case 4: rows_kernel<T, 4>(w, scales, biases, rows, K, group_size, out, ldo); return true;
    case 8: rows_kernel<T, 8>(w, scales, biases, rows, K, group_size, out, ldo); return true;
    default: return false;
  }
}

template bool dequantize_rows_avx512<float>(const uint32_t*, const float*, const float*, int64_t, int64_t, int, int,
                                            float*, int64_t);
template bool dequantize_rows_avx512<bfloat16_t>(const uint32_t*, const bfloat16_t*, const bfloat16_t*, int64_t,
                                                 int64_t, int, int, bfloat16_t*, int64_t);
template bool dequantize_rows_avx512<float16_t>(const uint32_t*, const float16_t*, const float16_t*, int64_t,
                                                int64_t, int, int, float16_t*, int64_t);

}  // namespace kiln::cpu
