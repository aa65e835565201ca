#pragma once
// AVX-512 packing of K-contiguous lines (row-major A, column-major B: the
// x of every product and the w of x @ w.T), for the fp32 and bf16-pair
// panels whose 32-bit groups are [k][line] (see PackFn in gemm_internal.h).
//
// Why: that case is a transpose of 32-bit groups, which the portable
// packers (gemm_packing.h) do one group per store; with x @ w.T on bf16
// 512 x 4096 x 14336 the packing of w was ~10% of the product. Here 16
// lines x 16 groups are loaded, transposed in registers (64 shuffles) and
// stored as 16 rows of the panel.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cpu/avx512_target.h"
#include "backend/cpu/gemm_packing.h"
#include "backend/cpu/transpose_16x16_avx512.h"

namespace kiln::cpu::gemm_detail {

// dst[k * R + r] = 32-bit group k of line r (lines line_bytes apart), for
// k < groups; zero for len <= r < R.
template <int R>
KILN_AVX512 void pack_lines_epi32(const char* src, int64_t line_bytes, int64_t len, int64_t groups, uint32_t* dst) {
  for (int g = 0; g < R; g += 16) {
    const int lanes = std::min(16, R - g);
    const __mmask16 store_mask = static_cast<__mmask16>((1u << lanes) - 1u);
    for (int64_t k0 = 0; k0 < groups; k0 += 16) {
      const int kn = static_cast<int>(std::min<int64_t>(16, groups - k0));
      const __mmask16 load_mask = static_cast<__mmask16>((1u << kn) - 1u);
      __m512 r[16];  // 32-bit groups moved as floats (bits unchanged)
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        r[i] = g + i < len ? _mm512_maskz_loadu_ps(load_mask, src + (g + i) * line_bytes + k0 * 4)
                           : _mm512_setzero_ps();
      }
      transpose_16x16(r);
      for (int j = 0; j < kn; ++j) _mm512_mask_storeu_ps(dst + (k0 + j) * R + g, store_mask, r[j]);
    }
  }
}

// pack_f32_panel<float, R> with the K-contiguous case vectorized.
template <int R>
KILN_AVX512 void pack_f32_panel_avx512(const void* src, int64_t line_stride, int64_t k_stride, int64_t len,
                                       int64_t klen, void* dst) {
  if (k_stride != 1) return pack_f32_panel<float, R>(src, line_stride, k_stride, len, klen, dst);
  pack_lines_epi32<R>(static_cast<const char*>(src), line_stride * 4, len, klen, static_cast<uint32_t*>(dst));
}

// pack_bf16_pair_panel<R> with the K-contiguous case vectorized: there a
// pair (k, k + 1) of a line is already one 32-bit group.
template <int R>
KILN_AVX512 void pack_bf16_pair_panel_avx512(const void* src_v, int64_t line_stride, int64_t k_stride, int64_t len,
                                             int64_t klen, void* dst_v) {
  if (k_stride != 1) return pack_bf16_pair_panel<R>(src_v, line_stride, k_stride, len, klen, dst_v);
  const uint16_t* src = static_cast<const uint16_t*>(src_v);
  uint32_t* dst = static_cast<uint32_t*>(dst_v);
  const int64_t kfull = klen / 2;
  pack_lines_epi32<R>(reinterpret_cast<const char*>(src), line_stride * 2, len, kfull, dst);
  if (klen % 2 != 0) {
    // An odd K: the last group holds k alone, with a zero partner.
    for (int64_t r = 0; r < R; ++r) dst[kfull * R + r] = r < len ? src[r * line_stride + 2 * kfull] : 0u;
  }
}

}  // namespace kiln::cpu::gemm_detail
