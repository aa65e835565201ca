// exp, sigmoid, silu, gelu_approx and tanh over contiguous float32 / bfloat16 in
// AVX-512 intrinsics: the loops over vec_math_avx512.inc's 16-lane forms,
// bit for bit the values of kernel_math.inc's scalar definitions (that file
// says why and how). gelu_approx, one thread, data in L1 (2-vCPU Xeon with
// AVX512-BF16): bf16 0.66 -> 0.46 ns per element, float32 0.51 -> 0.39.
#include "backend/cpu/unary_avx512.h"

#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/avx512_target.h"
#include "backend/cpu/elementwise.h"
#include "backend/cpu/vec_math_avx512.h"

// The whole file (its lambdas included) is AVX-512 code: callers check the
// CPU first. AVX512-BF16 instructions appear only in to_bf16_native.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")

namespace kiln::cpu {
namespace {

template <UnaryOp op>
inline __m512 apply(__m512 x) {
  if constexpr (op == UnaryOp::exp)
    return vec::exp(x);
  else if constexpr (op == UnaryOp::sigmoid)
    return vec::sigmoid(x);
  else if constexpr (op == UnaryOp::silu)
    return vec::silu(x);
  else if constexpr (op == UnaryOp::tanh)
    return vec::tanh(x);
  else
    return vec::gelu_approx(x);
}

template <UnaryOp op>
void run_f32(const float* src, float* dst, int64_t n) {
  prefetched_blocks(src, n, [&](int64_t b, int64_t e) {
    int64_t i = b;
    for (; i + 16 <= e; i += 16) _mm512_storeu_ps(dst + i, apply<op>(_mm512_loadu_ps(src + i)));
    if (i < e) {
      const __mmask16 m = static_cast<__mmask16>((1u << (e - i)) - 1);
      _mm512_mask_storeu_ps(dst + i, m, apply<op>(_mm512_maskz_loadu_ps(m, src + i)));
    }
  });
}

template <UnaryOp op, bool native>
void run_bf16(const uint16_t* src, uint16_t* dst, int64_t n) {
  auto convert = [](__m512 y) {
    if constexpr (native)
      return vec::to_bf16_native(y);
    else
      return vec::to_bf16(y);
  };
  prefetched_blocks(src, n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i += 16) {
      const __mmask16 m = e - i >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (e - i)) - 1);
      _mm256_mask_storeu_epi16(dst + i, m, convert(apply<op>(vec::load_bf16(src + i, m))));
    }
  });
}

template <UnaryOp op>
bool run(Dtype t, const void* src, void* dst, int64_t n, bool bf16_instructions) {
  auto go = [&](auto kernel) {
    parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) { kernel(b, e); });
    return true;
  };
  if (t == float32) {
    const float* s = static_cast<const float*>(src);
    float* d = static_cast<float*>(dst);
    return go([&](int64_t b, int64_t e) { run_f32<op>(s + b, d + b, e - b); });
  }
  if (t == bfloat16) {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    uint16_t* d = static_cast<uint16_t*>(dst);
    if (bf16_instructions) return go([&](int64_t b, int64_t e) { run_bf16<op, true>(s + b, d + b, e - b); });
    return go([&](int64_t b, int64_t e) { run_bf16<op, false>(s + b, d + b, e - b); });
  }
  return false;
}

}  // namespace

bool unary_avx512(UnaryOp op, Dtype t, const void* src, void* dst, int64_t n, bool bf16_instructions) {
  switch (op) {
    case UnaryOp::exp:
      return run<UnaryOp::exp>(t, src, dst, n, bf16_instructions);
    case UnaryOp::sigmoid:
      return run<UnaryOp::sigmoid>(t, src, dst, n, bf16_instructions);
    case UnaryOp::silu:
      return run<UnaryOp::silu>(t, src, dst, n, bf16_instructions);
    case UnaryOp::gelu_approx:
      return run<UnaryOp::gelu_approx>(t, src, dst, n, bf16_instructions);
    case UnaryOp::tanh:
      return run<UnaryOp::tanh>(t, src, dst, n, bf16_instructions);
    default:
      return false;
  }
}

}  // namespace kiln::cpu

#pragma GCC pop_options
