#pragma once
// For files whose kernels are compiled for AVX-512 by function attribute
// while the rest of the library targets x86-64-v3 (chosen at run time
// through cpu_features.h). Include it after the system headers.

// GCC 12's AVX-512 headers seed unmasked intrinsics with _mm512_undefined_*(),
// which -Wall reports as uninitialised once inlined (GCC PR 105593).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define KILN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
// For plain loops left to the compiler's vectorizer: without the width
// preference GCC vectorizes AVX-512 code 256 bits wide.
#define KILN_AVX512_WIDE __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=512")))
