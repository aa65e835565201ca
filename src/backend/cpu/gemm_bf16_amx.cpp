// bf16 GEMM on Intel AMX tiles (Sapphire Rapids and later).
//
// One micro-kernel call computes a 32 x 32 fp32 tile of C as 2 x 2 AMX
// accumulator tiles (tmm0-3, 16 rows x 16 fp32 each). Per 32-wide slice of K
// it loads two A tiles (tmm4-5: 16 rows x 32 bf16) and two B tiles
// (tmm6-7: 16 k-pairs x 16 columns x 2 bf16) and issues four tdpbf16ps;
// each A and B tile feeds two products. On a 2-vCPU Xeon (2026-12-07) the
// tile unit peaks at ~3.5 TFLOP/s per core (no memory traffic); this loop
// ran at ~2.5 with its panels in L1 (KC = 256), 1.7 at KC = 512 (64 KB of
// panels, past L1) and 1.5 from L2, against ~0.23 for fp32 FMAs and ~0.12
// for vdpbf16ps (which Intel cores execute at a quarter of the FMA rate).
//
// Packed layouts (K padded with zeros to a multiple of 32):
//  A micro-panel: [K/32][32 rows][32 k] bf16 - each A tile is 16 rows of
//                 64 contiguous bytes (stride 64).
//  B micro-panel: [K/2 pairs][32 columns][2 k] - the same VNNI pair layout
//                 as the vdpbf16ps kernel; B tile j is columns 16j..16j+15,
//                 rows of 64 bytes at stride 128.
//
// The driver (run_amx_gemm) is not the shared GotoBLAS loop nest. A 2 x 2
// tile step needs 4 KB of tile loads per 64 TMUL cycles, so the kernel runs
// at its L1 / L2 speed only if the B micro-panel stays in L1 (KC = 256: 16
// KB) while A streams from L2; and at KC = 256 the C tile is read and
// written every 512 cycles, which the shared driver sends to L3 / DRAM (its
// C block is all of a thread's columns). Measured on a 2-vCPU Xeon (AMX
// peak ~3.5 TFLOP/s per core): the kernel alone 2.3-2.5 TFLOP/s per core
// from L1 / L2, the shared driver 0.7-0.75 per core. So A and B are packed
// whole first (panels of all of K; B in column chunks of at most ~8 MB),
// then each thread walks C in blocks of kMb x kNb fp32, in a private buffer
// with padded rows that stays in its L2 over the whole K loop, with the B
// micro-panel reused over the block's A panels from L1 and the C tiles
// loaded into and stored from the accumulators; the block is then copied
// (fp32) or rounded (bf16) into C once.
//
// At 8 <= M <= 32 (6 with a transposed B) try_amx_small_m takes the product
// instead and reads B once, never packing it whole (below).
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "backend/cpu/gemm_avx512_store.h"
#include "backend/cpu/gemm_internal.h"
#include "backend/cpu/gemm_pack_avx512.h"
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

// C[32 x 32] (fp32, leading dimension ldc) = or += the product of 32 rows of
// A and one B micro-panel over kc_padded k. A's tiles are 16 rows a_stride
// bytes apart, rows 16-31 a_half bytes after rows 0-15, each 32 k a_step
// bytes after the last: a packed micro-panel (64, 1 KB, 2 KB) or A in place
// (its row stride, 16 rows, 64 bytes). C goes straight between memory and
// the accumulator tiles (a tile store read back by vector loads waits for
// the store to reach L1). The panels are zero past M, N and K, so every tile
// is whole; the caller's C block has room for it.
KILN_TARGET_AMX void kernel_bf16_amx_32x32(int64_t kc_padded, const char* a, int64_t a_stride, int64_t a_half,
                                           int64_t a_step, const char* b, float* c, int64_t ldc, bool accumulate) {
  if (accumulate) {
    _tile_loadd(0, c, ldc * 4);
    _tile_loadd(1, c + 16, ldc * 4);
    _tile_loadd(2, c + 16 * ldc, ldc * 4);
    _tile_loadd(3, c + 16 * ldc + 16, ldc * 4);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  const int64_t kblocks = kc_padded / kKAlign;
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    const char* ak = a + kb * a_step;
    const char* bk = b + kb * (kKAlign / 2 * kNr * 4);
    _tile_loadd(4, ak, a_stride);
    _tile_loadd(6, bk, 128);
    _tile_loadd(7, bk + 64, 128);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, ak + a_half, a_stride);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, ldc * 4);
  _tile_stored(1, c + 16, ldc * 4);
  _tile_stored(2, c + 16 * ldc, ldc * 4);
  _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
}

// kernel_bf16_amx_32x32 on a packed A micro-panel ([K/32][32 rows][32 k]).
KILN_TARGET_AMX void kernel_bf16_amx_packed(int64_t kc_padded, const char* a, const char* b, float* c, int64_t ldc,
                                            bool accumulate) {
  kernel_bf16_amx_32x32(kc_padded, a, kKAlign * 2, 16 * kKAlign * 2, kMr * kKAlign * 2, b, c, ldc, accumulate);
}

// A rows as [K/32][32 rows][32 k]; zero rows past len, zero k past klen.
KILN_TARGET_AMX void pack_amx_a(const void* src_v, int64_t line_stride, int64_t k_stride, int64_t len, int64_t klen,
                                void* dst_v) {
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
      if (k_stride == 1 && kn == kKAlign) {
        _mm512_store_si512(d, _mm512_loadu_si512(s));
      } else if (k_stride == 1) {
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
  pack_bf16_pair_panel_avx512<kNr>(src, line_stride, k_stride, len, klen, dst);
  const int64_t kpairs = (klen + 1) / 2, kpairs_pad = (klen + kKAlign - 1) / kKAlign * kKAlign / 2;
  std::memset(static_cast<uint32_t*>(dst) + kpairs * kNr, 0, (kpairs_pad - kpairs) * kNr * 4);
}

// Row-major B (columns adjacent, rows k_stride apart): panels [q0, q1) of
// 32 columns from column n0 on, each panel_bytes apart, k pair by k pair
// across all of them. Panel by panel, each row gave 64 bytes to a panel
// before the next row: with rows 28 KB apart no prefetcher follows, and
// B's packing took ~80% of a 128 x 4096 x 14336 product.
KILN_TARGET_AMX void pack_amx_b_rows(const uint16_t* src, int64_t k_stride, int64_t N, int64_t n0, int64_t q0,
                                     int64_t q1, int64_t klen, char* dst, int64_t panel_bytes) {
  alignas(64) static constexpr uint16_t kLo[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                   8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i lo = _mm512_load_si512(kLo), hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  const int64_t kpairs = (klen + 1) / 2, kpairs_pad = round_up(klen, kKAlign) / 2;
  for (int64_t kp = 0; kp < kpairs_pad; ++kp) {
    const uint16_t* r0 = src + 2 * kp * k_stride;
    const bool has0 = kp < kpairs, has1 = 2 * kp + 1 < klen;
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t c = n0 + q * kNr, n = std::clamp<int64_t>(N - c, 0, kNr);
      const __mmask32 m = n == kNr ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1u);
      const __m512i a = has0 ? _mm512_maskz_loadu_epi16(m, r0 + c) : _mm512_setzero_si512();
      const __m512i b = has1 ? _mm512_maskz_loadu_epi16(m, r0 + k_stride + c) : _mm512_setzero_si512();
      char* d = dst + q * panel_bytes + kp * kNr * 4;
      _mm512_store_si512(d, _mm512_permutex2var_epi16(a, lo, b));
      _mm512_store_si512(d + 64, _mm512_permutex2var_epi16(a, hi, b));
    }
  }
}

// The finished C block (fp32, row stride ldw) into C: copied, or rounded to bf16.
KILN_TARGET_AVX512 void write_block(const float* c, int64_t ldw, int64_t mb, int64_t nb, char* out, int64_t ldc,
                                    bool out_bf16) {
  for (int64_t i = 0; i < mb; ++i) {
    if (!out_bf16) {
      std::memcpy(out + i * ldc * 4, c + i * ldw, nb * 4);
      continue;
    }
    auto* dst = reinterpret_cast<uint16_t*>(out) + i * ldc;
    for (int64_t j = 0; j < nb; j += 16) {
      const __mmask16 m = vec_mask(static_cast<int>(std::min<int64_t>(16, nb - j)), 0);
      _mm256_mask_storeu_epi16(dst + j, m, round_to_bf16(_mm512_loadu_ps(c + i * ldw + j)));
    }
  }
}

// The packed operands and C blocks of one call, kept by the calling thread
// for the next: 16 MB of fresh pages per 2048^3 product cost ~2 ms of page
// faults, ~40% of the product itself. Held up to 256 MB.
class Scratch {
 public:
  char* get(size_t bytes) {
    if (bytes > cap_) {
      ptr_.reset(static_cast<char*>(std::aligned_alloc(4096, round_up(bytes, 4096))));
      if (!ptr_) throw std::bad_alloc();
      cap_ = bytes;
    }
    return ptr_.get();
  }
  void trim() {
    if (cap_ > (size_t{256} << 20)) {
      ptr_.reset();
      cap_ = 0;
    }
  }

 private:
  std::unique_ptr<char, FreeDeleter> ptr_;
  size_t cap_ = 0;
};

// Small M: C[M <= 32, N] for a row-major B, streamed once from memory.
//
// The packed GEMM above writes all of B packed and reads it back (three
// passes over B's bytes), and vdpbf16ps on M <= 32 rows is compute-bound
// past M ~ 8 (try_gemv_bf16_dot: ~175 GFLOP/s at M = 16 on this Xeon, 3 ms
// for 4096 x 4096). Here each group of 64 columns keeps its 4 C tiles in the
// accumulators over all of K (M <= 16; with 32 rows, see small_m_group); per
// 32 k, the 32 rows' pieces of the group are paired into B tiles in an L1
// buffer (pack_amx_b_rows: one vpermt2w per 32 columns and pair of rows) and multiplied by
// x's A tile, packed once. Rows go to L2 two k-blocks ahead. Measured on the 2-vCPU Xeon
// (2026-12-07, ms, M = 16 x K = 4096): a block of 512-2048 columns packed
// over 64-256 rows into L2 first and then multiplied (runs of 1-4 KB per
// row instead of 128 bytes) was slower at N = 4096 (1.45-1.8 against
// 1.05-1.16) and level at 14336 (5.6-6.4); the prefetch into L1 or 4-16
// blocks ahead 5-20% slower; groups of 32 columns at M > 16 (64-byte pieces
// per row) 13 against 9.3 ms at 32 x 4096 x 14336.

// One 64-column group's two B panels for k-block kb at bt (pack_amx_b_rows'
// layout, 2 KB each), its rows prefetched into L2 two k-blocks ahead.
KILN_TARGET_AMX inline void pair_group_rows(const uint16_t* B, int64_t ldb, int64_t K, int64_t N, int64_t kb,
                                            int64_t kblocks, int64_t g0, char* bt) {
  constexpr int kAheadBlocks = 2;
  if (kb + kAheadBlocks < kblocks) {
    const char* pf = reinterpret_cast<const char*>(B + (kb + kAheadBlocks) * kKAlign * ldb + g0);
    for (int r = 0; r < kKAlign; ++r) {
      _mm_prefetch(pf + r * ldb * 2, _MM_HINT_T1);
      _mm_prefetch(pf + r * ldb * 2 + 64, _MM_HINT_T1);
    }
  }
  const int64_t k0 = kb * kKAlign;
  pack_amx_b_rows(B + k0 * ldb, ldb, N, g0, 0, 2, std::min<int64_t>(kKAlign, K - k0), bt, kKAlign * kNr * 2);
}

// C tiles 0-3 (+)= one A tile (16 rows) times the 4 B tiles of the two
// panels at bt (16 columns each, rows 128 bytes apart).
KILN_TARGET_AMX inline void group_products(const char* ak, const char* bt) {
  _tile_loadd(4, ak, 64);
  _tile_loadd(6, bt, 128);
  _tile_loadd(7, bt + 64, 128);
  _tile_dpbf16ps(0, 4, 6);
  _tile_dpbf16ps(1, 4, 7);
  _tile_loadd(6, bt + 2048, 128);
  _tile_loadd(7, bt + 2048 + 64, 128);
  _tile_dpbf16ps(2, 4, 6);
  _tile_dpbf16ps(3, 4, 7);
}

// The 4 C tiles of a 16 x 64 block at ct: loaded (load) or stored.
KILN_TARGET_AMX inline void group_tiles(float* ct, int64_t ldt, bool load) {
  if (load) {
    _tile_loadd(0, ct, ldt * 4);
    _tile_loadd(1, ct + 16, ldt * 4);
    _tile_loadd(2, ct + 32, ldt * 4);
    _tile_loadd(3, ct + 48, ldt * 4);
  } else {
    _tile_stored(0, ct, ldt * 4);
    _tile_stored(1, ct + 16, ldt * 4);
    _tile_stored(2, ct + 32, ldt * 4);
    _tile_stored(3, ct + 48, ldt * 4);
  }
}

// C[16 * MT rows, 64 columns from g0] into ct (row stride ldt floats). With
// 16 rows the 4 C tiles stay in the accumulators over all of K; with 32 a
// chunk of 8 k-blocks is paired into L1 and both halves of C pass over it.
template <int MT>
KILN_TARGET_AMX void small_m_group(const char* a_pack, const uint16_t* B, int64_t ldb, int64_t K, int64_t N, int64_t g0,
                                   float* ct, int64_t ldt) {
  constexpr int64_t kChunk = MT == 1 ? 1 : 8;  // k-blocks paired before the products
  alignas(64) char bt[kChunk * 4096];
  const int64_t kblocks = ceil_div(K, kKAlign);
  if constexpr (MT == 1) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t kb = 0; kb < kblocks; ++kb) {
      pair_group_rows(B, ldb, K, N, kb, kblocks, g0, bt);
      group_products(a_pack + kb * (kMr * kKAlign * 2), bt);
    }
    group_tiles(ct, ldt, false);
  } else {
    for (int64_t kc0 = 0; kc0 < kblocks; kc0 += kChunk) {
      const int64_t kc1 = std::min(kblocks, kc0 + kChunk);
      for (int64_t kb = kc0; kb < kc1; ++kb) pair_group_rows(B, ldb, K, N, kb, kblocks, g0, bt + (kb - kc0) * 4096);
      for (int h = 0; h < 2; ++h) {
        if (kc0 == 0) {
          _tile_zero(0);
          _tile_zero(1);
          _tile_zero(2);
          _tile_zero(3);
        } else {
          group_tiles(ct + 16 * h * ldt, ldt, true);
        }
        for (int64_t kb = kc0; kb < kc1; ++kb) {
          group_products(a_pack + kb * (kMr * kKAlign * 2) + h * 16 * 64, bt + (kb - kc0) * 4096);
        }
        group_tiles(ct + 16 * h * ldt, ldt, false);
      }
    }
  }
}

// Small M against a transposed B (x W^T: B's columns are W's rows, k
// contiguous): the product runs as C^T = W x^T, W's rows loaded in place as
// A tiles (16 rows x 32 k at W's row stride) and x^T's pairs (packed once,
// 32 columns of m) as B tiles, so W is read once and never packed. A group
// is 64 rows of W against 16 rows of x, or 32 against 32; C^T's tiles go to
// ct (n-major) and out transposed. Rows past N and k past K (the last
// k-block) are staged through a zero-padded buffer.
template <int MT>
KILN_TARGET_AMX void small_m_group_t(const char* xp, const uint16_t* W, int64_t ldw, int64_t K, int64_t N, int64_t n0,
                                     float* ct) {
  constexpr int NT = 4 / MT, kRows = 16 * NT, kAheadBlocks = 4;
  alignas(64) char staged[NT * 1024];
  const int64_t kblocks = ceil_div(K, kKAlign), rows = std::min<int64_t>(kRows, N - n0);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    const int64_t k0 = kb * kKAlign;
    if (kb + kAheadBlocks < kblocks) {
      const char* pf = reinterpret_cast<const char*>(W + n0 * ldw + k0 + kAheadBlocks * kKAlign);
      for (int64_t r = 0; r < rows; ++r) _mm_prefetch(pf + r * ldw * 2, _MM_HINT_T1);
    }
    const char* wt = reinterpret_cast<const char*>(W + n0 * ldw + k0);
    int64_t stride = ldw * 2;
    if (rows < kRows || k0 + kKAlign > K) {
      const __mmask32 km = k0 + kKAlign <= K ? ~__mmask32{0} : static_cast<__mmask32>((1u << (K - k0)) - 1u);
      for (int r = 0; r < kRows; ++r) {
        const __m512i v = r < rows ? _mm512_maskz_loadu_epi16(km, W + (n0 + r) * ldw + k0) : _mm512_setzero_si512();
        _mm512_store_si512(staged + r * 64, v);
      }
      wt = staged;
      stride = 64;
    }
    const char* xk = xp + kb * (kKAlign / 2 * kNr * 4);
    _tile_loadd(6, xk, 128);
    if constexpr (MT == 2) {
      _tile_loadd(7, xk + 64, 128);
      _tile_loadd(4, wt, stride);
      _tile_loadd(5, wt + 16 * stride, stride);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    } else {
      _tile_loadd(4, wt, stride);
      _tile_loadd(5, wt + 16 * stride, stride);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 5, 6);
      _tile_loadd(4, wt + 32 * stride, stride);
      _tile_loadd(5, wt + 48 * stride, stride);
      _tile_dpbf16ps(2, 4, 6);
      _tile_dpbf16ps(3, 5, 6);
    }
  }
  // ct: kRows rows of n, 16 * MT floats of m each.
  constexpr int64_t ld = 16 * MT * 4;
  _tile_stored(0, ct, ld);
  _tile_stored(1, MT == 2 ? ct + 16 : ct + 16 * 16, ld);
  _tile_stored(2, MT == 2 ? ct + 16 * 32 : ct + 32 * 16, ld);
  _tile_stored(3, MT == 2 ? ct + 16 * 32 + 16 : ct + 48 * 16, ld);
}

}  // namespace

void run_amx_gemm(const GemmArgs& g, bool out_bf16, const BColumnsFn* columns) {
  // Blocks (2048^3 on the Xeon, 2 threads, ms: KC 128 / 256 / 384 / 512 with
  // 256 x 512 C blocks 8.9 / 9.1 / 9.9 / 9.3; 256 x 256 9.2, 512 x 256 8.8,
  // which also won at 4096^3 and 512 x 4096 x 14336 by 4-9%).
  constexpr int64_t kKc = 256, kMb = 512, kNb = 256, kChunkBytes = int64_t{8} << 20;
  const int64_t M = g.M, N = g.N, K = g.K;
  if (K <= 0) {
    zero_c(g, out_bf16);
    return;
  }
  const int64_t kp = round_up(K, kKAlign);
  const int64_t panel_bytes = kp * kMr * 2;  // one packed A or B micro-panel over all of K
  const int64_t mpanels = ceil_div(M, kMr);
  // Columns per chunk of packed B: a multiple of the C block's width.
  const int64_t nchunk = std::min(round_up(N, kNr), std::max(kNb, kChunkBytes / (kp * 2) / kNb * kNb));
  const int nt = useful_threads(g.threads, 2.0 * M * N * K);
  const int64_t a_bytes = round_up(mpanels * panel_bytes, 4096),
                b_bytes = round_up(ceil_div(nchunk, kNr) * panel_bytes, 4096);
  // Each thread's C block, rows 17 cache lines apart: a tile's 16 rows at a C stride of 8 KB
  // (N = 2048 floats) fall in one L1 set and evict each other.
  const int64_t ldw = kNb + 16;
  thread_local Scratch scratch;
  char* const a_pack = scratch.get(a_bytes + b_bytes + nt * kMb * ldw * 4);
  char* const b_pack = a_pack + a_bytes;
  char* const c_ws = b_pack + b_bytes;
  const char* A = static_cast<const char*>(g.A);
  const char* B = static_cast<const char*>(g.B);
  const int64_t cbytes = out_bf16 ? 2 : 4;

#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int threads = omp_get_num_threads(), tid = omp_get_thread_num();
    amx_thread_begin();
    int64_t p0, p1;
    split_range(mpanels, threads, tid, &p0, &p1);
    for (int64_t p = p0; p < p1; ++p) {
      pack_amx_a(A + p * kMr * g.a_row_stride * 2, g.a_row_stride, g.a_col_stride, std::min<int64_t>(kMr, M - p * kMr),
                 K, a_pack + p * panel_bytes);
    }
    for (int64_t jc = 0; jc < N; jc += nchunk) {
      const int64_t nc = std::min(nchunk, N - jc), npanels = ceil_div(nc, kNr);
      split_range(npanels, threads, tid, &p0, &p1);
      if (columns != nullptr) {
        // The producer's rows (32 x K bf16, L2-sized) packed as a K-contiguous B.
        thread_local std::vector<bfloat16_t> rows;
        rows.resize(static_cast<size_t>(kNr) * K);
        for (int64_t q = p0; q < p1; ++q) {
          const int64_t n0 = jc + q * kNr, len = std::min<int64_t>(kNr, N - n0);
          (*columns)(n0, len, rows.data());
          pack_amx_b(rows.data(), K, 1, len, K, b_pack + q * panel_bytes);
        }
      } else if (g.b_col_stride == 1) {
        pack_amx_b_rows(static_cast<const uint16_t*>(g.B), g.b_row_stride, N, jc, p0, p1, K, b_pack, panel_bytes);
      } else {
        for (int64_t q = p0; q < p1; ++q) {
          const int64_t n0 = jc + q * kNr;
          pack_amx_b(B + n0 * g.b_col_stride * 2, g.b_col_stride, g.b_row_stride, std::min<int64_t>(kNr, N - n0), K,
                     b_pack + q * panel_bytes);
        }
      }
#pragma omp barrier
      // C blocks of this chunk, dealt out in order (each a kMb x kNb fp32
      // block that stays in this core's L2 over the whole K loop).
      // Small products: narrower blocks until every thread has two.
      int64_t mbk = kMb, nbk = kNb;
      while (ceil_div(M, mbk) * ceil_div(nc, nbk) < 2 * threads && (mbk > kMr || nbk > kNr)) {
        if (mbk >= nbk && mbk > kMr) {
          mbk /= 2;
        } else {
          nbk /= 2;
        }
      }
      const int64_t mblocks = ceil_div(M, mbk), nblocks = ceil_div(nc, nbk);
      split_range(mblocks * nblocks, threads, tid, &p0, &p1);
      for (int64_t blk = p0; blk < p1; ++blk) {
        const int64_t m0 = blk / nblocks * mbk, n0 = blk % nblocks * nbk;
        const int64_t mb = std::min(mbk, M - m0), nb = std::min(nbk, nc - n0);
        char* c_out = static_cast<char*>(g.C) + (m0 * g.ldc + jc + n0) * cbytes;
        float* c = reinterpret_cast<float*>(c_ws) + tid * kMb * ldw;
        for (int64_t pc = 0; pc < kp; pc += kKc) {
          const int64_t kc = std::min(kKc, kp - pc);
          for (int64_t j = 0; j < nb; j += kNr) {
            const char* bp = b_pack + (n0 + j) / kNr * panel_bytes + pc * kNr * 2;
            for (int64_t i = 0; i < mb; i += kMr) {
              // Whole tiles: the packed panels are zero past M and N, and the block has room.
              const char* ap = a_pack + (m0 + i) / kMr * panel_bytes + pc * kMr * 2;
              kernel_bf16_amx_packed(kc, ap, bp, c + i * ldw + j, ldw, pc > 0);
            }
          }
        }
        write_block(c, ldw, mb, nb, c_out, g.ldc, out_bf16);
      }
#pragma omp barrier
    }
    amx_thread_end();
  }
  scratch.trim();
}

namespace {

// W = B's columns: read in place, or made one row at a time by `columns`
// into an L2 buffer per group (quantized_matmul's dequantized weights).
bool amx_small_m_transposed(const GemmArgs& g, bool out_bf16, const BColumnsFn* columns) {
  const int64_t M = g.M, N = g.N, K = g.K;
  const int64_t rows = M > 16 ? 32 : 64;
  thread_local Scratch scratch;
  char* const xp = scratch.get(round_up(K, kKAlign) * kNr * 2);
  pack_amx_b(g.A, g.a_row_stride, g.a_col_stride, M, K, xp);
  over_columns(g.threads, 2.0 * K * N, N, rows, [&](int64_t n0, int64_t n1) {
    amx_thread_begin();
    alignas(64) float ct[64 * 32];
    thread_local std::vector<bfloat16_t> made;
    // Rows made one at a time, 64 bytes longer than K: at a row stride of a
    // multiple of 4 KB a tile's 16 rows share one L1 set (QMM 14336 x 4096,
    // M = 8-32: 5.4-6.0 -> 5.0-5.6 ms).
    const int64_t ldm = round_up(K, kKAlign) + kKAlign;
    if (columns != nullptr) made.resize(static_cast<size_t>(rows) * ldm);
    for (int64_t r0 = n0; r0 < n1; r0 += rows) {
      const int64_t nb = std::min(rows, n1 - r0), ld = M > 16 ? 32 : 16;
      const uint16_t* W = static_cast<const uint16_t*>(g.B) + r0 * g.b_col_stride;
      int64_t ldw = g.b_col_stride, valid = N - r0;
      if (columns != nullptr) {
        for (int64_t q = 0; q < nb; ++q) (*columns)(r0 + q, 1, made.data() + q * ldm);
        W = reinterpret_cast<const uint16_t*>(made.data());
        ldw = ldm;
        valid = nb;
      }
      if (M > 16) {
        small_m_group_t<2>(xp, W, ldw, K, valid, 0, ct);
      } else {
        small_m_group_t<1>(xp, W, ldw, K, valid, 0, ct);
      }
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < nb; ++n) store_c(g.C, out_bf16, m * g.ldc + r0 + n, ct[n * ld + m]);
      }
    }
    amx_thread_end();
  });
  scratch.trim();
  return true;
}

}  // namespace

// Small products (up to 768^3 multiply-adds; the measurements are at
// kAmxSmallProductMax): run_amx_gemm's whole-operand packing, its two
// barriers and the writes through its C blocks cost more than the tiles'
// work at 256^3 (perf: 22% packing B, 17% waiting in OpenMP, 8% the
// write-out, 36% the tiles).
// Here A (row-major, K a multiple of 32) is read in place by the tile loads,
// and each thread packs only the 32-column B panels it multiplies, one at a
// time into L1, with no barrier: units of one panel by a range of 32-row
// blocks, panel-major, split over the threads. A's last partial row block
// is packed (pack_amx_a, zero rows below it) once per thread.
bool try_amx_small_product(const GemmArgs& g, bool out_bf16) {
  const int64_t M = g.M, N = g.N, K = g.K;
  if (M <= 32 || K <= 0 || K % kKAlign != 0 || g.a_col_stride != 1) return false;
  if (static_cast<double>(M) * N * K > kAmxSmallProductMax) return false;
  const int64_t panels = ceil_div(N, kNr), mblocks = ceil_div(M, kMr);
  const int nt = static_cast<int>(std::min<int64_t>(useful_threads(g.threads, 2.0 * M * N * K), panels * mblocks));
  // Row-block ranges per panel: enough units that every thread has two.
  const int64_t mparts = std::min(mblocks, ceil_div(2 * nt, panels)), units = panels * mparts;
  const auto* A = static_cast<const uint16_t*>(g.A);
  const auto* B = static_cast<const char*>(g.B);
  const int64_t cbytes = out_bf16 ? 2 : 4, panel_bytes = K * kNr * 2;
  // Per thread: one B panel and A's packed last rows.
  const int64_t per_thread = panel_bytes + (M % kMr != 0 ? kMr * K * 2 : 0);
  thread_local Scratch scratch;
  char* const ws = scratch.get(nt * per_thread);
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int64_t u0, u1;
    split_range(units, omp_get_num_threads(), omp_get_thread_num(), &u0, &u1);
    if (u0 < u1) {
      char* const b_pack = ws + omp_get_thread_num() * per_thread;
      char* const a_edge = b_pack + panel_bytes;
      bool edge_ready = false;
      alignas(64) float ct[kMr * kNr];
      amx_thread_begin();
      int64_t packed = -1;
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t q = u / mparts, n0 = q * kNr, len = std::min<int64_t>(kNr, N - n0);
        if (q != packed) {
          if (g.b_col_stride == 1) {
            pack_amx_b_rows(static_cast<const uint16_t*>(g.B), g.b_row_stride, N, n0, 0, 1, K, b_pack, panel_bytes);
          } else {
            pack_amx_b(B + n0 * g.b_col_stride * 2, g.b_col_stride, g.b_row_stride, len, K, b_pack);
          }
          packed = q;
        }
        int64_t i0, i1;
        split_range(mblocks, static_cast<int>(mparts), static_cast<int>(u % mparts), &i0, &i1);
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t m0 = i * kMr, rows = std::min<int64_t>(kMr, M - m0);
          const uint16_t* a = A + m0 * g.a_row_stride;
          if (rows < kMr) {
            // The last rows, packed with zero rows below them (A tiles are
            // 16 whole rows).
            if (!edge_ready) {
              pack_amx_a(a, g.a_row_stride, 1, rows, K, a_edge);
              edge_ready = true;
            }
            kernel_bf16_amx_packed(K, a_edge, b_pack, ct, kNr, false);
          } else {
            kernel_bf16_amx_32x32(K, reinterpret_cast<const char*>(a), g.a_row_stride * 2, 16 * g.a_row_stride * 2,
                                  kKAlign * 2, b_pack, ct, kNr, false);
          }
          write_block(ct, kNr, rows, len, static_cast<char*>(g.C) + (m0 * g.ldc + n0) * cbytes, g.ldc, out_bf16);
        }
      }
      amx_thread_end();
    }
  }
  scratch.trim();
  return true;
}

bool try_amx_small_m(const GemmArgs& g, bool out_bf16, const BColumnsFn* columns) {
  if (g.M < 1 || g.M > 32 || g.N <= 0 || g.K <= 0) return false;
  if (columns != nullptr) return amx_small_m_transposed(g, out_bf16, columns);
  if (g.b_row_stride == 1 && g.b_col_stride != 1) {
    return g.M >= kAmxSmallMinMTransposed && amx_small_m_transposed(g, out_bf16, nullptr);
  }
  if (g.M < kAmxSmallMinM || g.b_col_stride != 1) return false;
  const int64_t M = g.M, N = g.N, K = g.K;
  constexpr int64_t cols = 64;
  thread_local Scratch scratch;
  char* const a_pack = scratch.get(round_up(K, kKAlign) * kMr * 2);
  pack_amx_a(g.A, g.a_row_stride, g.a_col_stride, M, K, a_pack);
  const auto* B = static_cast<const uint16_t*>(g.B);
  over_columns(g.threads, 2.0 * K * N, N, cols, [&](int64_t n0, int64_t n1) {
    amx_thread_begin();
    alignas(64) float ct[32 * 64];
    for (int64_t c0 = n0; c0 < n1; c0 += cols) {
      if (M > 16) {
        small_m_group<2>(a_pack, B, g.b_row_stride, K, N, c0, ct, cols);
      } else {
        small_m_group<1>(a_pack, B, g.b_row_stride, K, N, c0, ct, cols);
      }
      write_block(ct, cols, M, std::min(cols, n1 - c0), static_cast<char*>(g.C) + c0 * (out_bf16 ? 2 : 4), g.ldc,
                  out_bf16);
    }
    amx_thread_end();
  });
  scratch.trim();
  return true;
}

}  // namespace kiln::cpu::gemm_detail
