#pragma once
// AVX-512 kernels for the float reductions (sum, max, min over float32,
// bfloat16 and float16 inputs, accumulated in float32). Only call them
// when cpu_target() >= CpuTarget::avx512. They run on the calling thread;
// reduce.cpp splits the work across threads.
#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::cpu {

enum class VecReduce { sum, max, min };

// True when the kernels below handle inputs of this dtype.
bool vec_reduce_supports(Dtype dt);

// out[r] = reduce(in[r * ld : r * ld + len]) for r in [0, rows); len >= 1.
// max and min return NaN for a row holding a NaN; sums are blocked and
// compensated (an error of a few ulps, whatever the length).
void reduce_rows_avx512(Dtype dt, const void* in, int64_t rows, int64_t len, int64_t ld, VecReduce op, float* out);

// acc[j] = reduce(acc[j], in[i * ld + j]) for i in [0, rows), j in [0, width).
// Sums are compensated: the total is acc[j] - comp[j] (comp starts at 0 with
// acc), and `block` is scratch of `width` floats; max and min ignore both.
void accumulate_columns_avx512(Dtype dt, const void* in, int64_t rows, int64_t width, int64_t ld, VecReduce op,
                               float* acc, float* comp, float* block);

}  // namespace kiln::cpu
