#pragma once
// Primitives of llama.cpp's block formats (core/quantize_blocks.h): encode
// float rows into blocks, decode blocks into float rows, and multiply by a
// matrix of blocks without decoding it to memory. Their names are appended
// to KILN_FOR_EACH_PRIMITIVE (core/primitives.h).
#include "core/block_format.h"
#include "core/primitive.h"
#include "core/primitives_fast.h"

namespace kiln {

// input: w [..., K] floating, K a multiple of the block; output: uint8
// [..., K / block * bytes] in ggml's byte layout.
class BlockQuantize : public Primitive {
 public:
  BlockQuantize(Stream s, BlockFormat f) : Primitive(s), format_(f) {}
  KILN_PRIMITIVE_BODY(BlockQuantize)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  BlockFormat format() const { return format_; }

 private:
  BlockFormat format_;
};

// input: uint8 [..., n * bytes]; output: [..., n * block] in the output's
// floating dtype (decoded in float32, then rounded).
class BlockDequantize : public Primitive {
 public:
  BlockDequantize(Stream s, BlockFormat f, Dtype out) : Primitive(s), format_(f), out_(out) {}
  KILN_PRIMITIVE_BODY(BlockDequantize)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  BlockFormat format() const { return format_; }
  Dtype out_dtype() const { return out_; }

 private:
  BlockFormat format_;
  Dtype out_;
};

// inputs: x [..., K] floating, w uint8 [N, K / block * bytes] (row-major);
// output [..., N] = x w_decoded^T in x's dtype, accumulated in float32.
class BlockQuantizedMatmul : public Primitive {
 public:
  BlockQuantizedMatmul(Stream s, BlockFormat f) : Primitive(s), format_(f) {}
  KILN_PRIMITIVE_BODY(BlockQuantizedMatmul)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  BlockFormat format() const { return format_; }

 private:
  BlockFormat format_;
};

// A one-row block QMV whose x is computed from the tensors that feed it
// (fast::swiglu_quantized_matmul, fast::add_rms_norm_quantized_matmul):
// on the GPU each CTA of the product computes x as it rounds it
// (quant_blocks_qmv_i8.cu, XSource), one kernel instead of two. inputs:
// a, b [..., K] of x's dtype (gate, up; or x, residual), then for the norm
// its weight [K], then w uint8 [N, K / block * bytes]; outputs: y [..., N]
// (SwiGLU), or h = a + b [..., K] and y (the norm). The ops build it only
// for a GPU stream; the transformations run the fallback.
class FusedBlockQMV : public FastPrimitive {
 public:
  enum class Kind { swiglu, add_rms_norm };
  FusedBlockQMV(Stream s, FastFallback fallback, Kind kind, BlockFormat f, float eps)
      : FastPrimitive(s, std::move(fallback)), kind_(kind), format_(f), eps_(eps) {}
  using Primitive::eval_cpu;
  using Primitive::eval_gpu;
  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override;
  void eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) override;
  const char* name() const override { return "FusedBlockQMV"; }
  bool is_equivalent(const Primitive& o) const override;
  std::string describe() const override;
  Kind kind() const { return kind_; }
  BlockFormat format() const { return format_; }
  float eps() const { return eps_; }

 private:
  Kind kind_;
  BlockFormat format_;
  float eps_;
};

namespace detail {
// Tests: 1 builds FusedBlockQMV wherever it applies, 0 never, -1 (the
// default) as KILN_FUSED_QMV says (src/core/fast_qmv.cpp).
void set_fused_qmv_override(int on);
}  // namespace detail

}  // namespace kiln
