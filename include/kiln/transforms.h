#pragma once
// Function transformations, with MLX's C++ signatures (mlx/transforms.h):
// MLX code ports by renaming the namespace. They compose with each other
// and with compile (grad of grad, vmap of grad, compile of grad) and run on
// any stream: the rules are written with ordinary ops.
//
// Differences from MLX, on purpose:
// - vmap also accepts an output that does not depend on the mapped inputs:
//   it is broadcast along out_axis (MLX throws).
// - compile called while a transformation traces its function runs the
//   function uncompiled (the transformation then sees plain ops); compile
//   of a transformed function fuses as usual.
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "kiln/array.h"

namespace kiln {

// The outputs of fun at primals and the vector-Jacobian product of the
// cotangents (one per output, same shape) with fun's Jacobian.
std::pair<std::vector<array>, std::vector<array>> vjp(
    const std::function<std::vector<array>(const std::vector<array>&)>& fun, const std::vector<array>& primals,
    const std::vector<array>& cotangents);
std::pair<array, array> vjp(const std::function<array(const array&)>& fun, const array& primal,
                            const array& cotangent);

// The outputs of fun at primals and the Jacobian-vector product of fun's
// Jacobian with the tangents (one per primal, same shape).
std::pair<std::vector<array>, std::vector<array>> jvp(
    const std::function<std::vector<array>(const std::vector<array>&)>& fun, const std::vector<array>& primals,
    const std::vector<array>& tangents);
std::pair<array, array> jvp(const std::function<array(const array&)>& fun, const array& primal,
                            const array& tangent);

using ValueAndGradFn =
    std::function<std::pair<std::vector<array>, std::vector<array>>(const std::vector<array>&)>;
using SimpleValueAndGradFn = std::function<std::pair<array, std::vector<array>>(const std::vector<array>&)>;

// fun's outputs and the gradient of its first output (a scalar) with
// respect to the inputs in argnums.
ValueAndGradFn value_and_grad(const std::function<std::vector<array>(const std::vector<array>&)>& fun,
                              const std::vector<int>& argnums);
inline ValueAndGradFn value_and_grad(const std::function<std::vector<array>(const std::vector<array>&)>& fun,
                                     int argnum = 0) {
  return value_and_grad(fun, std::vector<int>{argnum});
}
std::function<std::pair<array, array>(const array&)> value_and_grad(const std::function<array(const array&)>& fun);
SimpleValueAndGradFn value_and_grad(const std::function<array(const std::vector<array>&)>& fun,
                                    const std::vector<int>& argnums);
inline SimpleValueAndGradFn value_and_grad(const std::function<array(const std::vector<array>&)>& fun,
                                           int argnum = 0) {
  return value_and_grad(fun, std::vector<int>{argnum});
}

std::function<std::vector<array>(const std::vector<array>&)> grad(
    const std::function<array(const std::vector<array>&)>& fun, const std::vector<int>& argnums);
inline std::function<std::vector<array>(const std::vector<array>&)> grad(
    const std::function<array(const std::vector<array>&)>& fun, int argnum = 0) {
  return grad(fun, std::vector<int>{argnum});
}
std::function<array(const array&)> grad(const std::function<array(const array&)>& fun);

// Vectorizes fun over in_axes of its inputs (-1: not mapped; empty: 0 for
// every input), putting the mapped axis of each output at out_axes (empty:
// 0). A batched rule per primitive, not a loop.
std::function<array(const array&)> vmap(const std::function<array(const array&)>& fun, int in_axis = 0,
                                        int out_axis = 0);
std::function<array(const array&, const array&)> vmap(const std::function<array(const array&, const array&)>& fun,
                                                      int in_axis_a = 0, int in_axis_b = 0, int out_axis = 0);
std::function<std::vector<array>(const std::vector<array>&)> vmap(
    const std::function<std::vector<array>(const std::vector<array>&)>& fun, const std::vector<int>& in_axes = {},
    const std::vector<int>& out_axes = {});

// fun with some of its transformations replaced: fun_vjp(primals,
// cotangents, outputs) -> input cotangents; fun_jvp(primals, tangents,
// argnums) -> output tangents; fun_vmap(inputs, axes) -> (outputs, axes).
// A rule not given is derived from fun itself.
using CustomVjpFn = std::function<std::vector<array>(const std::vector<array>&, const std::vector<array>&,
                                                     const std::vector<array>&)>;
using CustomJvpFn = std::function<std::vector<array>(const std::vector<array>&, const std::vector<array>&,
                                                     const std::vector<int>&)>;
using CustomVmapFn = std::function<std::pair<std::vector<array>, std::vector<int>>(const std::vector<array>&,
                                                                                    const std::vector<int>&)>;
std::function<std::vector<array>(const std::vector<array>&)> custom_function(
    std::function<std::vector<array>(const std::vector<array>&)> fun, std::optional<CustomVjpFn> fun_vjp = std::nullopt,
    std::optional<CustomJvpFn> fun_jvp = std::nullopt, std::optional<CustomVmapFn> fun_vmap = std::nullopt);
std::function<std::vector<array>(const std::vector<array>&)> custom_vjp(
    std::function<std::vector<array>(const std::vector<array>&)> fun, CustomVjpFn fun_vjp);

// fun whose intermediates are not kept for the backward pass: its vjp
// recomputes them from the inputs.
std::function<std::vector<array>(const std::vector<array>&)> checkpoint(
    std::function<std::vector<array>(const std::vector<array>&)> fun);

}  // namespace kiln
