// The attention kernel (attention_kernel.inc) compiled for AVX-512: 16
// float lanes, 16-bit K/V widened in registers.
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/simd_math.h"
#include "backend/cpu/threading.h"
#include "kiln/error.h"

#include "backend/cpu/avx512_target.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=512")

namespace kiln::cpu {
namespace attention_avx512 {

#include "backend/cpu/attention_vec_avx512.inc"

#include "backend/cpu/attention_kernel.inc"

}  // namespace attention_avx512

void sdpa_avx512(const SdpaArgs& a) { attention_avx512::sdpa_entry(a); }

}  // namespace kiln::cpu

#pragma GCC pop_options
