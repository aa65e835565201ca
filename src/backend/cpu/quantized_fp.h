#pragma once
// What quantized.cpp (the primitives' eval_cpu, affine kernels) and
// quantized_fp.cpp (the microscaling modes' kernels) share: operand
// layouts, and the microscaling entry points the primitives call.
#include <vector>

#include "core/primitives.h"

namespace kiln::cpu {

// An input with row-contiguous inner axes (the last `inner` axes), copied
// when its layout has them otherwise; batch axes keep their strides (zero
// for broadcast ones).
struct Operand {
  const char* ptr;
  Strides strides;
  std::vector<char> store;
};
Operand inner_contiguous(const array& a, int inner);
// Offset in elements of batch entry `b` of an operand through its strides
// of the first `nbatch` axes of `shape`.
int64_t batch_offset(int64_t b, const Shape& shape, int nbatch, const Strides& strides);

// The microscaling modes (p.mode != affine), inputs as the primitives
// hold them (core/primitives_quant.h).
void fp_quantize(const std::vector<array>& inputs, QuantParams p, std::vector<array>& outputs);
void fp_dequantize(const std::vector<array>& inputs, QuantParams p, array& out);
void fp_quantized_matmul(const std::vector<array>& inputs, QuantParams p, bool transpose, array& out);
void fp_gather_qmm(const std::vector<array>& inputs, QuantParams p, bool transpose, array& out);
// qqmm's rounding of an operand (QuantizeDequantize).
void fp_quantize_dequantize(const std::vector<array>& inputs, QuantParams p, array& out);

}  // namespace kiln::cpu
