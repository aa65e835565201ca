#pragma once
// The fused attention primitive (kiln::fast::scaled_dot_product_attention).
// It holds the plain-op graph that defines it: the transformations (vjp,
// jvp, vmap) run through that fallback, and the tests use it as the oracle.
#include <functional>
#include <vector>

#include "core/primitive.h"

namespace kiln {

// inputs: q [B, Hq, Lq, D], k [B, Hkv, Lk, D], v [B, Hkv, Lk, Dv] (one
// floating dtype), then the mask broadcast to [B, Hq, Lq, Lk] when
// has_mask (bool, or the output dtype), then sinks [Hq] when has_sinks.
class ScaledDotProductAttention : public Primitive {
 public:
  using Fallback = std::function<std::vector<array>(const std::vector<array>&)>;
  ScaledDotProductAttention(Stream s, Fallback fallback, float scale, bool causal, bool has_mask, bool has_sinks)
      : Primitive(s), fallback_(std::move(fallback)), scale_(scale), causal_(causal), has_mask_(has_mask),
        has_sinks_(has_sinks) {}
  using Primitive::eval_cpu;
  using Primitive::eval_gpu;
  void eval_cpu(const std::vector<array>& inputs, array& out) override;
  void eval_gpu(const std::vector<array>& inputs, array& out) override;
  const char* name() const override { return "ScaledDotProductAttention"; }
  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                         const std::vector<int>& argnums, const std::vector<array>& outputs) override;
  std::vector<array> jvp(const std::vector<array>& primals, const std::vector<array>& tangents,
                         const std::vector<int>& argnums) override;
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& inputs,
                                                       const std::vector<int>& axes) override;
  std::vector<Shape> output_shapes(const std::vector<array>& inputs) override;
  bool is_equivalent(const Primitive& other) const override;
  std::string describe() const override;

  const Fallback& fallback() const { return fallback_; }
  float scale() const { return scale_; }
  bool causal() const { return causal_; }
  bool has_mask() const { return has_mask_; }
  bool has_sinks() const { return has_sinks_; }

 private:
  Fallback fallback_;
  float scale_;
  bool causal_, has_mask_, has_sinks_;
};

namespace fast::detail {
// The plain-op definition of attention on the primitive's inputs (the
// same graph the primitive holds): the tests' oracle.
std::vector<array> sdpa_fallback(const std::vector<array>& inputs, float scale, bool causal, bool has_mask,
                                 bool has_sinks, Stream s);
// Whether a fused kernel handles these inputs on stream s (the op builds
// the primitive then, else returns the fallback graph).
bool sdpa_fused_supported(const array& q, const array& k, const array& v, Stream s);
}  // namespace fast::detail

}  // namespace kiln
