#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::cuda {
// y[M, N] (row-major) = x[M, K] (row stride ldx) * w[N, K]^T (row stride
// ldw) on the current stream, for M <= 8 and float32 / bfloat16 / float16 (the half types need K % 8 == 0). Returns
// false (launching nothing) for shapes or layouts it does not cover. On `s`,
// or the current stream when s is null.
// Whether gemv takes these operands (dtype, M, alignment, K for the half types).
bool gemv_covers(Dtype t, const char* x, int64_t ldx, const char* w, int64_t ldw, int64_t M, int64_t K);
bool gemv(Dtype t, const char* x, int64_t ldx, const char* w, int64_t ldw, char* y, int64_t M, int64_t N, int64_t K,
          cudaStream_t s = nullptr);

// Tests: matmul's choice for 1-8 rows against [N, K] weights (matmul.cpp):
// 1 Kiln's GEMV wherever it covers the operands, 0 cuBLASLt, -1 (the
// default) as KILN_CUDA_GEMV says, else the faster of the two when timed.
void set_small_m_override(int which);
}  // namespace kiln::cuda
