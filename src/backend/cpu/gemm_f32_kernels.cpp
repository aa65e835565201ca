// fp32 micro-kernels and their cache blocking.
//
// AVX-512: 14 x 32 tile (and 8 x 48 for small M, below). 28 zmm accumulators + 2 zmm for the B row; the A
// values are broadcast straight from memory into the FMAs (embedded
// broadcast), so 30 of the 32 registers hold live data. Per k: 2 loads of B,
// 14 broadcasts, 28 FMAs - enough independent FMAs (>= 2 ports x 4 cycles
// latency) to keep both FMA pipes busy.
//
// AVX2: the classic 6 x 16 tile (12 ymm accumulators + 2 B + 1 broadcast of
// the 16 ymm registers).
#include <immintrin.h>

#include "backend/cpu/gemm_avx512_store.h"
#include "backend/cpu/gemm_internal.h"
#include "backend/cpu/gemm_pack_avx512.h"
#include "backend/cpu/gemm_packing.h"

namespace kiln::cpu::gemm_detail {
namespace {

constexpr int kMr512 = 14, kNr512 = 32;
constexpr int kMrSmall = 8, kNrSmall = 48;
constexpr int kMr256 = 6, kNr256 = 16;

// MR x 16 NV tile: 14 x 32 (NV = 2) in general, 8 x 48 (NV = 3: 24
// accumulators, 3 B vectors) where M is small: M = 16 in 14-row tiles
// computed 28 rows (1.75x the work), in 8-row tiles exactly 16.
template <int MR, int NV>
KILN_TARGET_AVX512 void kernel_f32_avx512(int64_t kc, const void* a_v, const void* b_v, void* c_v, int64_t ldc, int mr,
                                          int nr, int mode) {
  constexpr int NR = 16 * NV;
  const float* a = static_cast<const float*>(a_v);
  const float* b = static_cast<const float*>(b_v);
  const int64_t cbytes = mode == kStoreBf16 ? 2 : 4;
  char* c = static_cast<char*>(c_v);
#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i) {
    if (i < mr) {
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) _mm_prefetch(c + i * ldc * cbytes + 64 * v, _MM_HINT_T0);
    }
  }
  __m512 acc[MR][NV];
#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();

#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    __m512 bv[NV];
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_ps(b + 16 * v);
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) {
      __m512 ai = _mm512_set1_ps(a[i]);
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
    }
    a += MR;
    b += NR;
  }

#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i) {
    if (i < mr) {
      char* row = c + i * ldc * cbytes;
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) {
        const __mmask16 m = vec_mask(nr, v);
        if (m) store_tile_segment(row + 16 * v * cbytes, acc[i][v], m, mode);
      }
    }
  }
}

void store_scalar(void* c, int64_t ldc, int i, int j, float v, int mode) {
  if (mode == kStoreBf16) {
    static_cast<bfloat16_t*>(c)[i * ldc + j] = bfloat16_t(v);
  } else if (mode == kAccumulateF32) {
    static_cast<float*>(c)[i * ldc + j] += v;
  } else {
    static_cast<float*>(c)[i * ldc + j] = v;
  }
}

// Built for the library's baseline ISA (x86-64-v3), so no target attribute.
void kernel_f32_avx2_6x16(int64_t kc, const void* a_v, const void* b_v, void* c_v, int64_t ldc, int mr, int nr,
                          int mode) {
  const float* a = static_cast<const float*>(a_v);
  const float* b = static_cast<const float*>(b_v);
  __m256 acc[kMr256][2];
#pragma GCC unroll 6
  for (int i = 0; i < kMr256; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < kMr256; ++i) {
      __m256 ai = _mm256_broadcast_ss(a + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += kMr256;
    b += kNr256;
  }
  if (mr == kMr256 && nr == kNr256 && mode != kStoreBf16) {
    float* c = static_cast<float*>(c_v);
#pragma GCC unroll 6
    for (int i = 0; i < kMr256; ++i) {
      float* row = c + i * ldc;
      if (mode == kAccumulateF32) {
        acc[i][0] = _mm256_add_ps(acc[i][0], _mm256_loadu_ps(row));
        acc[i][1] = _mm256_add_ps(acc[i][1], _mm256_loadu_ps(row + 8));
      }
      _mm256_storeu_ps(row, acc[i][0]);
      _mm256_storeu_ps(row + 8, acc[i][1]);
    }
    return;
  }
  alignas(32) float tile[kMr256][kNr256];
#pragma GCC unroll 6
  for (int i = 0; i < kMr256; ++i) {
    _mm256_store_ps(tile[i], acc[i][0]);
    _mm256_store_ps(tile[i] + 8, acc[i][1]);
  }
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) store_scalar(c_v, ldc, i, j, tile[i][j], mode);
}

}  // namespace

// Block sizes (elements). Machine: 48 KB L1d, 2 MB L2 per core (Sapphire
// Rapids-class; the same numbers suit Zen 4's 32 KB / 1 MB within a few %).
//  KC: the B micro-panel (KC x 32 fp32 = 32 KB at KC=256) must stay in L1
//      while A micro-panels stream past it.
//  MC: the packed A block (MC x KC) sits in L2 with room for B traffic;
//      12 panels of 14 rows x 256 x 4 B = 172 KB .. see tuning notes in
//      the report; larger MC amortises B micro-panel reloads.
//  NC: the shared packed B panel (KC x NC) lives in L3.
const KernelSpec& f32_avx512_spec() {
  static const KernelSpec s{"f32_avx512_14x32", kMr512, kNr512, 256, 14 * 24, 4096, 1, 4, 4,
                            kernel_f32_avx512<kMr512, 2>, pack_f32_panel_avx512<kMr512>,
                            pack_f32_panel_avx512<kNr512>};
  return s;
}

// The 8 x 48 tile for small M: a KC x 48 B micro-panel of 160 rows is 30 KB
// (L1 of a Zen 4 core is 32 KB); NC a multiple of 48.
const KernelSpec& f32_avx512_small_m_spec() {
  static const KernelSpec s{"f32_avx512_8x48", kMrSmall, kNrSmall, 160, 8 * 24, 4080, 1, 4, 4,
                            kernel_f32_avx512<kMrSmall, 3>, pack_f32_panel_avx512<kMrSmall>,
                            pack_f32_panel_avx512<kNrSmall>};
  return s;
}

const KernelSpec& bf16_to_f32_avx512_spec() {
  static const KernelSpec s{"bf16_as_f32_avx512_14x32", kMr512, kNr512, 256, 14 * 24, 4096, 1, 4, 2,
                            kernel_f32_avx512<kMr512, 2>, pack_f32_panel<bfloat16_t, kMr512>,
                            pack_f32_panel<bfloat16_t, kNr512>};
  return s;
}

// Haswell-era BLIS blocking for the 6x16 kernel: B micro-panel 256 x 16 x 4
// = 16 KB (half of a 32 KB L1), A block 168 x 256 x 4 = 168 KB.
const KernelSpec& f32_avx2_spec() {
  static const KernelSpec s{"f32_avx2_6x16", kMr256, kNr256, 256, 168, 4080, 1, 4, 4,
                            kernel_f32_avx2_6x16, pack_f32_panel<float, kMr256>, pack_f32_panel<float, kNr256>};
  return s;
}

const KernelSpec& bf16_to_f32_avx2_spec() {
  static const KernelSpec s{"bf16_as_f32_avx2_6x16", kMr256, kNr256, 256, 168, 4080, 1, 4, 2,
                            kernel_f32_avx2_6x16, pack_f32_panel<bfloat16_t, kMr256>,
                            pack_f32_panel<bfloat16_t, kNr256>};
  return s;
}

}  // namespace kiln::cpu::gemm_detail
