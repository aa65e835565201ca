// AMX tile products for the CPU attention's bf16 prefill tiles
// (attention_kernel.inc, blocked_amx). Why: on an AMX CPU the fused tiles
// on vdpbf16ps ran at ~190 GFLOP/s on two cores, twice as slow as the
// unfused fallback whose two matmuls run on AMX (session 37, Xeon, h8 s1024
// d128 bf16: 22.8 vs 11.3 ms). Here both products of a 64-row x 64-key
// block run on the tiles, and the online softmax between them stays on
// AVX-512 in attention_kernel.inc.
//
// Layouts (the kernel's, so nothing is repacked for the scores):
// - S^T = K Q^T: K's rows are A tiles read in place (16 keys x 32 head
//   dims); Q's bf16 pairs qp[d/2][64 rows] are B tiles; C tiles land in
//   st[key][64 rows], the layout the softmax walks.
// - O += P V: P's rows as bf16 pairs pt[64 rows][32 key pairs] are A tiles;
//   V's key pairs vp[key pair][dvp] are B tiles; C tiles are o[row][dvp].
// All eight tiles are 16 rows x 64 bytes: C 0-3 (a 2 x 2 block), A 4-5,
// B 6-7.
#include "backend/cpu/attention_amx.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#define KILN_TARGET_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))

namespace kiln::cpu::attention_amx {
namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// NK key groups x NR row groups (each 1 or 2) of S^T over D head dims. ka,
// kb: the groups' first K rows (byte strides lda, ldb); q: the row group's
// first column of qp; st: the block's first score.
template <int NK, int NR>
KILN_TARGET_AMX void scores_block(const char* ka, int64_t lda, const char* kb, int64_t ldb, const uint32_t* q, int D,
                                  float* st) {
  _tile_zero(0);
  if (NR > 1) _tile_zero(1);
  if (NK > 1) _tile_zero(2);
  if (NK > 1 && NR > 1) _tile_zero(3);
  for (int d = 0; d < D; d += 32) {
    const uint32_t* qd = q + d / 2 * kTileRows;
    _tile_loadd(4, ka + 2 * d, lda);
    _tile_loadd(6, qd, 4 * kTileRows);
    if (NR > 1) _tile_loadd(7, qd + 16, 4 * kTileRows);
    _tile_dpbf16ps(0, 4, 6);
    if (NR > 1) _tile_dpbf16ps(1, 4, 7);
    if (NK > 1) {
      _tile_loadd(5, kb + 2 * d, ldb);
      _tile_dpbf16ps(2, 5, 6);
      if (NR > 1) _tile_dpbf16ps(3, 5, 7);
    }
  }
  constexpr int ld = 4 * kTileRows;
  _tile_stored(0, st, ld);
  if (NR > 1) _tile_stored(1, st + 16, ld);
  if (NK > 1) _tile_stored(2, st + 16 * kTileRows, ld);
  if (NK > 1 && NR > 1) _tile_stored(3, st + 16 * kTileRows + 16, ld);
}

// NR row groups x NC column groups of O += P V over `steps` runs of 32 keys.
template <int NR, int NC>
KILN_TARGET_AMX void pv_block(const uint32_t* p, const uint32_t* vp, int dvp, int steps, float* o) {
  const int64_t ldo = 4 * static_cast<int64_t>(dvp);
  constexpr int64_t ldp = 4 * kTileKeys / 2;
  _tile_loadd(0, o, ldo);
  if (NC > 1) _tile_loadd(1, o + 16, ldo);
  if (NR > 1) _tile_loadd(2, o + 16 * dvp, ldo);
  if (NR > 1 && NC > 1) _tile_loadd(3, o + 16 * dvp + 16, ldo);
  for (int s = 0; s < steps; ++s) {
    const uint32_t* vs = vp + static_cast<int64_t>(s) * 16 * dvp;
    _tile_loadd(4, p + 16 * s, ldp);
    _tile_loadd(6, vs, ldo);
    if (NC > 1) _tile_loadd(7, vs + 16, ldo);
    _tile_dpbf16ps(0, 4, 6);
    if (NC > 1) _tile_dpbf16ps(1, 4, 7);
    if (NR > 1) {
      _tile_loadd(5, p + 16 * (kTileKeys / 2) + 16 * s, ldp);
      _tile_dpbf16ps(2, 5, 6);
      if (NC > 1) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, o, ldo);
  if (NC > 1) _tile_stored(1, o + 16, ldo);
  if (NR > 1) _tile_stored(2, o + 16 * dvp, ldo);
  if (NR > 1 && NC > 1) _tile_stored(3, o + 16 * dvp + 16, ldo);
}

}  // namespace

KILN_TARGET_AMX void begin() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  // GCC 12 does not model ldtilecfg reading memory and drops the stores
  // above without this barrier (as in gemm_bf16_amx.cpp).
  __asm__ volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

KILN_TARGET_AMX void end() { _tile_release(); }

KILN_TARGET_AMX void scores(const uint16_t* k, int64_t k_stride, int nk, const uint32_t* qp, int D, int nr, float* st,
                            uint16_t* kpad) {
  const int kgroups = (nk + 15) / 16, rgroups = (nr + 15) / 16;
  const int64_t ldk = 2 * k_stride;
  // A key group short of 16 rows is copied (zero rows after it): the tile
  // load reads 16 rows, and K's storage may end at the last key.
  auto group = [&](int g, const char** ptr, int64_t* ld) {
    const int rows = std::min(16, nk - 16 * g);
    if (rows == 16) {
      *ptr = reinterpret_cast<const char*>(k + static_cast<int64_t>(16 * g) * k_stride);
      *ld = ldk;
      return;
    }
    std::memset(kpad, 0, sizeof(uint16_t) * 16 * D);
    for (int j = 0; j < rows; ++j)
      std::memcpy(kpad + j * D, k + static_cast<int64_t>(16 * g + j) * k_stride, sizeof(uint16_t) * D);
    *ptr = reinterpret_cast<const char*>(kpad);
    *ld = 2 * D;
  };
  for (int g = 0; g < kgroups; g += 2) {
    const char *ka, *kb = nullptr;
    int64_t lda, ldb = 0;
    group(g, &ka, &lda);
    if (g + 1 < kgroups) group(g + 1, &kb, &ldb);
    for (int r = 0; r < rgroups; r += 2) {
      const uint32_t* q = qp + 16 * r;
      float* s = st + 16 * g * kTileRows + 16 * r;
      const bool two_k = kgroups - g > 1, two_r = rgroups - r > 1;
      if (two_k && two_r)
        scores_block<2, 2>(ka, lda, kb, ldb, q, D, s);
      else if (two_k)
        scores_block<2, 1>(ka, lda, kb, ldb, q, D, s);
      else if (two_r)
        scores_block<1, 2>(ka, lda, kb, ldb, q, D, s);
      else
        scores_block<1, 1>(ka, lda, kb, ldb, q, D, s);
    }
  }
}

KILN_TARGET_AMX void pv(const uint32_t* pt, const uint32_t* vp, int dvp, int nk, int nr, float* o) {
  const int steps = (nk + 31) / 32, rgroups = (nr + 15) / 16, cgroups = dvp / 16;
  for (int r = 0; r < rgroups; r += 2)
    for (int c = 0; c < cgroups; c += 2) {
      const uint32_t* p = pt + 16 * r * (kTileKeys / 2);
      const uint32_t* v = vp + 16 * c;
      float* oc = o + static_cast<int64_t>(16 * r) * dvp + 16 * c;
      const bool two_r = rgroups - r > 1, two_c = cgroups - c > 1;
      if (two_r && two_c)
        pv_block<2, 2>(p, v, dvp, steps, oc);
      else if (two_r)
        pv_block<2, 1>(p, v, dvp, steps, oc);
      else if (two_c)
        pv_block<1, 2>(p, v, dvp, steps, oc);
      else
        pv_block<1, 1>(p, v, dvp, steps, oc);
    }
}

}  // namespace kiln::cpu::attention_amx
