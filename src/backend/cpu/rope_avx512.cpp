// fast::rope's rows over a shared cos / sin table (rope.cpp) in AVX-512,
// float32 and bfloat16, both layouts.
//
// Why: the library's portable rotation is compiled for AVX2, and for
// bfloat16 its conversions (a widening, a shift, then ten integer ops to
// round back) made the row compute-bound: `kiln bench` rope bf16 [1, 32,
// 4096, 128] ran at 0.42 of the roofline, slower than float32 for half the
// bytes (perf: the rounding's vpand / vpsrld / vpblendvb on top). Here a
// row is 16 lanes a step, bf16 rounds with vcvtneps2bf16 where the CPU has
// it (vec_math_avx512.inc), and the interleaved (traditional) layout
// rotates pairs in place: lanes swapped within pairs (vpermilps), cos / sin
// duplicated per pair (vpermps), the sine's sign alternating.
//
// The values are rope.cpp's rotate_row's, bit for bit: y1 = fma(x1, c,
// -(x2 s)), y2 = fma(x2, c, x1 s), rounded once to the output type
// (tests/test_fast_norm.cpp, FastRope.EveryKernelLevelGivesTheSameBits).
#include "backend/cpu/rope_avx512.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backend/cpu/avx512_target.h"
#include "backend/cpu/stream_store.h"
#include "backend/cpu/vec_math_avx512.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")

namespace kiln::cpu {
namespace {

inline __m512 load(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load(const uint16_t* p, __mmask16 m) { return vec::load_bf16(p, m); }

template <bool kNative>
inline void store(float* p, __m512 v, __mmask16 m) {
  _mm512_mask_storeu_ps(p, m, v);
}
template <bool kNative>
inline void store(uint16_t* p, __m512 v, __mmask16 m) {
  if constexpr (kNative)
    _mm256_mask_storeu_epi16(p, m, vec::to_bf16_native(v));
  else
    _mm256_mask_storeu_epi16(p, m, vec::to_bf16(v));
}

// One row: its first dims features rotated by (cf, sf), the rest copied.
template <bool kTraditional, bool kNative, typename T>
inline void rotate_row(const T* xr, T* yr, int64_t d, int dims, const float* cf, const float* sf) {
  const int half = dims / 2;
  if constexpr (kTraditional) {
    const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512 even_negative =
        _mm512_castsi512_ps(_mm512_set_epi32(0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0,
                                             INT32_MIN, 0, INT32_MIN, 0, INT32_MIN));
    for (int j = 0; j < dims; j += 16) {
      const __mmask16 m = vec::lanes(dims - j);
      const __mmask8 m8 = static_cast<__mmask8>(vec::lanes((dims - j) / 2));
      const __m512 x = load(xr + j, m);
      const __m512 c = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_maskz_loadu_ps(m8, cf + j / 2)));
      const __m512 s = _mm512_xor_ps(
          _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_maskz_loadu_ps(m8, sf + j / 2))), even_negative);
      const __m512 swapped = _mm512_permute_ps(x, 0xB1);  // (x2, x1) in each pair
      store<kNative>(yr + j, _mm512_fmadd_ps(x, c, _mm512_mul_ps(swapped, s)), m);
    }
  } else {
    for (int i = 0; i < half; i += 16) {
      const __mmask16 m = vec::lanes(half - i);
      const __m512 x1 = load(xr + i, m), x2 = load(xr + half + i, m);
      const __m512 c = _mm512_maskz_loadu_ps(m, cf + i), s = _mm512_maskz_loadu_ps(m, sf + i);
      store<kNative>(yr + i, _mm512_fmsub_ps(x1, c, _mm512_mul_ps(x2, s)), m);
      store<kNative>(yr + half + i, _mm512_fmadd_ps(x2, c, _mm512_mul_ps(x1, s)), m);
    }
  }
  if (yr != xr && d > dims) std::memcpy(yr + dims, xr + dims, (d - dims) * sizeof(T));
}

template <bool kTraditional, bool kNative, typename T>
void rows(const T* x, T* y, int64_t row_begin, int64_t row_end, int64_t T_len, int64_t d, int dims, const float* cf,
          const float* sf, bool stream) {
  const int half = dims / 2;
  if (stream && x != y && d * static_cast<int64_t>(sizeof(T)) <= 4096) {
    alignas(64) T buf[4096 / sizeof(T)];
    for (int64_t r = row_begin; r < row_end; ++r) {
      const int64_t t = r % T_len;
      rotate_row<kTraditional, kNative>(x + r * d, buf, d, dims, cf + t * half, sf + t * half);
      stream_bytes(y + r * d, buf, d * sizeof(T));
    }
    stream_fence();
    return;
  }
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t t = r % T_len;
    rotate_row<kTraditional, kNative>(x + r * d, y + r * d, d, dims, cf + t * half, sf + t * half);
  }
}

template <typename T>
void dispatch(const RopeTableRows& a, bool native) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  auto go = [&](auto traditional, auto nat) {
    rows<decltype(traditional)::value, decltype(nat)::value>(x, y, a.row_begin, a.row_end, a.T_len, a.d, a.dims, a.cf,
                                                             a.sf, a.stream);
  };
  using F = std::false_type;
  using Tr = std::true_type;
  if (a.traditional)
    native ? go(Tr{}, Tr{}) : go(Tr{}, F{});
  else
    native ? go(F{}, Tr{}) : go(F{}, F{});
}

}  // namespace

bool rope_table_rows_avx512(Dtype t, const RopeTableRows& a, bool bf16_instructions) {
  if (t == float32)
    dispatch<float>(a, false);
  else if (t == bfloat16)
    dispatch<uint16_t>(a, bf16_instructions);
  else
    return false;
  return true;
}

}  // namespace kiln::cpu

#pragma GCC pop_options
