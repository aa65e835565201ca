// AVX-512 transpose of 4-byte elements (see transpose_avx512.h).
//
// The unit is a 16x16 block transposed in registers: 16 loads of one cache
// line each, 64 shuffles, 16 stores of one whole cache line each. Whole-line
// stores are what make non-temporal stores pay: the line is written without
// first being read (a plain store reads every destination line from DRAM,
// half again the traffic). The caller hands over a band of destination
// rows; within it, blocks go down the band before moving 16 columns right,
// so each source row is read in runs as long as the band (a whole 4 KiB
// page for a 1024-row band: one TLB miss per page instead of one per few
// lines) while the band's destination rows advance 64 bytes at a time.
#include "backend/cpu/transpose_avx512.h"

#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/avx512_target.h"
#include "backend/cpu/transpose_16x16_avx512.h"

namespace kiln::cpu {
namespace {

// One 16x16 block: destination rows r..r+15, columns c..c+15.
template <bool kStream>
KILN_AVX512 inline void block_16x16(const uint32_t* src, int64_t src_ld, uint32_t* dst, int64_t dst_ld, int64_t r,
                                    int64_t c) {
  __m512 v[16];
  for (int k = 0; k < 16; ++k) v[k] = _mm512_loadu_ps(src + (c + k) * src_ld + r);
  transpose_16x16(v);
  for (int k = 0; k < 16; ++k) {
    float* p = reinterpret_cast<float*>(dst + (r + k) * dst_ld + c);
    if constexpr (kStream) _mm512_stream_ps(p, v[k]);
    else _mm512_storeu_ps(p, v[k]);
  }
}

template <bool kStream>
KILN_AVX512 void transpose_range(const uint32_t* src, int64_t src_ld, uint32_t* dst, int64_t dst_ld, int64_t r_begin,
                                 int64_t r_end, int64_t cols) {
  const int64_t cols16 = cols / 16 * 16;
  const int64_t r16 = r_begin + (r_end - r_begin) / 16 * 16;
  for (int64_t c = 0; c < cols16; c += 16) {
    for (int64_t r = r_begin; r < r16; r += 16) block_16x16<kStream>(src, src_ld, dst, dst_ld, r, c);
  }
  // Edges: the last columns of every row, and rows below the last full block.
  for (int64_t r = r_begin; r < r16; ++r) {
    for (int64_t c = cols16; c < cols; ++c) dst[r * dst_ld + c] = src[c * src_ld + r];
  }
  for (int64_t r = r16; r < r_end; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[r * dst_ld + c] = src[c * src_ld + r];
  }
}

}  // namespace

void transpose32_avx512(const uint32_t* src, int64_t src_ld, uint32_t* dst, int64_t dst_ld, int64_t r_begin,
                        int64_t r_end, int64_t cols, bool stream) {
  if (stream) {
    transpose_range<true>(src, src_ld, dst, dst_ld, r_begin, r_end, cols);
    // Streaming stores are weakly ordered: publish them before the caller's
    // threads join and the output is read.
    _mm_sfence();
  } else {
    transpose_range<false>(src, src_ld, dst, dst_ld, r_begin, r_end, cols);
  }
}

}  // namespace kiln::cpu
