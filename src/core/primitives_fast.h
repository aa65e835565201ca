#pragma once
// The base of the fast ops' primitives (include/kiln/fast.h), after MLX's
// fast::Custom: a fused kernel that carries the function building the same
// result from plain ops (its fallback). The fallback defines the op: the
// transformations run through it (vjp, jvp, vmap, output shapes), and the
// tests compare the fused kernel with it. A derived primitive only adds its
// kernels, its parameters (is_equivalent) and, where a fused backward pays,
// its own vjp.
//
// An op decides at construction whether the fused kernel applies (dtype,
// layout, backend); where it does not, the op returns the fallback's graph
// instead of a node, so eval_cpu / eval_gpu never need to run the fallback.
#include <functional>
#include <utility>
#include <vector>

#include "core/primitive.h"

namespace kiln {

// Builds the op's outputs from its inputs with ordinary ops, on the stream
// the op was given (it captures the stream and the op's parameters).
using FastFallback = std::function<std::vector<array>(const std::vector<array>&)>;

class FastPrimitive : public Primitive {
 public:
  FastPrimitive(Stream s, FastFallback fallback) : Primitive(s), fallback_(std::move(fallback)) {}

  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                         const std::vector<int>& argnums, const std::vector<array>& outputs) override;
  std::vector<array> jvp(const std::vector<array>& primals, const std::vector<array>& tangents,
                         const std::vector<int>& argnums) override;
  // Outputs are batched on axis 0 (vmap of the fallback).
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& inputs,
                                                       const std::vector<int>& axes) override;
  // The fallback's output shapes for these inputs (builds its graph; runs nothing).
  std::vector<Shape> output_shapes(const std::vector<array>& inputs) override;

  const FastFallback& fallback() const { return fallback_; }

 protected:
  FastFallback fallback_;
};

}  // namespace kiln
