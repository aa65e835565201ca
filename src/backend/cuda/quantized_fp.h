#pragma once
// What quantized.cu (the primitives' eval_gpu, affine kernels) and
// quantized_fp.cu (the microscaling modes' kernels) share.
#include <vector>

#include "core/primitives.h"

namespace kiln::cuda {

// A grid for `items` work items of `block` threads, capped at 32 blocks per SM.
unsigned quant_grid(int64_t items, int block);
// Row-major C[M, N] = A[M, K] times B ([N, K] when b_is_nk, else [K, N]):
// cuBLASLt (matmul.cpp).
void gemm_rowmajor(Dtype t, const char* a, const char* b, bool b_is_nk, char* c, int64_t M, int64_t N, int64_t K);

// The microscaling modes (p.mode != affine), inputs as the primitives
// hold them (core/primitives_quant.h).
void fp_quantize(const std::vector<array>& inputs, QuantParams p, std::vector<array>& outputs);
void fp_dequantize(const std::vector<array>& inputs, QuantParams p, array& out);
void fp_quantized_matmul(const std::vector<array>& inputs, QuantParams p, bool transpose, array& out);
void fp_gather_qmm(const std::vector<array>& inputs, QuantParams p, bool transpose, array& out);
// qqmm's rounding of an operand (QuantizeDequantize).
void fp_quantize_dequantize(const std::vector<array>& inputs, QuantParams p, array& out);

}  // namespace kiln::cuda
