#pragma once
// AVX-512 softmax over contiguous float32 rows. Only call it when
// cpu_target() >= CpuTarget::avx512; it runs on the calling thread.
#include <cstdint>

namespace kiln::cpu {

// out[r, :] = softmax(in[r, :]) for r in [0, rows), rows of len >= 1
// elements, both row-major. `scratch` holds len floats. `stream` writes the
// output with non-temporal stores (for outputs far larger than the caches:
// no read-for-ownership of the destination lines).
void softmax_rows_avx512(const float* in, float* out, int64_t rows, int64_t len, float* scratch, bool stream);

}  // namespace kiln::cpu
