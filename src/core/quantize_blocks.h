#pragma once
// The llama.cpp (GGUF) block formats behind quantize / dequantize /
// quantized_matmul's `mode` argument: "q4_0", "q4_1", "q5_0", "q5_1", "q8_0",
// "q2_k", "q3_k", "q4_k", "q5_k", "q6_k". A block carries its own scales, so
// quantize returns {w} alone (uint8 bytes, shape [..., K / block * block_bytes],
// llama.cpp's byte layout) and dequantize / quantized_matmul take an empty
// `scales` array (shape (0)) and no biases. The public ops in
// src/core/ops_quantize*.cpp call these when is_block_format(mode).
#include <string>
#include <vector>

#include "kiln/array.h"

namespace kiln::detail {

bool is_block_format(const std::string& mode);
std::vector<array> block_quantize(const array& w, const std::string& mode, StreamOrDevice s);
array block_dequantize(const array& w, const std::string& mode, Dtype out, StreamOrDevice s);
// x [..., K] times w [N, K-in-blocks] transposed (transpose must be true:
// blocks run along K).
array block_quantized_matmul(const array& x, const array& w, bool transpose, const std::string& mode,
                             StreamOrDevice s);

}  // namespace kiln::detail
