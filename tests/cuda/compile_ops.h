#pragma once
// Which elementwise ops are defined on which dtype (op_math.inc's
// `accepts`, through the CPU's dispatch), for the GPU compile tests that
// run every op on every dtype.
#include <vector>

#include "backend/cpu/op_functors.h"
#include "core/primitives.h"

namespace kiln::test {

template <typename F>
bool with_compute_type(Dtype t, F&& f) {
  switch (t) {
    case bool_: return f(bool{});
    case uint8: return f(uint8_t{});
    case uint16: return f(uint16_t{});
    case uint32: return f(uint32_t{});
    case uint64: return f(uint64_t{});
    case int8: return f(int8_t{});
    case int16: return f(int16_t{});
    case int32: return f(int32_t{});
    case int64: return f(int64_t{});
    case float16:
    case bfloat16:
    case float32: return f(float{});
    case float64: return f(double{});
  }
  return false;
}

inline bool unary_accepts(UnaryOp op, Dtype t) {
  return with_compute_type(t, [&](auto c) { return cpu::with_unary_op<decltype(c)>(op, [](auto) {}); });
}
inline bool binary_accepts(BinaryOp op, Dtype t) {
  return with_compute_type(t, [&](auto c) { return cpu::with_binary_op<decltype(c)>(op, [](auto) {}, [](auto) {}); });
}

inline std::vector<UnaryOp> unary_ops_on(Dtype t) {
  std::vector<UnaryOp> ops;
  for (int k = 0; k < kUnaryOpCount; ++k) {
    if (unary_accepts(static_cast<UnaryOp>(k), t)) ops.push_back(static_cast<UnaryOp>(k));
  }
  return ops;
}
inline std::vector<BinaryOp> binary_ops_on(Dtype t) {
  std::vector<BinaryOp> ops;
  for (int k = 0; k < kBinaryOpCount; ++k) {
    if (binary_accepts(static_cast<BinaryOp>(k), t)) ops.push_back(static_cast<BinaryOp>(k));
  }
  return ops;
}

inline const std::vector<Dtype>& all_dtypes() {
  static const std::vector<Dtype> v = {bool_, uint8, uint16, uint32, uint64, int8,   int16,
                                       int32, int64, float16, bfloat16, float32, float64};
  return v;
}

}  // namespace kiln::test
