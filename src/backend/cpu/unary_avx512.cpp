// exp, sigmoid, silu and gelu_approx over contiguous float32 / bfloat16 in
// AVX-512 intrinsics, bit for bit the values of kernel_math.inc's scalar
// definitions (which compile's generated kernels and every other layout
// still use).
//
// Why: the compiler's vectorization of the scalar definitions is bound by
// its arithmetic, not by memory. Without instructions it cannot reach from
// scalar code, exp's 2^n takes nine integer and float ops (vscalefps: one),
// its clamp four (vmaxps / vminps: two) and float -> bfloat16 rounding ten
// (vcvtneps2bf16: one, with the rare subnormal lanes redone exactly, as
// the instruction flushes them to zero). gelu_approx, one thread, data in
// L1 (2-vCPU Xeon with AVX512-BF16): bf16 0.66 -> 0.46 ns per element,
// float32 0.51 -> 0.39.
//
// Why the results agree: the same operations in the same order, and
//  - scalef(p, n) = p 2^n rounded once; the scalar p * 2^(n/2) * 2^(n - n/2)
//    rounds once as well (p * 2^(n/2) is a normal float for n >= -150);
//  - max / min return the bound for a NaN x where the scalar clamp passes it
//    through; a NaN x takes its own lanes' value at the end either way;
//  - vcvtneps2bf16 rounds to nearest even and quiets a NaN keeping its sign
//    and top payload bits, as float_to_bf16 does, except for subnormals.
// tests/test_unary_avx512.cpp checks every bfloat16 input and 2^22 float32
// ones (NaNs, infinities, subnormals) against the scalar path, so a change
// to kernel_math.inc's constants that is not made here too fails there.
#include "backend/cpu/unary_avx512.h"

#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/avx512_target.h"
#include "backend/cpu/elementwise.h"
#include "backend/cpu/gemm_avx512_store.h"

// The whole file (its lambdas included) is AVX-512 code: callers check the
// CPU first. AVX512-BF16 instructions appear only in to_bf16_native.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")

namespace kiln::cpu {
namespace {

inline __m512 set(float v) { return _mm512_set1_ps(v); }

// simd::exp without its NaN pass-through (callers put x back). Not
// exp_avx512.h's shorter exp, whose values differ from simd::exp's.
inline __m512 exp_core(__m512 x) {
  __m512 xc = _mm512_min_ps(_mm512_max_ps(x, set(-104.0f)), set(89.0f));
  __m512 t = _mm512_fmadd_ps(xc, set(1.44269504088896341f), set(12582912.0f));
  __m512 n = _mm512_sub_ps(t, set(12582912.0f));
  __m512 r = _mm512_fmadd_ps(n, set(-0.693359375f), xc);
  r = _mm512_fmadd_ps(n, set(2.12194440e-4f), r);
  __m512 p = set(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, set(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, set(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, set(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, set(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, set(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), set(1.0f));
  return _mm512_scalef_ps(p, n);
}

inline __mmask16 is_nan(__m512 x) { return _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q); }

// sigmoid_from(x, e) without its NaN select: 1 / (1 + e) for x >= 0, else
// e / (1 + e) as e * (1 / (1 + e)).
inline __m512 sigmoid_core(__m512 x, __m512 e) {
  __m512 r = _mm512_div_ps(set(1.0f), _mm512_add_ps(set(1.0f), e));
  __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_mul_ps(r, neg, e, r);
}

inline __m512 neg_abs(__m512 x) { return _mm512_or_ps(x, set(-0.0f)); }

template <UnaryOp op>
inline __m512 apply(__m512 x) {
  const __mmask16 nan = is_nan(x);
  if constexpr (op == UnaryOp::exp) {
    return _mm512_mask_mov_ps(exp_core(x), nan, x);
  } else if constexpr (op == UnaryOp::sigmoid) {
    return _mm512_mask_mov_ps(sigmoid_core(x, exp_core(neg_abs(x))), nan, x);
  } else if constexpr (op == UnaryOp::silu) {
    // x * x for a NaN x: the scalar x * sigmoid_from(x, e) multiplies x by x.
    __m512 s = _mm512_mask_mov_ps(sigmoid_core(x, exp_core(neg_abs(x))), nan, x);
    return _mm512_mul_ps(x, s);
  } else {
    static_assert(op == UnaryOp::gelu_approx);
    // x / (1 + exp(-2u)), u = sqrt(2/pi) * fma(0.044715 x x, x, x); for a NaN
    // x the scalar exp returns x and x / (1 + x) is x quieted, i.e. x + x.
    __m512 t = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_mul_ps(set(0.044715f), x), x), x, x);
    __m512 u = _mm512_mul_ps(set(0.7978845608028654f), t);
    __m512 y = _mm512_div_ps(x, _mm512_add_ps(set(1.0f), exp_core(_mm512_mul_ps(set(-2.0f), u))));
    return _mm512_mask_add_ps(y, nan, x, x);
  }
}

inline __m512 load_bf16(const uint16_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

inline __m256i to_bf16_native(__m512 y) {
  __m256i r = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(y));
  const __mmask16 sub = _mm512_fpclass_ps_mask(y, 0x20);  // subnormal
  if (__builtin_expect(sub != 0, 0)) r = _mm256_mask_mov_epi16(r, sub, gemm_detail::round_to_bf16(y));
  return r;
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
    if constexpr (native) return to_bf16_native(y);
    else
      return gemm_detail::round_to_bf16(y);
  };
  prefetched_blocks(src, n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i += 16) {
      const __mmask16 m = e - i >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (e - i)) - 1);
      _mm256_mask_storeu_epi16(dst + i, m, convert(apply<op>(load_bf16(src + i, m))));
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
    default:
      return false;
  }
}

}  // namespace kiln::cpu

#pragma GCC pop_options
