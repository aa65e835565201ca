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
#define KILN_LIBM_CUDA1(name, fname, dname)                                     \
  __device__ __forceinline__ float name(float x) { return ::fname(x); }       \
  __device__ __forceinline__ double name(double x) { return ::dname(x); }
KILN_LIBM_CUDA1(exp, expf, exp)
KILN_LIBM_CUDA1(expm1, expm1f, expm1)
KILN_LIBM_CUDA1(log, logf, log)
KILN_LIBM_CUDA1(log1p, log1pf, log1p)
KILN_LIBM_CUDA1(log2, log2f, log2)
KILN_LIBM_CUDA1(log10, log10f, log10)
KILN_LIBM_CUDA1(sqrt, sqrtf, sqrt)
KILN_LIBM_CUDA1(sin, sinf, sin)
KILN_LIBM_CUDA1(cos, cosf, cos)
KILN_LIBM_CUDA1(tan, tanf, tan)
KILN_LIBM_CUDA1(asin, asinf, asin)
KILN_LIBM_CUDA1(acos, acosf, acos)
KILN_LIBM_CUDA1(atan, atanf, atan)
KILN_LIBM_CUDA1(sinh, sinhf, sinh)
KILN_LIBM_CUDA1(cosh, coshf, cosh)
KILN_LIBM_CUDA1(tanh, tanhf, tanh)
KILN_LIBM_CUDA1(asinh, asinhf, asinh)
KILN_LIBM_CUDA1(acosh, acoshf, acosh)
KILN_LIBM_CUDA1(atanh, atanhf, atanh)
KILN_LIBM_CUDA1(erf, erff, erf)
KILN_LIBM_CUDA1(erfc, erfcf, erfc)
KILN_LIBM_CUDA1(erfinv, erfinvf, erfinv)
KILN_LIBM_CUDA1(floor, floorf, floor)
KILN_LIBM_CUDA1(ceil, ceilf, ceil)
KILN_LIBM_CUDA1(fabs, fabsf, fabs)
KILN_LIBM_CUDA1(rint, rintf, rint)  // half to even
#undef KILN_LIBM_CUDA1
#define KILN_LIBM_CUDA2(name, fname, dname)                                               \
  __device__ __forceinline__ float name(float x, float y) { return ::fname(x, y); }      \
  __device__ __forceinline__ double name(double x, double y) { return ::dname(x, y); }
KILN_LIBM_CUDA2(pow, powf, pow)
KILN_LIBM_CUDA2(atan2, atan2f, atan2)
KILN_LIBM_CUDA2(fmod, fmodf, fmod)
KILN_LIBM_CUDA2(copysign, copysignf, copysign)
#undef KILN_LIBM_CUDA2
__device__ __forceinline__ float fma(float a, float b, float c) { return ::fmaf(a, b, c); }
__device__ __forceinline__ double fma(double a, double b, double c) { return ::fma(a, b, c); }
__device__ __forceinline__ float exp_approx(float x) { return __expf(x); }
__device__ __forceinline__ double exp_approx(double x) { return ::exp(x); }
template <typename C>
__device__ __forceinline__ C select(bool c, C a, C b) { return c ? a : b; }
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
