// scaled_matmul: the FP8 GEMM with per-tensor or block scales (Kiln's
// extension, include/kiln/ops.h).
#include <string>

#include "backend/common/scaled_mm.h"
#include "core/ops_util.h"
#include "core/primitives_scaled_mm.h"
#include "kiln/ops.h"

namespace kiln {

array scaled_matmul(const array& a, const array& b, const array& scale_a, const array& scale_b, Dtype out_dtype,
                    StreamOrDevice s) {
  const char* op = "scaled_matmul";
  std::initializer_list<const array*> in{&a, &b, &scale_a, &scale_b};
  if (a.ndim() != 2 || b.ndim() != 2) fail(op, "a and b must be 2-d ([M, K] and [K, N]; no batch axes)", in);
  if (!is_fp8(a.dtype()) || !is_fp8(b.dtype())) {
    fail(op, "a and b must be float8_e4m3fn or float8_e5m2 (astype them, with their scales, first)", in);
  }
  if (a.dtype() == float8_e5m2 && b.dtype() == float8_e5m2) {
    fail(op, "float8_e5m2 x float8_e5m2 is not supported (cuBLASLt refuses it): make one operand float8_e4m3fn", in);
  }
  if (out_dtype != bfloat16 && out_dtype != float32) {
    fail(op, std::string("out_dtype must be bfloat16 or float32, not ") + dtype_name(out_dtype), in);
  }
  const int M = a.shape(0), K = a.shape(1), N = b.shape(1);
  if (b.shape(0) != K) {
    fail(op, "inner dimensions differ: " + format_shape(a.shape()) + " x " + format_shape(b.shape()), in);
  }
  if (scale_a.dtype() != float32 || scale_b.dtype() != float32) fail(op, "the scales must be float32", in);
  const bool scalar_a = scale_a.ndim() <= 1 && scale_a.size() == 1;
  const bool scalar_b = scale_b.ndim() <= 1 && scale_b.size() == 1;
  const int kb = static_cast<int>(smm::blocks(K)), nb = static_cast<int>(smm::blocks(N));
  const Shape block_a{M, kb}, block_b{kb, nb};
  bool block;
  if (scalar_a && scalar_b) {
    block = false;
  } else if (scale_a.shape() == block_a && scale_b.shape() == block_b) {
    block = true;
  } else {
    fail(op,
         "scales must be two scalars (per tensor) or scale_a " + format_shape(block_a) + " and scale_b " +
             format_shape(block_b) + " (1x128 blocks of a, 128x128 blocks of b)",
         in);
  }
  Stream st = to_stream(s);
  array sa = contiguous(block ? scale_a : reshape(scale_a, {1}, st), st);
  array sb = contiguous(block ? scale_b : reshape(scale_b, {1}, st), st);
  return make_node<ScaledMatmul>({M, N}, out_dtype, {a, b, sa, sb}, st, block);
}

std::vector<Shape> ScaledMatmul::output_shapes(const std::vector<array>& inputs) {
  return {{inputs[0].shape(0), inputs[1].shape(1)}};
}

bool ScaledMatmul::is_equivalent(const Primitive& o) const {
  auto* q = dynamic_cast<const ScaledMatmul*>(&o);
  return q && q->block_ == block_;
}

std::string ScaledMatmul::describe() const {
  return std::string("ScaledMatmul(") + (block_ ? "block scales" : "per-tensor scales") + ")";
}

}  // namespace kiln
