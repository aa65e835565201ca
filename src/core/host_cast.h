#pragma once
// The one conversion core does on the host itself (arrays built from host
// data, item()): n contiguous elements of dtype s to dtype d with the cast
// rules of every backend (backend/common/op_math.inc). The CPU backend,
// always linked, implements it (backend/cpu/copy.cpp), so core includes no
// backend header.
#include <cstddef>

#include "kiln/dtype.h"

namespace kiln::detail {

void host_cast(const void* src, Dtype s, void* dst, Dtype d, size_t n);

}  // namespace kiln::detail
