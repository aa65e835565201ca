#pragma once
// Tile write-out shared by the AVX-512 micro-kernels (fp32 and bf16): one
// 16-lane row segment of C, masked so edge tiles need no scratch copy.
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/gemm_internal.h"
#include "backend/cpu/vec_math_avx512.h"

// GCC 12's AVX-512 headers seed unmasked intrinsics with _mm512_undefined_*(),
// which -Wall reports as use of uninitialised values once inlined (GCC PR
// 105593, fixed in 12.3). Silenced for the GEMM files that include this.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define KILN_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define KILN_TARGET_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace kiln::cpu::gemm_detail {

// float -> bf16 bits with round-to-nearest-even, NaN kept quiet; the same
// rule as kiln::bfloat16_t::from_float (vcvtneps2bf16 would flush
// denormals, so it is not used here).
KILN_TARGET_AVX512 inline __m256i round_to_bf16(__m512 v) { return vec::to_bf16(v); }

// Writes 16 (masked) values of a tile row at c (float* or bfloat16_t*).
KILN_TARGET_AVX512 inline void store_tile_segment(void* c, __m512 v, __mmask16 mask, int mode) {
  if (mode == kStoreF32) {
    _mm512_mask_storeu_ps(c, mask, v);
  } else if (mode == kAccumulateF32) {
    __m512 old = _mm512_mask_loadu_ps(_mm512_setzero_ps(), mask, c);
    _mm512_mask_storeu_ps(c, mask, _mm512_add_ps(old, v));
  } else {
    _mm256_mask_storeu_epi16(c, mask, round_to_bf16(v));
  }
}

// Lane mask of the 16-wide vector v of a tile holding nr columns.
inline __mmask16 vec_mask(int nr, int v) {
  const int n = nr - 16 * v;
  return static_cast<__mmask16>(n >= 16 ? 0xffffu : n > 0 ? (1u << n) - 1u : 0u);
}

// Lane masks for the two 16-wide halves of a 32-wide tile holding nr columns.
inline void half_masks(int nr, __mmask16* m0, __mmask16* m1) {
  *m0 = static_cast<__mmask16>(nr >= 16 ? 0xffffu : (1u << nr) - 1u);
  *m1 = static_cast<__mmask16>(nr >= 32 ? 0xffffu : nr > 16 ? (1u << (nr - 16)) - 1u : 0u);
}

}  // namespace kiln::cpu::gemm_detail
