#pragma once
// The math of scaled_matmul (include/kiln/ops.h), written once for every
// backend: which scale multiplies an element of a or b, and the scaled
// value itself. The CPU kernel (src/backend/cpu/scaled_mm.cpp) and the GPU
// fallback (src/backend/cuda/scaled_mm.cu) dequantize through these
// functions and then run their float32 GEMM; cuBLASLt's FP8 path computes
// the same sum with the scales applied per 128-wide K block.
//
// Block mode: scale_a is [M, ceil(K / 128)] row-major (one scale per row
// and 128-wide K block), scale_b [ceil(K / 128), ceil(N / 128)] row-major
// (one per 128 x 128 block). Per-tensor mode: one scale each.
#include <cstdint>

#if defined(__CUDACC__)
#define KILN_SMM_HD __host__ __device__ __forceinline__
#else
#define KILN_SMM_HD inline
#endif

namespace kiln::smm {

inline constexpr int64_t kBlock = 128;

KILN_SMM_HD int64_t blocks(int64_t n) { return (n + kBlock - 1) / kBlock; }

// The scale of a[m, k]; kb = blocks(K).
KILN_SMM_HD float scale_a(const float* sa, bool block, int64_t kb, int64_t m, int64_t k) {
  return block ? sa[m * kb + k / kBlock] : sa[0];
}
// The scale of b[k, n]; nb = blocks(N).
KILN_SMM_HD float scale_b(const float* sb, bool block, int64_t nb, int64_t k, int64_t n) {
  return block ? sb[(k / kBlock) * nb + n / kBlock] : sb[0];
}
// An element with its scale folded in, in float32 (one rounding).
KILN_SMM_HD float scaled(float v, float s) { return v * s; }

}  // namespace kiln::smm
