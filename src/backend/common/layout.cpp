#include "backend/common/layout.h"

namespace kiln::layout {

std::optional<Strides> reshape_strides(const Shape& in_shape, const Strides& in_strides, const Shape& out_shape) {
  // Size-1 dims carry no layout; drop them from the input.
  std::vector<int64_t> ish, ist;
  for (size_t k = 0; k < in_shape.size(); ++k) {
    if (in_shape[k] != 1) {
      ish.push_back(in_shape[k]);
      ist.push_back(in_strides[k]);
    }
  }
  // Walk both shapes in groups of equal element count; inside a group the
  // input's dims must chain (stride = inner stride * inner extent).
  Strides out(out_shape.size(), 0);
  size_t i = 0, o = 0;
  while (o < out_shape.size()) {
    if (out_shape[o] == 1) {
      ++o;
      continue;
    }
    if (i >= ish.size()) return std::nullopt;
    int64_t ic = ish[i], oc = out_shape[o];
    size_t ie = i + 1, oe = o + 1;
    while (ic != oc) {
      if (ic < oc) {
        if (ie >= ish.size()) return std::nullopt;
        ic *= ish[ie++];
      } else {
        if (oe >= out_shape.size()) return std::nullopt;
        oc *= out_shape[oe++];
      }
    }
    for (size_t k = i; k + 1 < ie; ++k) {
      if (ist[k] != ist[k + 1] * ish[k + 1]) return std::nullopt;
    }
    int64_t stride = ist[ie - 1];
    for (size_t m = oe; m-- > o;) {
      out[m] = stride;
      stride *= out_shape[m];
    }
    i = ie;
    o = oe;
  }
  if (i != ish.size()) return std::nullopt;
  return out;
}

}  // namespace kiln::layout
