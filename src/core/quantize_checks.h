#pragma once
// MLX's argument checks of the quantization ops (src/core/ops_quantize.cpp),
// shared with qqmm (src/core/ops_qqmm.cpp). Each throws a kiln::Error naming
// the op, the inputs' shapes and dtypes.
#include <optional>
#include <string>
#include <vector>

#include "core/primitives_quant.h"

namespace kiln::detail {

// The parameters of a mode with MLX's defaults, checked (block formats
// excluded).
QuantParams quant_mode_params(const char* op, const std::string& mode, std::optional<int> group_size,
                              std::optional<int> bits, const std::vector<array>& inputs);
// nvfp4 only, a float32 scalar.
void check_quant_global_scale(const char* op, QuantParams p, const std::optional<array>& global_scale,
                              std::vector<array> in);
// Packed uint32 words with their scales (and affine biases) consistent.
void check_quant_packed(const char* op, const array& w, const array& scales, const std::optional<array>& biases,
                        QuantParams p);
bool is_real_float(Dtype t);

}  // namespace kiln::detail
