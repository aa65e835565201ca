#pragma once
// The rows along one axis of an array, for the kernels that work on whole
// rows (sorts, scans): a contiguous device copy with the axis moved last
// (a view when the layout already is), the permuted shape, and the strides
// a row-major output of the array's shape has in that permutation (to copy
// row-major results back).
#include "backend/common/axis_last.h"
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
  layout::AxisLast p = layout::axis_last(a, axis);
  Rows r{in_ptr(a), p.shape, p.out_strides, p.len};
  if (!p.contiguous) {
    char* tmp = static_cast<char*>(scratch(a.nbytes(), op));
    copy_strided(r.data, a.dtype(), r.shape, p.in_strides, tmp, a.dtype(), row_major_strides(r.shape), op);
    r.data = tmp;
  }
  return r;
}

}  // namespace kiln::cuda
