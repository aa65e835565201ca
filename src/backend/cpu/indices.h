#pragma once
// Reading index arrays on the CPU (indexing.cpp): the gathers, scatters
// and dynamic slices share these.
#include <cstdint>
#include <vector>

#include "kiln/array.h"

namespace kiln::cpu {
// Element i (in elements from p) of an integer index array as int64.
int64_t read_index(const char* p, Dtype t, int64_t i);
// Row-major int64 copy of an index array, negative values wrapped once by
// extent, each checked to lie in [0, extent) (kiln::Error naming op, a and idx).
std::vector<int64_t> load_indices(const array& idx, int64_t extent, const char* op, const array& a);
}  // namespace kiln::cpu
