#pragma once
// The rows along one axis of an array, for the kernels that work on whole
// rows (sorts, scans): a contiguous device copy with the axis moved last
// (a view when the layout already is), the permuted shape, and the strides
// a row-major output of the array's shape has in that permutation (to copy
// row-major results back).
#include "backend/cuda/cuda_common.h"
#include "core/ops_util.h"

namespace kiln::cuda {

struct Rows {
  const char* data;
  Shape shape;
  Strides out_strides;
  int64_t len;
};

inline Rows rows_of(const array& a, int axis, const char* op) {
  const auto& d = *a.desc();
  Rows r;
  Strides pstrides;
  Strides rm = row_major_strides(d.shape);
  for (int i = 0; i < a.ndim(); ++i) {
    if (i == axis) continue;
    r.shape.push_back(d.shape[i]);
    pstrides.push_back(d.strides[i]);
    r.out_strides.push_back(rm[i]);
  }
  r.shape.push_back(d.shape[axis]);
  pstrides.push_back(d.strides[axis]);
  r.out_strides.push_back(rm[axis]);
  r.len = d.shape[axis];
  r.data = in_ptr(a);
  if (!detail::is_row_contiguous(r.shape, pstrides)) {
    char* tmp = static_cast<char*>(scratch(a.nbytes(), op));
    copy_strided(r.data, d.dtype, r.shape, pstrides, tmp, d.dtype, row_major_strides(r.shape), op);
    r.data = tmp;
  }
  return r;
}

}  // namespace kiln::cuda
