#pragma once
// vec_math_avx512.inc's 16-lane ops in kiln::cpu::vec for the library's
// AVX-512 kernels (the generated kernels paste the same text): compiled for
// AVX-512 F/BW/VL/DQ whatever the includer's target, so every translation
// unit has the same definitions; callers are AVX-512 code (a target
// attribute or pragma) on CPUs that have it.
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/avx512_target.h"  // GCC 12 warnings of the AVX-512 headers

// (clang has no target pragma: its builds here, the fuzzers', enable
// AVX-512 for the whole library.)
#ifndef __clang__
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")
#endif
namespace kiln::cpu::vec {
#include "backend/cpu/vec_math_avx512.inc"
}  // namespace kiln::cpu::vec
#ifndef __clang__
#pragma GCC pop_options
#endif
