#pragma once
// Layout helpers both backends use. Iteration over arbitrary layouts (negative strides from flip, zero strides
// from broadcasting). Dimensions that are contiguous with each other in
// every operand are merged first, so most layouts reduce to one or two
// loops; the innermost loop is handed to a kernel as (count, strides).
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "kiln/array.h"

namespace kiln::layout {

template <int N>
struct Layout {
  std::vector<int64_t> shape;
  std::array<std::vector<int64_t>, N> strides;
};

// Merges adjacent dims where every operand's stride chains (outer stride ==
// inner stride * inner extent); drops size-1 dims.
template <int N>
Layout<N> collapse(const Shape& shape, const std::array<const Strides*, N>& strides) {
  Layout<N> out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !out.shape.empty();
    for (int k = 0; k < N && merge; ++k) {
      merge = out.strides[k].back() == (*strides[k])[d] * shape[d];
    }
    if (merge) {
      out.shape.back() *= shape[d];
      for (int k = 0; k < N; ++k) out.strides[k].back() = (*strides[k])[d];
    } else {
      out.shape.push_back(shape[d]);
      for (int k = 0; k < N; ++k) out.strides[k].push_back((*strides[k])[d]);
    }
  }
  if (out.shape.empty()) {
    out.shape.push_back(1);
    for (int k = 0; k < N; ++k) out.strides[k].push_back(0);
  }
  return out;
}

// Visits rows of the collapsed layout: for each outer position in
// [begin, end) (positions count rows of the innermost dim), calls
// fn(offsets, inner_count, inner_strides).
template <int N, typename F>
void for_each_row(const Layout<N>& l, int64_t begin, int64_t end, F&& fn) {
  int nd = static_cast<int>(l.shape.size());
  int64_t inner = l.shape[nd - 1];
  std::array<int64_t, N> inner_strides;
  for (int k = 0; k < N; ++k) inner_strides[k] = l.strides[k][nd - 1];
  std::vector<int64_t> idx(nd > 1 ? nd - 1 : 0, 0);
  std::array<int64_t, N> off{};
  // Start position.
  int64_t rem = begin;
  for (int d = nd - 2; d >= 0; --d) {
    idx[d] = rem % l.shape[d];
    rem /= l.shape[d];
    for (int k = 0; k < N; ++k) off[k] += idx[d] * l.strides[k][d];
  }
  for (int64_t r = begin; r < end; ++r) {
    fn(off, inner, inner_strides);
    for (int d = nd - 2; d >= 0; --d) {
      for (int k = 0; k < N; ++k) off[k] += l.strides[k][d];
      if (++idx[d] < l.shape[d]) break;
      for (int k = 0; k < N; ++k) off[k] -= idx[d] * l.strides[k][d];
      idx[d] = 0;
    }
  }
}

template <int N>
int64_t num_rows(const Layout<N>& l) {
  int64_t r = 1;
  for (size_t d = 0; d + 1 < l.shape.size(); ++d) r *= l.shape[d];
  return r;
}

// The strides that view data of (in_shape, in_strides) as out_shape without
// a copy, or nullopt when the layout does not allow it (as numpy's reshape
// decides between a view and a copy).
std::optional<Strides> reshape_strides(const Shape& in_shape, const Strides& in_strides, const Shape& out_shape);

}  // namespace kiln::layout
