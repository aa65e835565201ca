// Unary elementwise kernels. The op layer casts integer inputs of floating
// ops to float32, so transcendental ops only see floating types; float32
// and the 16-bit floats use the vectorizable versions in simd_math.h (the
// op definitions live in backend/common/op_math.inc, shared with compile's
// fused kernels and the CUDA kernels).
#include <cmath>

#include "backend/cpu/avx512_target.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/elementwise.h"
#include "backend/cpu/op_functors.h"
#include "backend/cpu/unary_avx512.h"
#include "core/primitives.h"

namespace kiln {
namespace {

// Contiguous float32 / bfloat16 / float16 with AVX-512 (16 floats a
// vector) where the CPU has it: the math ops (exp, tanh, gelu, silu, ...)
// are bound by their arithmetic, and the library's baseline build is AVX2.
// The 16-bit conversions are kernel_math.inc's branch-free ones, bit-exact
// with bfloat16_t / float16_t, so the values are those of unary_loop. On a
// Zen 4 VM (2^26 elements, 2 threads), add then gelu_approx: float32 52 ->
// 43.5 ms, bfloat16 57.7 -> 39.2 ms.
template <typename T, typename F>
KILN_AVX512_WIDE void wide_block(const T* src, T* dst, int64_t n, F f) {
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t i = 0; i < n; ++i) dst[i] = f(src[i]);
  } else if constexpr (std::is_same_v<T, bfloat16_t>) {
    for (int64_t i = 0; i < n; ++i) dst[i].bits = cpu::simd::float_to_bf16(f(cpu::simd::bf16_to_float(src[i].bits)));
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i].bits = cpu::simd::float_to_f16(f(cpu::simd::f16_to_float(src[i].bits)));
  }
}

template <typename T, typename F>
void wide_range(const T* src, T* dst, int64_t n, F f) {
  cpu::prefetched_blocks(src, n, [&](int64_t b, int64_t e) { wide_block(src + b, dst + b, e - b, f); });
}

template <typename T, typename F>
bool try_wide(const array& in, array& out, F f) {
  constexpr bool floating = std::is_same_v<T, float> || std::is_same_v<T, bfloat16_t> || std::is_same_v<T, float16_t>;
  if constexpr (floating) {
    static const bool wide = cpu::cpu_target() >= cpu::CpuTarget::avx512;
    const auto& d = *in.desc();
    if (!wide || !detail::is_row_contiguous(d.shape, d.strides)) return false;
    const T* src = reinterpret_cast<const T*>(detail::data_ptr(in));
    T* dst = reinterpret_cast<T*>(detail::data_ptr(out));
    cpu::parallel_for(static_cast<int64_t>(out.size()), cpu::kElementwiseGrain,
                      [&](int64_t b, int64_t e) { wide_range(src + b, dst + b, e - b, f); });
    return true;
  }
  return false;
}

template <typename T>
void run_unary(UnaryOp op, const array& in, array& out) {
  using C = cpu::compute_t<T>;
  const cpu::CpuTarget target = cpu::cpu_target();  // honours set_cpu_target_override
  if (target >= cpu::CpuTarget::avx512 && detail::is_row_contiguous(in.desc()->shape, in.desc()->strides) &&
      cpu::unary_avx512(op, in.dtype(), detail::data_ptr(in), detail::data_ptr(out), static_cast<int64_t>(out.size()),
                        target >= cpu::CpuTarget::avx512_bf16)) {
    return;
  }
  auto go = [&](auto fn) {
    if (!try_wide<T>(in, out, fn)) cpu::unary_loop<T, T>(in, out, fn);
  };
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
