// Unary elementwise kernels. The op layer casts integer inputs of floating
// ops to float32, so transcendental ops only see floating types; float32
// and the 16-bit floats use the vectorizable versions in simd_math.h (the
// op definitions live in backend/common/op_math.inc, shared with compile's
// fused kernels and the CUDA kernels).
#include <cmath>

#include "backend/cpu/elementwise.h"
#include "backend/cpu/op_functors.h"
#include "core/primitives.h"

namespace kiln {
namespace {

template <typename T>
void run_unary(UnaryOp op, const array& in, array& out) {
  using C = cpu::compute_t<T>;
  auto go = [&](auto fn) { cpu::unary_loop<T, T>(in, out, fn); };
  if (cpu::with_unary_op<C>(op, go)) return;
  throw Error(std::string("[") + unary_op_name(op) + "] unsupported dtype " + dtype_name(in.dtype()));
}

}  // namespace

void Unary::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  if (in.dtype() == out.dtype() && in.desc()->offset == 0) {
    detail::allocate_or_donate(out, in, unary_op_name(op_));
  } else {
    detail::allocate(out, unary_op_name(op_));
  }
  cpu::dispatch_with_complex(in.dtype(), [&](auto tag) { run_unary<typename decltype(tag)::type>(op_, in, out); });
}

}  // namespace kiln
