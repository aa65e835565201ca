#pragma once
// AVX-512 transpose of 4-byte elements. Only call it when cpu_target() >=
// CpuTarget::avx512; it runs on the calling thread.
#include <cstdint>

namespace kiln::cpu {

// dst[r * dst_ld + c] = src[c * src_ld + r] for r in [r_begin, r_end) and c
// in [0, cols). The rows [r_begin, r_end) are one band: up to ~1024 rows
// it makes the source reads long runs (see the .cpp). `stream` writes whole 16-element runs with non-temporal
// stores; it needs dst and dst_ld to keep every run 64-byte aligned (dst
// 64-byte aligned, dst_ld a multiple of 16).
void transpose32_avx512(const uint32_t* src, int64_t src_ld, uint32_t* dst, int64_t dst_ld, int64_t r_begin,
                        int64_t r_end, int64_t cols, bool stream);

}  // namespace kiln::cpu
