#pragma once
// The CPU kernels of the block formats, shared by quant_blocks.cpp (the
// primitives) and quant_blocks_qmv.cpp (the fused matrix-vector kernels).
#include <cstdint>

#include "core/block_format.h"

namespace kiln::cpu {

// out[rows, k] (float32, row-major) = the decoded rows of w (rows * k /
// block blocks, row-major); bit-exact with gguf-py.
void block_decode_rows(BlockFormat f, const uint8_t* w, int64_t rows, int64_t k, float* out);

// y[m, n] = sum_k x[m, k] * decoded w[n, k] for m < M (any M; the blocks are
// read once per 8 rows of x). x is float32 row-major [M, K], w row-major
// [N, K / block * bytes], y float32 row-major [M, N]. Accumulates in float32.
void block_qmv(BlockFormat f, const float* x, int64_t M, const uint8_t* w, int64_t N, int64_t K, float* y);

// The same product for x holding bfloat16 values (widened to float), on
// CPUs with AVX512-BF16 (quant_blocks_qmv_bf16.cpp): the formats it has.
bool block_qmv_bf16_supported(BlockFormat f);
void block_qmv_bf16(BlockFormat f, const float* x, int64_t M, const uint8_t* w, int64_t N, int64_t K, float* y);

// The same product with x rounded to 8 bits (quant_blocks_qmv_int8.cpp):
// each block of 32 values of a row of x becomes q = round(x * 127 / amax)
// (int8, half to even, in float32) times d = amax / 127 (amax = max |x|),
// and y = (d q) w^T from integer dot products. A block holding NaN or inf
// gives NaN. AVX-512 VNNI where the CPU has it, AVX2 otherwise. From 9
// rows of x on, with VNNI, the packed GEMM of quant_blocks_qmm_int8.cpp
// (the same rounding of x and the same integer sums); fewer rows, or AVX2,
// take the QMV kernels 8 rows of x at a time.
void block_qmv_int8(BlockFormat f, const float* x, int64_t M, const uint8_t* w, int64_t N, int64_t K, float* y);

// Test hook: 0 keeps the Q4_0 / Q4_K kernels' GFNI high-nibble extraction
// off (a shift and a mask instead), -1 clears it.
void set_lanes_gfni_override(int on);

// Whether block-format quantized_matmul rounds float32 / float16 / bfloat16
// x to 8 bits (the default; float64 x never is): KILN_BLOCK_X=float (read
// once) keeps x as it is, and so does set_block_x_int8_override(0) (a test
// hook; -1 clears it; not meant to be flipped while kernels run).
bool block_x_int8();
void set_block_x_int8_override(int on);

}  // namespace kiln::cpu
