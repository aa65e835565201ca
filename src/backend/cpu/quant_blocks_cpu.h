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

}  // namespace kiln::cpu
