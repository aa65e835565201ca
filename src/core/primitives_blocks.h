#pragma once
// Primitives of llama.cpp's block formats (core/quantize_blocks.h): encode
// float rows into blocks, decode blocks into float rows, and multiply by a
// matrix of blocks without decoding it to memory. Their names are appended
// to KILN_FOR_EACH_PRIMITIVE (core/primitives.h).
#include "core/block_format.h"
#include "core/primitive.h"

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

}  // namespace kiln
