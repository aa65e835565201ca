#pragma once
// Shared by the CPU and CUDA reductions: a row-major input's dims grouped
// into runs of kept and reduced axes (size-1 dims dropped), so that
// [kept, reduced] is a row reduction and [reduced, kept] a column one.
#include <cstdint>
#include <vector>

#include "kiln/array.h"

namespace kiln {

struct ReducePlan {
  std::vector<int64_t> sizes;  // extent of each run
  std::vector<bool> reduced;   // whether each run is reduced
};

inline ReducePlan plan_reduction(const Shape& shape, const std::vector<int>& axes) {
  std::vector<bool> is_reduced(shape.size(), false);
  for (int ax : axes) is_reduced[ax] = true;
  ReducePlan plan;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!plan.reduced.empty() && plan.reduced.back() == is_reduced[d]) {
      plan.sizes.back() *= shape[d];
    } else {
      plan.sizes.push_back(shape[d]);
      plan.reduced.push_back(is_reduced[d]);
    }
  }
  return plan;
}

// The general case: a view of row-major data of `shape` with the kept axes
// first and the reduced axes last, so that copying it to row-major order
// leaves one contiguous row of `row_length` elements per output.
struct ReducedLastView {
  Shape shape;
  Strides strides;
  int64_t row_length = 1;
};

inline ReducedLastView reduced_axes_last(const Shape& shape, const std::vector<int>& axes) {
  std::vector<bool> is_reduced(shape.size(), false);
  for (int ax : axes) is_reduced[ax] = true;
  Strides row_major(shape.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    row_major[d] = stride;
    stride *= shape[d];
  }
  ReducedLastView view;
  for (bool reduced_pass : {false, true}) {
    for (size_t d = 0; d < shape.size(); ++d) {
      if (is_reduced[d] != reduced_pass) continue;
      view.shape.push_back(shape[d]);
      view.strides.push_back(row_major[d]);
      if (reduced_pass) view.row_length *= shape[d];
    }
  }
  return view;
}

}  // namespace kiln
