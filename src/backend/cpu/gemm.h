#pragma once
// Kiln's own CPU matrix-multiply kernels: packed, register-blocked
// micro-kernels for AVX-512 (with AVX2 fallbacks), split across threads.
//
// C[M,N] = A[M,K] * B[K,N]. A and B are read through element strides
// (row stride, column stride), so transposed or sliced operands need no
// copy: packing reads any layout. C is row-major with leading dimension ldc.
#include <cstdint>
#include <functional>

#include "kiln/dtype.h"

namespace kiln::cpu {

struct GemmArgs {
  int64_t M, N, K;
  const void* A;
  int64_t a_row_stride, a_col_stride;
  const void* B;
  int64_t b_row_stride, b_col_stride;
  void* C;
  int64_t ldc;
  int threads;  // upper bound on threads to use
};

// fp32 in, fp32 out.
void gemm_f32(const GemmArgs& args);
// bf16 in (AVX512-BF16 dot products where the CPU has them), fp32
// accumulation; out_dtype is float32 or bfloat16.
void gemm_bf16(const GemmArgs& args, Dtype out_dtype);

// Writes B's columns [n0, n0 + len) (len <= 32) as len rows of K
// contiguous bf16 values (row stride K). Called from several threads at
// once, for disjoint columns.
using BColumnsFn = std::function<void(int64_t n0, int64_t len, bfloat16_t* rows)>;
// C = A * B with B made 32 columns at a time by `columns` and never stored
// whole (quantized_matmul's dequantized weights): on AMX CPUs the columns
// go from an L2-sized buffer straight into the packed panels, and A is
// packed once (up to 32 rows of A, the small-M tiles read that buffer in
// place). Returns false, having done nothing, on other CPUs. args.B and
// its strides are unused.
bool gemm_bf16_columns(const GemmArgs& args, Dtype out_dtype, const BColumnsFn& columns);

}  // namespace kiln::cpu
