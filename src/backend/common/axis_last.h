#pragma once
// An array seen as rows along one axis (the kernels that work on whole rows:
// sorts, scans): the shape and input strides with that axis moved last, and
// the strides a row-major output of the array's shape has in the same
// permutation (to write row-major results back). Each backend adds its own
// copy when the permuted input is not row-contiguous.
#include "core/array_desc.h"
#include "core/ops_util.h"

namespace kiln::layout {

struct AxisLast {
  Shape shape;
  Strides in_strides;
  Strides out_strides;
  int64_t len = 0;  // the axis' extent: the length of a row
  bool contiguous = false;  // the permuted input is already row-major
};

inline AxisLast axis_last(const array& a, int axis) {
  const auto& d = *a.desc();
  AxisLast r;
  Strides rm = row_major_strides(d.shape);
  auto take = [&](int i) {
    r.shape.push_back(d.shape[i]);
    r.in_strides.push_back(d.strides[i]);
    r.out_strides.push_back(rm[i]);
  };
  for (int i = 0; i < a.ndim(); ++i) {
    if (i != axis) take(i);
  }
  take(axis);
  r.len = d.shape[axis];
  r.contiguous = detail::is_row_contiguous(r.shape, r.in_strides);
  return r;
}

}  // namespace kiln::layout
