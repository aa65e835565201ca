#pragma once
// Shared by the fast ops' CPU kernels (fast_norm.cpp, rope.cpp): a
// row-major view of an input, copied only when its layout is not one.
#include <memory>

#include "backend/cpu/copy.h"
#include "core/allocator.h"
#include "core/array_desc.h"

namespace kiln::cpu {

struct RowMajorInput {
  std::shared_ptr<Buffer> owned;  // the copy, when one was needed
  const char* data;
};

inline RowMajorInput row_major_input_of(const array& in, const char* op) {
  const auto& d = *in.desc();
  if (detail::is_row_contiguous(d.shape, d.strides)) return {nullptr, detail::data_ptr(in)};
  auto buf = allocator::malloc(in.nbytes(), op);
  copy_strided(detail::data_ptr(in), d.dtype, d.shape, d.strides, buf->ptr(), d.dtype, row_major_strides(d.shape));
  return {buf, static_cast<const char*>(buf->ptr())};
}

}  // namespace kiln::cpu
