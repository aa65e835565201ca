#pragma once
// x rounded to 8-bit blocks, as the 8-bit block-format kernels read it:
// quant_blocks_qmv_int8.cpp (QMV, M <= 8 at a time) and
// quant_blocks_qmm_int8.cpp (the packed GEMM of prefill).
#include <cstdint>
#include <vector>

#include "backend/cpu/quant_blocks_dec.h"
#include "core/block_format.h"

namespace kiln::cpu {

// The rows of x as the kernels read them: the codes, row after row, and
// per 16 and per 32 codes their d, d * sum q (for sub-block offsets b) and
// the seed -off * sum q (AVX-512: an offset's share, added in lane 0 of
// the lanes that share a scale). Rows are 64 bytes more than a multiple of
// 64 apart: rows 4 KB apart (K a power of two) share L1 sets (a measured
// 8x at M = 8). Per 64 weights a kernel reads 64 bytes of codes and 8-16 of
// the small arrays: x's share of the L1 misses stays small next to w's
// (per-lane copies of d and the seeds, 192 bytes per 64 weights, cost Q4_0
// a third of its bandwidth at K = 8192).
struct Q8Rows {
  int64_t rs = 0, ss = 0;  // bytes per row of codes; entries per row of the small arrays
  std::vector<int8_t> buf;
  int8_t* q = nullptr;  // 64-byte aligned in buf
  std::vector<float> s16, s32, d16, d32;
  std::vector<int32_t> o16, o32;
};

// Rounds x [M, K] (K a multiple of 32) to blocks of 32 int8 codes (the
// rounding of round_block in quant_blocks_qmv_int8.cpp) with their sums;
// `off` is the code offset whose share the seeds o16 / o32 hold.
void quantize_rows(const float* x, int64_t M, int64_t K, int off, Q8Rows& r);

// One kernel call's view: rows m0.. of x; k counts weights (a multiple of
// 64 for the AVX-512 kernels, of 32 for the AVX2 ones).
struct Q8View {
  const int8_t* q_;
  int64_t rs;
  const float *s16_, *s32_, *d16_, *d32_;
  const int32_t *o16_, *o32_;
  int64_t ss, K;
  KILN_QINLINE const int8_t* q(int m, int64_t k) const { return q_ + m * rs + k; }
  KILN_QINLINE const float* s16(int m, int64_t k) const { return s16_ + m * ss + k / 16; }
  KILN_QINLINE const float* s32(int m, int64_t k) const { return s32_ + m * ss + k / 32; }
  KILN_QINLINE const float* d16(int m, int64_t k) const { return d16_ + m * ss + k / 16; }
  KILN_QINLINE const float* d32(int m, int64_t k) const { return d32_ + m * ss + k / 32; }
  KILN_QINLINE const int32_t* o16(int m, int64_t k) const { return o16_ + m * ss + k / 16; }
  KILN_QINLINE const int32_t* o32(int m, int64_t k) const { return o32_ + m * ss + k / 32; }
};

inline Q8View view(const Q8Rows& r, int64_t m0, int64_t K) {
  const int64_t o = m0 * r.ss;
  return {r.q + m0 * r.rs,    r.rs,           r.s16.data() + o, r.s32.data() + o, r.d16.data() + o,
          r.d32.data() + o, r.o16.data() + o, r.o32.data() + o, r.ss,             K};
}

// x's codes laid out where the weights' nibbles sit, for the formats whose
// QMV kernels read x that way (quant_blocks_qmv_lanes.cpp: Q4_0, Q4_K):
// per row of x, Q4_0 192 bytes per three blocks (the codes that meet the
// low nibbles, those that meet the high ones, 16 int16 seeds, the three d),
// Q4_K its 256 codes per super-block reordered.
struct XLanes {
  int64_t rs = 0;  // bytes per row
  std::vector<uint8_t> buf;
  uint8_t* p = nullptr;  // 64-byte aligned in buf
};
bool lanes_format(BlockFormat f);
// From x rounded by quantize_rows (any offset). AVX-512 VNNI only.
void lay_lanes(BlockFormat f, const Q8Rows& r, int64_t M, int64_t K, XLanes& L);
// y[m0 .. m0 + M) [n0, n1) of the product (M <= 8), x laid out by lay_lanes
// (and, for Q4_K, its scales and sums in r).
void qmv_lanes(BlockFormat f, const XLanes& L, const Q8Rows& r, int64_t m0, int M, const uint8_t* w, int64_t N,
               int64_t K, float* y, int64_t n0, int64_t n1);

// y [M, N] = x w^T for x rounded with off = 128 (quantize_rows), through
// the packed 8-bit GEMM (quant_blocks_qmm_int8.cpp). AVX-512 VNNI only.
void block_qmm_int8(BlockFormat f, const Q8Rows& x, int64_t M, const uint8_t* w, int64_t N, int64_t K, float* y);

}  // namespace kiln::cpu
