#pragma once
#include <cstddef>
#include <optional>

#include "kiln/array.h"

namespace kiln::cpu {
// Copies (and casts) elements laid out by src_strides into dst laid out by
// dst_strides, for any shape.
void copy_strided(const void* src, Dtype s, const Shape& shape, const Strides& src_strides, void* dst, Dtype d,
                  const Strides& dst_strides);
// Copies `in` into `out`'s (allocated, row-major) buffer.
void copy_to_row_major(const array& in, array& out);

// Whether an op that reads and writes `bytes` in all should write its output
// with non-temporal stores: only when the data cannot stay in the last-level
// cache anyway (then streaming saves reading each output line before writing
// it; otherwise it would push into DRAM what the next op could read from
// cache).
bool streaming_pays(size_t bytes);
// Test hook: streaming_pays(b) becomes b >= bytes; SIZE_MAX restores the
// cache-size rule.
void set_streaming_threshold(size_t bytes);
}  // namespace kiln::cpu
