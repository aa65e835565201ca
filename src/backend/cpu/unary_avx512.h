#pragma once
// exp, sigmoid, silu and gelu_approx over contiguous float32 / bfloat16 with
// AVX-512 intrinsics, bit-exact with the scalar definitions (see the .cpp).
#include <cstdint>

#include "core/primitives.h"
#include "kiln/dtype.h"

namespace kiln::cpu {

// dst[i] = op(src[i]) for i < n over the threads, where the CPU has AVX-512
// (the caller checks); bf16_instructions where it has AVX512-BF16 too.
// Returns false, doing nothing, for other ops and dtypes.
bool unary_avx512(UnaryOp op, Dtype t, const void* src, void* dst, int64_t n, bool bf16_instructions);

}  // namespace kiln::cpu
