// bf16 GEMM on Intel AMX tiles (Sapphire Rapids and later).
//
// One micro-kernel call computes a 32 x 32 fp32 tile of C as 2 x 2 AMX
// accumulator tiles (tmm0-3, 16 rows x 16 fp32 each). Per 32-wide slice of K
// it loads two A tiles (tmm4-5: 16 rows x 32 bf16) and two B tiles
// (tmm6-7: 16 k-pairs x 16 columns x 2 bf16) and issues four tdpbf16ps;
// each A and B tile feeds two products. On the development VM this runs at
// ~390 GFLOP/s per core from L1, against ~105 for fp32 FMAs and ~52 for
// vdpbf16ps (which Intel cores execute at a quarter of the FMA rate).
//
// Packed layouts (K padded with zeros to a multiple of 32):
//  A micro-panel: [K/32][32 rows][32 k] bf16 - each A tile is 16 rows of
//                 64 contiguous bytes (stride 64).
//  B micro-panel: [K/2 pairs][32 columns][2 k] - the same VNNI pair layout
//                 as the vdpbf16ps kernel; B tile j is columns 16j..16j+15,
//                 rows of 64 bytes at stride 128.
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/gemm_avx512_store.h"
#include "backend/cpu/gemm_internal.h"
#include "backend/cpu/gemm_packing.h"

#define KILN_TARGET_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))

namespace kiln::cpu::gemm_detail {
namespace {

constexpr int kMr = 32, kNr = 32, kKAlign = 32;

struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];  // bytes per row of each tile register
  uint8_t rows[16];
};

// Every tile used is 16 rows x 64 bytes.
KILN_TARGET_AMX void amx_thread_begin() {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof(cfg));
  cfg.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  // GCC 12 does not model ldtilecfg reading memory and drops the stores
  // above without this barrier.
  __asm__ volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

KILN_TARGET_AMX void amx_thread_end() { _tile_release(); }

KILN_TARGET_AMX void kernel_bf16_amx_32x32(int64_t kc_padded, const void* a_v, const void* b_v, void* c_v,
                                           int64_t ldc, int mr, int nr, int mode) {
  const char* a = static_cast<const char*>(a_v);
  const char* b = static_cast<const char*>(b_v);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const int64_t kblocks = kc_padded / kKAlign;
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    const char* ak = a + kb * (kMr * kKAlign * 2);
    const char* bk = b + kb * (kKAlign / 2 * kNr * 4);
    _tile_loadd(4, ak, 64);
    _tile_loadd(6, bk, 128);
    _tile_loadd(7, bk + 64, 128);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, ak + 16 * 64, 64);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float tile[kMr][kNr];
  _tile_stored(0, &tile[0][0], kNr * 4);
  _tile_stored(1, &tile[0][16], kNr * 4);
  _tile_stored(2, &tile[16][0], kNr * 4);
  _tile_stored(3, &tile[16][16], kNr * 4);

  const int64_t cbytes = mode == kStoreBf16 ? 2 : 4;
  char* c = static_cast<char*>(c_v);
  __mmask16 m0, m1;
  half_masks(nr, &m0, &m1);
  for (int i = 0; i < mr; ++i) {
    char* row = c + i * ldc * cbytes;
    store_tile_segment(row, _mm512_load_ps(tile[i]), m0, mode);
    if (m1) store_tile_segment(row + 16 * cbytes, _mm512_load_ps(tile[i] + 16), m1, mode);
  }
}

// A rows as [K/32][32 rows][32 k]; zero rows past len, zero k past klen.
void pack_amx_a(const void* src_v, int64_t line_stride, int64_t k_stride, int64_t len, int64_t klen, void* dst_v) {
  const uint16_t* src = static_cast<const uint16_t*>(src_v);
  uint16_t* dst = static_cast<uint16_t*>(dst_v);
  const int64_t kpad = (klen + kKAlign - 1) / kKAlign * kKAlign;
  for (int64_t kb = 0; kb < kpad; kb += kKAlign) {
    const int64_t kn = std::min<int64_t>(kKAlign, klen - kb);
    for (int64_t r = 0; r < kMr; ++r) {
      uint16_t* d = dst + kb * kMr + r * kKAlign;
      if (r >= len) {
        std::memset(d, 0, kKAlign * 2);
        continue;
      }
      const uint16_t* s = src + r * line_stride + kb * k_stride;
      if (k_stride == 1) {
        std::memcpy(d, s, kn * 2);
      } else {
        for (int64_t k = 0; k < kn; ++k) d[k] = s[k * k_stride];
      }
      if (kn < kKAlign) std::memset(d + kn, 0, (kKAlign - kn) * 2);
    }
  }
}

// B in the vdpbf16ps pair layout, plus zero pairs up to the 32-k alignment.
void pack_amx_b(const void* src, int64_t line_stride, int64_t k_stride, int64_t len, int64_t klen, void* dst) {
  pack_bf16_pair_panel<kNr>(src, line_stride, k_stride, len, klen, dst);
  const int64_t kpairs = (klen + 1) / 2, kpairs_pad = (klen + kKAlign - 1) / kKAlign * kKAlign / 2;
  std::memset(static_cast<uint32_t*>(dst) + kpairs * kNr, 0, (kpairs_pad - kpairs) * kNr * 4);
}

}  // namespace

// Block sizes (K in bf16 elements): A and B micro-panels are 32 x KC x 2 B
// = 32 KB each at KC=512; the A block (MC x KC) stays in L2.
const KernelSpec& bf16_amx_spec() {
  static const KernelSpec s{"bf16_amx_32x32", kMr, kNr, 512, 32 * 12, 4096, kKAlign, 2, 2,
                            kernel_bf16_amx_32x32, pack_amx_a, pack_amx_b, amx_thread_begin, amx_thread_end};
  return s;
}

}  // namespace kiln::cpu::gemm_detail
