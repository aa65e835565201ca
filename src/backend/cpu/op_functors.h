#pragma once
// Dispatch from an op enum to its definition (src/backend/common/op_math.inc
// through backend/cpu/op_math.h), shared by the per-op kernels (unary.cpp,
// binary.cpp) and compile's interpreter (compiled.cpp).
//
// with_unary_op<C>(op, go) calls go(f) with a captureless functor f(C) for
// the op on compute type C (float for the 16-bit floats) and returns true,
// or returns false when the op is not defined for C. with_binary_op<C> calls
// same(f) for ops whose result has the input type and to_bool(f) for
// comparisons and logical ops.
#include "backend/cpu/op_math.h"
#include "core/primitives.h"

namespace kiln::cpu {

template <typename C, typename Go>
bool with_unary_op(UnaryOp op, Go&& go) {
  switch (op) {
#define KILN_UNARY_CASE(name)                                  \
  case UnaryOp::name:                                          \
    if constexpr (ko::name##_op::accepts<C>) {                 \
      go([](C x) { return ko::name##_op::apply(x); });         \
      return true;                                             \
    }                                                          \
    return false;
    KILN_UNARY_OPS(KILN_UNARY_CASE)
#undef KILN_UNARY_CASE
  }
  return false;
}

template <typename C, typename Same, typename ToBool>
bool with_binary_op(BinaryOp op, Same&& same, ToBool&& to_bool) {
  switch (op) {
#define KILN_BINARY_CASE(name)                                                      \
  case BinaryOp::name:                                                              \
    if constexpr (ko::name##_op::accepts<C>) {                                      \
      if constexpr (ko::name##_op::to_bool) {                                       \
        to_bool([](C x, C y) { return ko::name##_op::apply(x, y); });               \
      } else {                                                                      \
        same([](C x, C y) { return ko::name##_op::apply(x, y); });                  \
      }                                                                             \
      return true;                                                                  \
    }                                                                               \
    return false;
    KILN_BINARY_OPS(KILN_BINARY_CASE)
#undef KILN_BINARY_CASE
  }
  return false;
}

}  // namespace kiln::cpu
