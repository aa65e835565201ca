#pragma once
// The primitives of group-wise quantization, MLX's "affine" mode and its
// microscaling modes "mxfp4", "mxfp8", "nvfp4": the ops in
// src/core/ops_quantize.cpp build them; the affine kernels live in
// src/backend/cpu/quantized*.cpp and src/backend/cuda/quantized.cu, the
// microscaling ones in src/backend/cpu/quantized_fp*.cpp and
// src/backend/cuda/quantized_fp.cu, their shared math in
// src/backend/common/fp_quant.h.
//
// Packing (shared by every kernel): a row of K values of `bits` bits is one
// little-endian bit stream, value k at bits [k * bits, (k + 1) * bits) of
// the row, stored as K * bits / 32 uint32 words. For bits 2, 4, 8 a word
// holds whole values; for 3, 5, 6 values straddle words exactly as MLX's
// byte-wise packing leaves them. The microscaling modes pack the same way
// (4-bit codes LSB-first, 8-bit codes as the bytes of the words) with one
// uint8 scale per group and no biases.
#include <string>

#include "core/primitives.h"

namespace kiln {

enum class QuantMode { affine, mxfp4, mxfp8, nvfp4 };
// "affine", "mxfp4", ...; quant_mode_from_name returns false for other names.
const char* quant_mode_name(QuantMode m);
bool quant_mode_from_name(const std::string& name, QuantMode& m);

// Group parameters every quantized primitive carries.
struct QuantParams {
  int group_size;
  int bits;
  QuantMode mode = QuantMode::affine;
  bool operator==(const QuantParams& o) const {
    return group_size == o.group_size && bits == o.bits && mode == o.mode;
  }
  bool affine() const { return mode == QuantMode::affine; }
};

// w [..., K] (float16, bfloat16, float32) -> packed uint32 [..., K * bits / 32],
// scales and biases [..., K / group_size] in w's dtype. Three outputs.
// Microscaling modes: inputs w (and nvfp4's float32 global scale, a
// scalar), two outputs: packed words and uint8 scales.
class Quantize : public Primitive {
 public:
  Quantize(Stream s, QuantParams p) : Primitive(s), p_(p) {}
  using Primitive::eval_cpu;
  using Primitive::eval_gpu;
  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override;
  void eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) override;
  const char* name() const override { return "Quantize"; }
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  const QuantParams& params() const { return p_; }

 private:
  QuantParams p_;
};

// inputs: packed w, scales, biases (scales and biases of one floating
// dtype, the output's); out [..., K]. Microscaling modes: w, uint8 scales
// (and nvfp4's global scale); out of any floating dtype.
class Dequantize : public Primitive {
 public:
  Dequantize(Stream s, QuantParams p, Dtype out) : Primitive(s), p_(p), out_(out) {}
  KILN_PRIMITIVE_BODY(Dequantize)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  const QuantParams& params() const { return p_; }
  Dtype out_dtype() const { return out_; }

 private:
  QuantParams p_;
  Dtype out_;  // the output's dtype (the microscaling modes' is free)
};

// inputs: x [..., M, K], w, scales, biases, all of the output's floating
// dtype except w (microscaling modes: x, w, uint8 scales). A 2-d w serves every row of x; a batched w has the same
// batch shape as x (the op broadcasts both).
class QuantizedMatmul : public Primitive {
 public:
  QuantizedMatmul(Stream s, QuantParams p, bool transpose) : Primitive(s), p_(p), transpose_(transpose) {}
  KILN_PRIMITIVE_BODY(QuantizedMatmul)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  const QuantParams& params() const { return p_; }
  bool transpose() const { return transpose_; }

 private:
  QuantParams p_;
  bool transpose_;
};

// inputs: x [..., M, K], w [..., N, K'], scales, biases, lhs_indices,
// rhs_indices (uint32, one broadcast shape I; microscaling modes have no
// biases, the indices are inputs 3 and 4); out I + [M, N]:
// out[i] = x_flat[lhs[i]] @ dequantize(w_flat[rhs[i]]).
class GatherQMM : public Primitive {
 public:
  GatherQMM(Stream s, QuantParams p, bool transpose) : Primitive(s), p_(p), transpose_(transpose) {}
  KILN_PRIMITIVE_BODY(GatherQMM)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  const QuantParams& params() const { return p_; }
  bool transpose() const { return transpose_; }

 private:
  QuantParams p_;
  bool transpose_;
};

// qqmm's rounding of an operand (backend/common/fp_quant.h's
// quantize_dequantize_group), microscaling modes only: inputs x [..., K]
// (any floating dtype, rounded in float32; K a multiple of the group size) and, for
// nvfp4 with a global scale, that float32 scalar; out: x's shape and dtype,
// each group's values quantized and dequantized (nvfp4 with a global scale:
// without the factor global_scale / 2688). No derivative of its own: qqmm
// carries MLX's rule (src/core/ops_qqmm.cpp).
class QuantizeDequantize : public Primitive {
 public:
  QuantizeDequantize(Stream s, QuantParams p) : Primitive(s), p_(p) {}
  KILN_PRIMITIVE_BODY(QuantizeDequantize)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  const QuantParams& params() const { return p_; }

 private:
  QuantParams p_;
};

}  // namespace kiln
