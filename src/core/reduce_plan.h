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

}  // namespace kiln
