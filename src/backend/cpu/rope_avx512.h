#pragma once
// fast::rope's rows over a shared cos / sin table in AVX-512 (see the .cpp).
#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::cpu {

// Rows [row_begin, row_end) of x (d features each; row r at position
// r % T_len) rotated into y: the first dims features by the table rows
// cf / sf [T_len][dims / 2] (sin already signed), the rest copied; with
// `stream`, each row through an L1 buffer and out with streaming stores.
struct RopeTableRows {
  const void* x;
  void* y;
  int64_t row_begin, row_end, T_len, d;
  int dims;
  bool traditional;
  const float* cf;
  const float* sf;
  bool stream;
};

// Runs the rows where the CPU has AVX-512 (the caller checks;
// bf16_instructions where it has AVX512-BF16). False, doing nothing, for
// dtypes other than float32 and bfloat16.
bool rope_table_rows_avx512(Dtype t, const RopeTableRows& rows, bool bf16_instructions);

}  // namespace kiln::cpu
