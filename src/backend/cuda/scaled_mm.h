#pragma once
// What scaled_mm.cpp (cuBLASLt's FP8 path, ScaledMatmul::eval_gpu) and
// scaled_mm.cu (the dequantizing fallback's kernel) share.
#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::cuda {

// dst[r * C + c] = x[r * rs + c * cs] * scale (row-major float32 [R, C]),
// x of fp8 dtype t; the scale of each element from scale_a's rule
// (is_a: x is a [M, K]) or scale_b's (x is b [K, N]),
// src/backend/common/scaled_mm.h. Enqueued on the current stream.
void scaled_mm_dequantize(const char* x, Dtype t, int64_t R, int64_t C, int64_t rs, int64_t cs, bool is_a,
                          bool block, const float* scales, int64_t blocks, float* dst);

}  // namespace kiln::cuda
