// The attention kernel (attention_kernel.inc) compiled for AVX-512 with
// AVX512-BF16: bf16 prefill tiles multiply on vdpbf16ps (twice the products
// of an fp32 FMA per instruction); everything else as attention_avx512.cpp (16
// float lanes, 16-bit K/V widened in registers).
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/attention_amx.h"
#include "backend/cpu/avx512_target.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/exp_avx512.h"
#include "backend/cpu/simd_math.h"
#include "backend/cpu/threading.h"
#include "kiln/error.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,prefer-vector-width=512")

namespace kiln::cpu {
namespace attention_avx512_bf16 {

#include "backend/cpu/attention_vec_avx512.inc"

// The prefill tiles of bf16 inputs on vdpbf16ps (blocked_bf16).
#define KILN_ATTENTION_BF16_DOT 1
#include "backend/cpu/attention_kernel.inc"
#undef KILN_ATTENTION_BF16_DOT

}  // namespace attention_avx512_bf16

void sdpa_avx512_bf16(const SdpaArgs& a) { attention_avx512_bf16::sdpa_entry(a); }

}  // namespace kiln::cpu

#pragma GCC pop_options
