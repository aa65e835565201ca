#pragma once
// The op definitions (src/backend/common/op_math.inc) on CUDA's elementary
// functions, in kiln::cuda::ko, and the dispatch from an op enum to them.
// float uses the single-precision CUDA math library (expf, ...), except
// exp_approx, which the tanh-approximate GELU takes: the hardware's ex2
// (__expf, a few ulp) keeps that op memory-bound in bf16.
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/primitives.h"

namespace kiln::cuda::ko {

namespace libm {
#include "backend/cuda/libm.inc"
}  // namespace libm

#define KILN_OPM __device__ __forceinline__
#include "backend/common/op_math.inc"
#undef KILN_OPM

// The value of unary op `op` on x of compute type C. The op layer rejects
// an op on a type it is not defined for before any kernel runs, so those
// cases are unreachable.
template <typename C>
__device__ __forceinline__ C unary(UnaryOp op, C x) {
  switch (op) {
#define KILN_UNARY_CASE(name)                                        \
  case UnaryOp::name:                                                \
    if constexpr (name##_op::accepts<C>) return name##_op::apply(x); \
    break;
    KILN_UNARY_OPS(KILN_UNARY_CASE)
#undef KILN_UNARY_CASE
  }
  return C(0);
}

// Binary op `op` on compute type C: R is C for the ops whose result has the
// input type and bool for comparisons and logical ops (a complex64 value
// does not convert to bool: those pairings are skipped, as they never run).
template <typename R, typename C>
__device__ __forceinline__ R binary(BinaryOp op, C x, C y) {
  switch (op) {
#define KILN_BINARY_CASE(name)                                                              \
  case BinaryOp::name:                                                                      \
    if constexpr (name##_op::accepts<C> && std::is_constructible_v<R, decltype(name##_op::apply(x, y))>) \
      return static_cast<R>(name##_op::apply(x, y));                                        \
    break;
    KILN_BINARY_OPS(KILN_BINARY_CASE)
#undef KILN_BINARY_CASE
  }
  return R(0);
}

}  // namespace kiln::cuda::ko
