// Rearranging ops composed from views, slices and concatenation (MLX's
// atleast_1d/2d/3d, moveaxis, unstack, unflatten, roll, meshgrid).
#include <numeric>
#include <string>

#include "core/ops_util.h"
#include "kiln/ops.h"

namespace kiln {

array atleast_1d(const array& a, StreamOrDevice s) { return a.ndim() == 0 ? reshape(a, {1}, s) : a; }

array atleast_2d(const array& a, StreamOrDevice s) {
  switch (a.ndim()) {
    case 0: return reshape(a, {1, 1}, s);
    case 1: return reshape(a, {1, a.shape(0)}, s);
    default: return a;
  }
}

array atleast_3d(const array& a, StreamOrDevice s) {
  switch (a.ndim()) {
    case 0: return reshape(a, {1, 1, 1}, s);
    case 1: return reshape(a, {1, a.shape(0), 1}, s);
    case 2: return reshape(a, {a.shape(0), a.shape(1), 1}, s);
    default: return a;
  }
}

#define KILN_ATLEAST_VECTOR(NAME)                                                  \
  std::vector<array> NAME(const std::vector<array>& a, StreamOrDevice s) {        \
    std::vector<array> out;                                                        \
    out.reserve(a.size());                                                         \
    for (const auto& x : a) out.push_back(NAME(x, s));                             \
    return out;                                                                    \
  }
KILN_ATLEAST_VECTOR(atleast_1d)
KILN_ATLEAST_VECTOR(atleast_2d)
KILN_ATLEAST_VECTOR(atleast_3d)
#undef KILN_ATLEAST_VECTOR

array moveaxis(const array& a, int source, int destination, StreamOrDevice s) {
  int src = normalize_axis(source, a.ndim(), "moveaxis", a);
  int dst = normalize_axis(destination, a.ndim(), "moveaxis", a);
  if (src == dst) return a;
  std::vector<int> order(a.ndim());
  std::iota(order.begin(), order.end(), 0);
  order.erase(order.begin() + src);
  order.insert(order.begin() + dst, src);
  return transpose(a, order, s);
}

std::vector<array> unstack(const array& a, int axis, StreamOrDevice s) {
  int ax = normalize_axis(axis, a.ndim(), "unstack", a);
  int n = a.shape(ax);
  std::vector<array> out;
  if (n == 0) return out;
  out.reserve(n);
  for (const auto& part : split(a, n, ax, s)) out.push_back(squeeze(part, ax, s));
  return out;
}
std::vector<array> unstack(const array& a, StreamOrDevice s) { return unstack(a, 0, s); }

array unflatten(const array& a, int axis, Shape shape, StreamOrDevice s) {
  if (shape.empty()) fail("unflatten", "the shape to unflatten into cannot be empty", {&a});
  int ax = normalize_axis(axis, a.ndim(), "unflatten", a);
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) fail("unflatten", "only one dimension of " + format_shape(shape) + " can be -1", {&a});
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      fail("unflatten", "negative dimension in " + format_shape(shape), {&a});
    } else {
      known *= shape[i];
    }
  }
  int n = a.shape(ax);
  if (infer >= 0 && known > 0 && n % known == 0) shape[infer] = static_cast<int>(n / known);
  if (infer >= 0 ? (known == 0 || n % known != 0) : known != n) {
    fail("unflatten", "axis " + std::to_string(ax) + " of size " + std::to_string(n) + " cannot be unflattened into " +
                          format_shape(shape), {&a});
  }
  Shape out(a.shape().begin(), a.shape().begin() + ax);
  out.insert(out.end(), shape.begin(), shape.end());
  out.insert(out.end(), a.shape().begin() + ax + 1, a.shape().end());
  return reshape(a, out, s);
}

array roll(const array& a, const Shape& shift, const std::vector<int>& axes, StreamOrDevice s) {
  if (shift.size() < axes.size()) {
    fail("roll", std::to_string(shift.size()) + " shifts given for " + std::to_string(axes.size()) + " axes", {&a});
  }
  Stream st = to_stream(s);
  array result = a;
  for (size_t i = 0; i < axes.size(); ++i) {
    int ax = normalize_axis(axes[i], a.ndim(), "roll", a);
    int64_t n = a.shape(ax);
    if (n == 0) continue;
    // The last (shift mod n) elements move to the front.
    int64_t k = ((static_cast<int64_t>(shift[i]) % n) + n) % n;
    if (k == 0) continue;
    std::vector<array> parts = split(result, Shape{static_cast<int>(n - k)}, ax, st);
    result = concatenate({parts[1], parts[0]}, ax, st);
  }
  return result;
}

namespace {
int total_shift(const Shape& shift, const array& a) {
  int64_t t = std::accumulate(shift.begin(), shift.end(), int64_t{0});
  if (t > INT32_MAX || t < INT32_MIN) fail("roll", "the total shift overflows int32", {&a});
  return static_cast<int>(t);
}
}  // namespace

array roll(const array& a, int shift, StreamOrDevice s) {
  return reshape(roll(reshape(a, {-1}, s), Shape{shift}, std::vector<int>{0}, s), a.shape(), s);
}
array roll(const array& a, const Shape& shift, StreamOrDevice s) { return roll(a, total_shift(shift, a), s); }
array roll(const array& a, int shift, int axis, StreamOrDevice s) {
  return roll(a, Shape{shift}, std::vector<int>{axis}, s);
}
array roll(const array& a, int shift, const std::vector<int>& axes, StreamOrDevice s) {
  return roll(a, Shape(axes.size(), shift), axes, s);
}
array roll(const array& a, const Shape& shift, int axis, StreamOrDevice s) {
  return roll(a, Shape{total_shift(shift, a)}, std::vector<int>{axis}, s);
}

std::vector<array> meshgrid(const std::vector<array>& arrays, bool sparse, const std::string& indexing,
                            StreamOrDevice s) {
  if (indexing != "xy" && indexing != "ij") {
    fail("meshgrid", "indexing must be \"xy\" or \"ij\", got \"" + indexing + "\"", arrays);
  }
  Stream st = to_stream(s);
  int nd = static_cast<int>(arrays.size());
  std::vector<array> out;
  for (int i = 0; i < nd; ++i) {
    // Array i varies along axis i; "xy" swaps the first two axes (numpy).
    int axis = indexing == "xy" && nd > 1 && i < 2 ? 1 - i : i;
    Shape shape(nd, 1);
    shape[axis] = -1;
    out.push_back(reshape(arrays[i], shape, st));
  }
  return sparse ? out : broadcast_arrays(out, st);
}

}  // namespace kiln
