#pragma once
// The primitives of group-wise affine quantization (MLX's "affine" mode):
// the ops in src/core/ops_quantize.cpp build them, the kernels live in
// src/backend/cpu/quantized*.cpp and src/backend/cuda/quantized.cu.
//
// Packing (shared by every kernel): a row of K values of `bits` bits is one
// little-endian bit stream, value k at bits [k * bits, (k + 1) * bits) of
// the row, stored as K * bits / 32 uint32 words. For bits 2, 4, 8 a word
// holds whole values; for 3, 5, 6 values straddle words exactly as MLX's
// byte-wise packing leaves them.
#include "core/primitives.h"

namespace kiln {

// Group parameters every quantized primitive carries.
struct QuantParams {
  int group_size;
  int bits;
  bool operator==(const QuantParams& o) const { return group_size == o.group_size && bits == o.bits; }
};

// w [..., K] (float16, bfloat16, float32) -> packed uint32 [..., K * bits / 32],
// scales and biases [..., K / group_size] in w's dtype. Three outputs.
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
// dtype, the output's); out [..., K].
class Dequantize : public Primitive {
 public:
  Dequantize(Stream s, QuantParams p) : Primitive(s), p_(p) {}
  KILN_PRIMITIVE_BODY(Dequantize)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  const QuantParams& params() const { return p_; }

 private:
  QuantParams p_;
};

// inputs: x [..., M, K], w, scales, biases, all of the output's floating
// dtype except w. A 2-d w serves every row of x; a batched w has the same
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
// rhs_indices (uint32, one broadcast shape I); out I + [M, N]:
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

}  // namespace kiln
