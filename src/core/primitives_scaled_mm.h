#pragma once
// scaled_matmul's primitive (include/kiln/ops.h): FP8 operands with
// per-tensor or block scales, float32 accumulation. The op is
// src/core/ops_scaled_mm.cpp, the shared math src/backend/common/scaled_mm.h,
// the kernels src/backend/cpu/scaled_mm.cpp and src/backend/cuda/scaled_mm*.
#include "core/primitives.h"

namespace kiln {

// inputs: a [M, K] and b [K, N] (fp8, any strides), scale_a and scale_b
// (float32, row-contiguous: [1] and [1], or [M, ceil(K/128)] and
// [ceil(K/128), ceil(N/128)]); out [M, N] bfloat16 or float32. No
// transformation rules: vjp, jvp and vmap are the base class's errors.
class ScaledMatmul : public Primitive {
 public:
  ScaledMatmul(Stream s, bool block) : Primitive(s), block_(block) {}
  KILN_PRIMITIVE_BODY(ScaledMatmul)
  bool accepts_fp8() const override { return true; }
  std::vector<Shape> output_shapes(const std::vector<array>& inputs) override;
  bool is_equivalent(const Primitive& o) const override;
  std::string describe() const override;
  bool block_scales() const { return block_; }

 private:
  bool block_;
};

// For the GPU stub of a build without CUDA (backend/no_gpu.cpp) and the op
// harness's coverage list, as KILN_FOR_EACH_LINALG_PRIMITIVE.
#define KILN_FOR_EACH_FP8_PRIMITIVE(X) X(ScaledMatmul)

}  // namespace kiln
