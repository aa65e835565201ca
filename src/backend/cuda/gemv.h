#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::cuda {
// Whether gemv takes these operands (dtype, M, alignment, K for the half types).
bool gemv_covers(Dtype t, const char* x, int64_t ldx, const char* w, int64_t ldw, int64_t M, int64_t K);

// y[M, N] (row-major) = x[M, K] (row stride ldx) * w[N, K]^T (row stride
// ldw), for M <= 8 and float32 / bfloat16 / float16 (the half types need
// K % 8 == 0). Returns false (launching nothing) for operands it does not
// cover. On `s`, or the current stream when s is null. w_early: w was
// complete before the batch being captured began (complete_before_capture),
// so the bf16 / fp16 kernel may start loading it before the kernel ahead of
// it has finished.
bool gemv(Dtype t, const char* x, int64_t ldx, const char* w, int64_t ldw, char* y, int64_t M, int64_t N, int64_t K,
          cudaStream_t s = nullptr, bool w_early = false);

// Tests: 1 takes the bf16 / fp16 bulk-copy kernel (gemv.cu, gemv_bulk),
// 0 the register-pipelined one, -1 (the default) as KILN_GEMV_BULK says.
void set_gemv_bulk_override(int on);

// Reads `bytes` (a multiple of 16, 16-byte aligned) of buf on s, so that
// what the L2 held before is evicted and the lines left are clean (a
// memset leaves dirty ones, whose write-back then slows what runs next).
void l2_scrub_by_reading(const void* buf, size_t bytes, cudaStream_t s);

// Tests: matmul's choice for 1-8 rows against [N, K] weights (matmul.cpp):
// 1 Kiln's GEMV wherever it covers the operands, 0 cuBLASLt, -1 (the
// default) as KILN_CUDA_GEMV says, else the faster of the two when timed.
void set_small_m_override(int which);
}  // namespace kiln::cuda
