#pragma once
// The primitives of fast::rms_norm, fast::layer_norm and fast::rope
// (include/kiln/fast.h); the kernels live in src/backend/cpu/fast_norm.cpp,
// cpu/rope.cpp, cuda/fast_norm.cu and cuda/rope.cu.
#include "core/primitives.h"
#include "core/primitives_fast.h"

namespace kiln {

// inputs: x [..., D], weight [D] or a 0-d placeholder for "no weight", both
// of the output dtype (float32, float16 or bfloat16).
class RMSNorm : public FastPrimitive {
 public:
  RMSNorm(Stream s, FastFallback fallback, float eps) : FastPrimitive(s, std::move(fallback)), eps_(eps) {}
  KILN_PRIMITIVE_BODY(RMSNorm)
  bool is_equivalent(const Primitive& o) const override;
  std::string describe() const override;
  float eps() const { return eps_; }

 private:
  float eps_;
};

// fast::add_rms_norm. inputs: x, residual (x's shape and dtype), weight
// [D] or a 0-d placeholder; outputs h = x + residual and rms_norm(h).
class AddRMSNorm : public FastPrimitive {
 public:
  AddRMSNorm(Stream s, FastFallback fallback, float eps) : FastPrimitive(s, std::move(fallback)), eps_(eps) {}
  using Primitive::eval_cpu;
  using Primitive::eval_gpu;
  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override;
  void eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) override;
  const char* name() const override { return "AddRMSNorm"; }
  bool is_equivalent(const Primitive& o) const override;
  std::string describe() const override;
  float eps() const { return eps_; }

 private:
  float eps_;
};

// inputs: x [..., D], weight and bias each [D] or a 0-d placeholder.
class LayerNorm : public FastPrimitive {
 public:
  LayerNorm(Stream s, FastFallback fallback, float eps) : FastPrimitive(s, std::move(fallback)), eps_(eps) {}
  KILN_PRIMITIVE_BODY(LayerNorm)
  bool is_equivalent(const Primitive& o) const override;
  std::string describe() const override;
  float eps() const { return eps_; }

 private:
  float eps_;
};

// inputs: x [B, ..., T, D] (float32/float16/bfloat16), offset (int32, 0-d
// or [B]) and, with custom frequencies, freqs [dims/2] float32. `forward`
// false rotates by minus the angle (the vjp).
class RoPE : public FastPrimitive {
 public:
  RoPE(Stream s, FastFallback fallback, int dims, bool traditional, float base, float scale, bool forward)
      : FastPrimitive(s, std::move(fallback)), dims_(dims), traditional_(traditional), base_(base), scale_(scale),
        forward_(forward) {}
  KILN_PRIMITIVE_BODY(RoPE)
  // The cotangent of x is the inverse rotation of the cotangent (a RoPE
  // node); that of freqs goes through the fallback; offsets have none.
  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                         const std::vector<int>& argnums, const std::vector<array>& outputs) override;
  bool is_equivalent(const Primitive& o) const override;
  std::string describe() const override;
  int dims() const { return dims_; }
  bool traditional() const { return traditional_; }
  float base() const { return base_; }
  float scale() const { return scale_; }
  bool forward() const { return forward_; }

 private:
  int dims_;
  bool traditional_;
  float base_, scale_;
  bool forward_;
};

}  // namespace kiln
