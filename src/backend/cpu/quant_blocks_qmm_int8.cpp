// Prefill on llama.cpp's block formats (quantized_matmul with more than 8
// rows of x): a packed 8-bit GEMM. Measured by the `qmm_*` rows of `kiln
// bench` (drill D4) and by `kiln bench llm`'s pp column.
//
// Why. The 8-bit QMV (quant_blocks_qmv_int8.cpp) takes x 8 rows at a time:
// each pass decodes every block again, and per 64 weights and row of x it
// spends one vpdpbusd among ~8 instructions (loading x's codes, its seeds,
// the scales, converting, FMA). At M = 64 that was 75-100 tokens/s on a
// 1B model where llama.cpp's repacked kernels ran 120-135 (docs/llm.md).
// Here, as in a float GEMM, the weights are packed once per call for all M:
// - a panel of 16 rows of w is decoded (the per-format decoders of
//   quant_blocks_dec.h) to u8 codes u = q + 128, interleaved in groups of
//   4: [k / 4][16 rows][4 codes], one zmm per 4 weights of 16 rows; the
//   sub-blocks' a (and b) as [sub-block][16 rows] floats;
// - per sub-block of S weights (32, or 16 where the format scales 16) and
//   row m of x, S / 4 vpdpbusd (the packed codes times x's 4 codes
//   broadcast) sum 16 rows at once, starting from -128 * sum of x's codes
//   (the offset's share), and three float operations bring the sub-block
//   into the 16 lanes of y: y += (a * d_x) * sum, plus b * (d_x * sum q_x)
//   for formats with sub-block offsets;
// - 8 rows of x per tile: 8 vpdpbusd per weight load, 16 accumulators.
// The integer sums are exact and the float work matches the QMV's (the
// same rounding of x, a * d per sub-block, float32 accumulation in a
// different order): tests/test_quant_blocks.cpp compares both against the
// product in float64.
// Threads split the panels; each packs its own (20 K bytes per panel, in
// L2) and reads x's codes from L2 / L3 for every panel, 512 rows of x per
// pass over the panels (more rows decode the panels again per pass).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/avx512_target.h"
#include "backend/cpu/quant_blocks_cpu.h"
#include "backend/cpu/quant_blocks_dec.h"
#include "backend/cpu/quant_blocks_int8.h"
#include "backend/cpu/threading.h"

#define KILN_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

namespace kiln::cpu {
namespace {

using qdec::Dec;
using qparams::Params;

constexpr int kRows = 16;  // rows of w per panel: one zmm of int32 lanes
constexpr int kTile = 8;   // rows of x per tile

// A panel: codes [K / 4][16][4] u8, a and b [K / S][16] floats.
struct Panel {
  std::vector<uint8_t> store;
  uint8_t* codes = nullptr;
  float *a = nullptr, *b = nullptr;
  void size_for(int64_t K, int S) {
    const size_t cb = static_cast<size_t>(K) * kRows, fb = static_cast<size_t>(K / S) * kRows * sizeof(float);
    if (store.size() < cb + 2 * fb + 64) store.resize(cb + 2 * fb + 64);
    codes = store.data() + (64 - reinterpret_cast<uintptr_t>(store.data()) % 64) % 64;
    a = reinterpret_cast<float*>(codes + cb);
    b = reinterpret_cast<float*>(codes + cb + fb);
  }
};

// The 16 rows' chunk (32 codes each, as u8) to 8 zmm, zmm g holding
// codes 4 g .. 4 g + 3 of row r in lane r: a 16 x 8 transpose of dwords
// (the 8 x 8 transposes of unpacklo / hi 32 and 64 within each 256-bit
// half, then one 128-bit lane shuffle per output). Row r is in the low
// half of z[r] for r < 4 (high: r + 4) and of z[r - 4] for 8 <= r < 12
// (high: r + 4), so the lanes come out in row order.
KILN_VNNI KILN_QINLINE void transpose_store(const __m256i (&ch)[kRows], uint8_t* dst) {
  __m512i z[8], t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(ch[i]), ch[i + 4], 1);
    z[i + 4] = _mm512_inserti64x4(_mm512_castsi256_si512(ch[i + 8]), ch[i + 12], 1);
  }
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm512_unpacklo_epi32(z[i], z[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(z[i], z[i + 1]);
  }
  for (int h = 0; h < 8; h += 4) {
    u[h] = _mm512_unpacklo_epi64(t[h], t[h + 2]);
    u[h + 1] = _mm512_unpackhi_epi64(t[h], t[h + 2]);
    u[h + 2] = _mm512_unpacklo_epi64(t[h + 1], t[h + 3]);
    u[h + 3] = _mm512_unpackhi_epi64(t[h + 1], t[h + 3]);
  }
  // u[j] (j < 4): codes group j (128-bit lanes 0, 2) and j + 4 (lanes 1, 3) of rows 0-7; u[j + 4] of rows 8-15.
  for (int j = 0; j < 4; ++j) {
    _mm512_store_si512(dst + 64 * j, _mm512_shuffle_i32x4(u[j], u[j + 4], 0x88));
    _mm512_store_si512(dst + 64 * (j + 4), _mm512_shuffle_i32x4(u[j], u[j + 4], 0xDD));
  }
}

// Rows n0 .. n0 + 15 of w (rows past N repeat row N - 1; their sums are not stored).
template <BlockFormat F>
KILN_VNNI void pack(const uint8_t* w, int64_t row_bytes, int64_t n0, int64_t N, int64_t K, Panel& p) {
  using D = Dec<F>;
  constexpr int S = qb::sub_size(F), kSubs = D::kBlock / S;
  const int64_t nb = K / D::kBlock;
  const uint8_t* rows[kRows];
  for (int r = 0; r < kRows; ++r) rows[r] = w + std::min(n0 + r, N - 1) * row_bytes;
  for (int64_t bi = 0; bi < nb; ++bi) {
    for (int r = 0; r < kRows; ++r) {
      Params pr;
      D::params(rows[r] + bi * D::kBytes, pr);
      for (int j = 0; j < kSubs; ++j) {
        p.a[(bi * kSubs + j) * kRows + r] = pr.a[j];
        if constexpr (qb::has_offset(F)) p.b[(bi * kSubs + j) * kRows + r] = pr.b[j];  // read only then
      }
    }
    for (int c = 0; c < D::kChunks; ++c) {
      __m256i ch[kRows];
#pragma GCC unroll 16
      for (int r = 0; r < kRows; ++r) ch[r] = _mm256_xor_si256(D::chunk(rows[r] + bi * D::kBytes, c), _mm256_set1_epi8(-128));
      transpose_store(ch, p.codes + (bi * D::kBlock + 32 * c) * kRows);
    }
  }
}

// acc += u8 lanes of w times the 4 s8 codes at x broadcast: vpdpbusd with
// its memory operand broadcast, one instruction (GCC loads and broadcasts
// the codes in a separate instruction for _mm512_set1_epi32 of a load).
KILN_VNNI KILN_QINLINE void dpbusd_bcast(__m512i& acc, __m512i w, const int8_t* x) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_t*>(x)));
}

// y[m0 + t, n0 .. n0 + rows - 1] for t < T.
template <int T, int S, bool kB>
KILN_VNNI void tile(const Panel& p, const Q8View& x, int64_t K, float* y, int64_t N, int64_t n0, int rows) {
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t j = 0; j < K / S; ++j) {
    const int64_t k0 = j * S;
    __m512i s[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) s[t] = _mm512_set1_epi32(S == 32 ? *x.o32(t, k0) : *x.o16(t, k0));
    const uint8_t* cj = p.codes + k0 * kRows;
#pragma GCC unroll 8
    for (int g = 0; g < S / 4; ++g) {
      const __m512i wv = _mm512_load_si512(cj + 64 * g);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) dpbusd_bcast(s[t], wv, x.q(t, k0 + 4 * g));
    }
    const __m512 a = _mm512_load_ps(p.a + j * kRows);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const float d = S == 32 ? *x.d32(t, k0) : *x.d16(t, k0);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), _mm512_mul_ps(a, _mm512_set1_ps(d)), acc[t]);
    }
    if constexpr (kB) {
      const __m512 b = _mm512_load_ps(p.b + j * kRows);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) acc[t] = _mm512_fmadd_ps(b, _mm512_set1_ps(S == 32 ? *x.s32(t, k0) : *x.s16(t, k0)), acc[t]);
    }
  }
  const __mmask16 mask = rows >= kRows ? __mmask16(0xFFFF) : __mmask16((1u << rows) - 1);
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * N + n0, mask, acc[t]);
}

// Rows m0 .. m0 + M - 1 of x against one panel.
template <int S, bool kB>
KILN_VNNI void tiles(const Panel& p, const Q8Rows& r, int64_t m0, int64_t M, int64_t K, float* y, int64_t N,
                     int64_t n0, int rows) {
  int64_t m = m0;
  for (; m + kTile <= m0 + M; m += kTile) tile<kTile, S, kB>(p, view(r, m, K), K, y + m * N, N, n0, rows);
  const Q8View v = view(r, m, K);
  float* ym = y + m * N;
  switch (m0 + M - m) {
    case 7: tile<7, S, kB>(p, v, K, ym, N, n0, rows); break;
    case 6: tile<6, S, kB>(p, v, K, ym, N, n0, rows); break;
    case 5: tile<5, S, kB>(p, v, K, ym, N, n0, rows); break;
    case 4: tile<4, S, kB>(p, v, K, ym, N, n0, rows); break;
    case 3: tile<3, S, kB>(p, v, K, ym, N, n0, rows); break;
    case 2: tile<2, S, kB>(p, v, K, ym, N, n0, rows); break;
    case 1: tile<1, S, kB>(p, v, K, ym, N, n0, rows); break;
    default: break;
  }
}

// Rows of x per pass over the panels: every panel reads the pass's codes
// (rows x K bytes), which should come from L2 / L3, not DRAM; each pass
// decodes the panels again (once per 512 rows of x).
constexpr int64_t kPassRows = 512;

template <BlockFormat F>
void qmm(const Q8Rows& r, int64_t M, const uint8_t* w, int64_t N, int64_t K, float* y) {
  constexpr int S = qb::sub_size(F);
  const int64_t row_bytes = K / block_layout(F).block * block_layout(F).bytes;
  const int64_t panels = (N + kRows - 1) / kRows;
  for (int64_t m0 = 0; m0 < M; m0 += kPassRows) {
    const int64_t mp = std::min(kPassRows, M - m0);
    parallel_for_balanced(panels, 1, [&](int64_t p0, int64_t p1) {
      Panel p;
      p.size_for(K, S);
      for (int64_t pi = p0; pi < p1; ++pi) {
        const int64_t n0 = pi * kRows;
        pack<F>(w, row_bytes, n0, N, K, p);
        tiles<S, qb::has_offset(F)>(p, r, m0, mp, K, y, N, n0, static_cast<int>(std::min<int64_t>(kRows, N - n0)));
      }
    });
  }
}

}  // namespace

void block_qmm_int8(BlockFormat f, const Q8Rows& x, int64_t M, const uint8_t* w, int64_t N, int64_t K, float* y) {
  dispatch_format(f, [&](auto fc) { qmm<decltype(fc)::value>(x, M, w, N, K, y); });
}

}  // namespace kiln::cpu
