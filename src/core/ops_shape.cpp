// Shape and data-movement ops. Views (reshape, transpose, broadcast,
// slice, expand/squeeze) are nodes whose evaluation shares the input's
// buffer; the rest are composed from them or have their own primitive.
#include <algorithm>
#include <numeric>

#include "core/ops_util.h"
#include "core/primitives.h"
#include "kiln/ops.h"

namespace kiln {
namespace {
// A result dimension computed in 64 bits, checked to fit Shape's int.
int checked_dim(int64_t d, const char* op, const array& a) {
  if (d > INT32_MAX) fail(op, "a result dimension of " + std::to_string(d) + " exceeds 2^31-1", {&a});
  return static_cast<int>(d);
}
}  // namespace

array reshape(const array& a, Shape shape, StreamOrDevice s) {
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) fail("reshape", "only one dimension can be -1 in " + format_shape(shape), {&a});
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      fail("reshape", "negative dimension in " + format_shape(shape), {&a});
    } else {
      known *= shape[i];
    }
  }
  int64_t size = static_cast<int64_t>(a.size());
  if (infer >= 0) {
    if (known == 0 || size % known != 0) {
      fail("reshape", "cannot reshape an array of shape " + format_shape(a.shape()) + " to " + format_shape(shape), {&a});
    }
    if (size / known > INT32_MAX) {
      fail("reshape", "inferred dimension of " + format_shape(shape) + " exceeds 2^31-1", {&a});
    }
    shape[infer] = static_cast<int>(size / known);
  } else if (known != size) {
    fail("reshape",
         "cannot reshape an array of shape " + format_shape(a.shape()) + " (" + std::to_string(size) +
             " elements) to " + format_shape(shape) + " (" + std::to_string(known) + " elements)",
         {&a});
  }
  if (shape == a.shape()) return a;
  Shape target = shape;
  return make_node<Reshape>(std::move(shape), a.dtype(), {a}, to_stream(s), std::move(target));
}

array transpose(const array& a, const std::vector<int>& axes_in, StreamOrDevice s) {
  if (static_cast<int>(axes_in.size()) != a.ndim()) {
    fail("transpose", "axes " + format_shape(axes_in) + " do not match an array of " + std::to_string(a.ndim()) +
                          " dimensions", {&a});
  }
  std::vector<int> axes;
  std::vector<bool> used(a.ndim(), false);
  for (int ax : axes_in) {
    int n = normalize_axis(ax, a.ndim(), "transpose", a);
    if (used[n]) fail("transpose", "axes " + format_shape(axes_in) + " repeat an axis", {&a});
    used[n] = true;
    axes.push_back(n);
  }
  Shape shape(a.ndim());
  for (int i = 0; i < a.ndim(); ++i) shape[i] = a.shape()[axes[i]];
  return make_node<Transpose>(std::move(shape), a.dtype(), {a}, to_stream(s), axes);
}
array transpose(const array& a, StreamOrDevice s) {
  std::vector<int> axes(a.ndim());
  std::iota(axes.rbegin(), axes.rend(), 0);
  return transpose(a, axes, s);
}

array swapaxes(const array& a, int axis1, int axis2, StreamOrDevice s) {
  int x = normalize_axis(axis1, a.ndim(), "swapaxes", a);
  int y = normalize_axis(axis2, a.ndim(), "swapaxes", a);
  std::vector<int> axes(a.ndim());
  std::iota(axes.begin(), axes.end(), 0);
  std::swap(axes[x], axes[y]);
  return transpose(a, axes, s);
}

array expand_dims(const array& a, const std::vector<int>& axes_in, StreamOrDevice s) {
  int out_nd = a.ndim() + static_cast<int>(axes_in.size());
  std::vector<bool> is_new(out_nd, false);
  for (int ax : axes_in) {
    int n = ax < 0 ? ax + out_nd : ax;
    if (n < 0 || n >= out_nd) {
      fail("expand_dims", "axis " + std::to_string(ax) + " is out of range for the result's " +
                              std::to_string(out_nd) + " dimensions", {&a});
    }
    if (is_new[n]) fail("expand_dims", "axis " + std::to_string(ax) + " is repeated", {&a});
    is_new[n] = true;
  }
  Shape shape;
  int j = 0;
  for (int i = 0; i < out_nd; ++i) shape.push_back(is_new[i] ? 1 : a.shape()[j++]);
  return reshape(a, shape, s);
}
array expand_dims(const array& a, int axis, StreamOrDevice s) { return expand_dims(a, std::vector<int>{axis}, s); }

array squeeze(const array& a, const std::vector<int>& axes_in, StreamOrDevice s) {
  std::vector<int> axes = normalize_axes(axes_in, a.ndim(), "squeeze", a);
  Shape shape;
  size_t j = 0;
  for (int i = 0; i < a.ndim(); ++i) {
    if (j < axes.size() && axes[j] == i) {
      if (a.shape()[i] != 1) {
        fail("squeeze", "cannot squeeze axis " + std::to_string(i) + " of size " + std::to_string(a.shape()[i]), {&a});
      }
      ++j;
      continue;
    }
    shape.push_back(a.shape()[i]);
  }
  return reshape(a, shape, s);
}
array squeeze(const array& a, int axis, StreamOrDevice s) { return squeeze(a, std::vector<int>{axis}, s); }
array squeeze(const array& a, StreamOrDevice s) {
  Shape shape;
  for (int d : a.shape()) if (d != 1) shape.push_back(d);
  return reshape(a, shape, s);
}

array flatten(const array& a, int start_axis, int end_axis, StreamOrDevice s) {
  int nd = a.ndim();
  // As MLX: axes past either end are clamped to it.
  int b = std::max(0, start_axis < 0 ? start_axis + nd : start_axis);
  int e = std::min(nd - 1, end_axis < 0 ? end_axis + nd : end_axis);
  if (nd == 0) return reshape(a, {1}, s);
  if (b >= nd) fail("flatten", "start axis " + std::to_string(start_axis) + " is out of range", {&a});
  if (e < 0) fail("flatten", "end axis " + std::to_string(end_axis) + " is out of range", {&a});
  if (b > e) fail("flatten", "start axis " + std::to_string(start_axis) + " comes after end axis " + std::to_string(end_axis), {&a});
  Shape shape(a.shape().begin(), a.shape().begin() + b);
  int64_t merged = 1;
  for (int i = b; i <= e; ++i) merged *= a.shape()[i];
  shape.push_back(checked_dim(merged, "flatten", a));
  shape.insert(shape.end(), a.shape().begin() + e + 1, a.shape().end());
  return reshape(a, shape, s);
}
array flatten(const array& a, StreamOrDevice s) { return flatten(a, 0, -1, s); }

array broadcast_to(const array& a, const Shape& shape, StreamOrDevice s) {
  if (a.shape() == shape) return a;
  int nd = static_cast<int>(shape.size()), na = a.ndim();
  bool ok = nd >= na;
  for (int i = 0; ok && i < na; ++i) {
    int da = a.shape()[i], ds = shape[nd - na + i];
    ok = da == ds || da == 1;
  }
  for (int d : shape) ok = ok && d >= 0;
  if (!ok) fail("broadcast_to", "cannot broadcast shape " + format_shape(a.shape()) + " to " + format_shape(shape), {&a});
  return make_node<Broadcast>(shape, a.dtype(), {a}, to_stream(s), shape);
}

std::vector<array> broadcast_arrays(const std::vector<array>& inputs, StreamOrDevice s) {
  Shape shape;
  for (const auto& a : inputs) shape = broadcast_shapes(shape, a.shape(), "broadcast_arrays", {&a});
  std::vector<array> out;
  for (const auto& a : inputs) out.push_back(broadcast_to(a, shape, s));
  return out;
}

namespace {

struct SliceSpec {
  Shape start, step, shape;
};

// Python's slice.indices rule, per axis.
SliceSpec normalize_slice(const char* op, const array& a, const Shape& start, const Shape& stop, const Shape& strides) {
  int nd = a.ndim();
  if (static_cast<int>(start.size()) != nd || static_cast<int>(stop.size()) != nd ||
      static_cast<int>(strides.size()) != nd) {
    fail(op, "start " + format_shape(start) + ", stop " + format_shape(stop) + " and strides " +
                 format_shape(strides) + " must each have one entry per dimension", {&a});
  }
  SliceSpec spec{Shape(nd), Shape(nd), Shape(nd)};
  for (int i = 0; i < nd; ++i) {
    int64_t n = a.shape()[i], step = strides[i];
    if (step == 0) fail(op, "slice step of axis " + std::to_string(i) + " is zero", {&a});
    int64_t b = start[i], e = stop[i];
    if (step > 0) {
      b = b < 0 ? std::max<int64_t>(b + n, 0) : std::min<int64_t>(b, n);
      e = e < 0 ? std::max<int64_t>(e + n, 0) : std::min<int64_t>(e, n);
    } else {
      b = b < 0 ? std::max<int64_t>(b + n, -1) : std::min<int64_t>(b, n - 1);
      e = e < 0 ? std::max<int64_t>(e + n, -1) : std::min<int64_t>(e, n - 1);
    }
    int64_t len = step > 0 ? (e > b ? (e - b + step - 1) / step : 0) : (b > e ? (b - e - step - 1) / (-step) : 0);
    spec.start[i] = static_cast<int>(len > 0 ? b : 0);
    spec.step[i] = static_cast<int>(step);
    spec.shape[i] = static_cast<int>(len);
  }
  return spec;
}

}  // namespace

array slice(const array& a, Shape start, Shape stop, Shape strides, StreamOrDevice s) {
  SliceSpec spec = normalize_slice("slice", a, start, stop, strides);
  if (spec.shape == a.shape() && std::all_of(spec.step.begin(), spec.step.end(), [](int x) { return x == 1; })) {
    return a;
  }
  return make_node<Slice>(spec.shape, a.dtype(), {a}, to_stream(s), spec.start, spec.step, spec.shape);
}
array slice(const array& a, Shape start, Shape stop, StreamOrDevice s) {
  return slice(a, std::move(start), std::move(stop), Shape(a.ndim(), 1), s);
}

array slice_update(const array& src, const array& update, Shape start, Shape stop, Shape strides, StreamOrDevice s) {
  SliceSpec spec = normalize_slice("slice_update", src, start, stop, strides);
  Stream st = to_stream(s);
  array upd = astype(update, src.dtype(), st);
  Shape bshape = broadcast_shapes(spec.shape, upd.shape(), "slice_update", {&src, &update});
  if (bshape != spec.shape) {
    fail("slice_update", "update of shape " + format_shape(update.shape()) + " does not fit the slice of shape " +
                             format_shape(spec.shape), {&src, &update});
  }
  upd = broadcast_to(upd, spec.shape, st);
  return make_node<SliceUpdate>(src.shape(), src.dtype(), {src, upd}, st, spec.start, spec.step);
}
array slice_update(const array& src, const array& update, Shape start, Shape stop, StreamOrDevice s) {
  return slice_update(src, update, std::move(start), std::move(stop), Shape(src.ndim(), 1), s);
}

array take(const array& a, const array& indices, int axis, StreamOrDevice s) {
  int ax = normalize_axis(axis, a.ndim(), "take", a);
  if (!is_integral(indices.dtype())) fail("take", "indices must be integers", {&a, &indices});
  if (a.shape()[ax] == 0 && indices.size() > 0) fail("take", "cannot take from an empty axis", {&a, &indices});
  Shape shape(a.shape().begin(), a.shape().begin() + ax);
  shape.insert(shape.end(), indices.shape().begin(), indices.shape().end());
  shape.insert(shape.end(), a.shape().begin() + ax + 1, a.shape().end());
  return make_node<Gather>(shape, a.dtype(), {a, indices}, to_stream(s), ax);
}
array take(const array& a, const array& indices, StreamOrDevice s) { return take(reshape(a, {-1}, s), indices, 0, s); }

array take_along_axis(const array& a, const array& indices, int axis, StreamOrDevice s) {
  int ax = normalize_axis(axis, a.ndim(), "take_along_axis", a);
  if (!is_integral(indices.dtype())) fail("take_along_axis", "indices must be integers", {&a, &indices});
  if (indices.ndim() != a.ndim()) {
    fail("take_along_axis", "indices must have as many dimensions as the array", {&a, &indices});
  }
  Stream st = to_stream(s);
  Shape a_other = a.shape(), i_other = indices.shape();
  a_other[ax] = 1;
  i_other[ax] = 1;
  Shape shape = broadcast_shapes(a_other, i_other, "take_along_axis", {&a, &indices});
  Shape a_shape = shape;
  a_shape[ax] = a.shape()[ax];
  shape[ax] = indices.shape()[ax];
  if (a.shape()[ax] == 0 && indices.size() > 0) fail("take_along_axis", "cannot take from an empty axis", {&a, &indices});
  return make_node<GatherAxis>(shape, a.dtype(), {broadcast_to(a, a_shape, st), broadcast_to(indices, shape, st)}, st, ax);
}

array concatenate(const std::vector<array>& arrays, int axis, StreamOrDevice s) {
  if (arrays.empty()) throw Error("[concatenate] needs at least one array");
  const array& first = arrays[0];
  int ax = normalize_axis(axis, first.ndim(), "concatenate", first);
  Shape shape = first.shape();
  Dtype t = first.dtype();
  for (size_t i = 1; i < arrays.size(); ++i) {
    const array& a = arrays[i];
    bool ok = a.ndim() == first.ndim();
    for (int d = 0; ok && d < a.ndim(); ++d) ok = d == ax || a.shape()[d] == first.shape()[d];
    if (!ok) fail("concatenate", "all shapes must match except along axis " + std::to_string(ax), arrays);
    shape[ax] = checked_dim(static_cast<int64_t>(shape[ax]) + a.shape()[ax], "concatenate", a);
    t = promote_types(t, a.dtype());
  }
  if (arrays.size() == 1) return first;
  Stream st = to_stream(s);
  std::vector<array> inputs;
  for (const auto& a : arrays) inputs.push_back(astype(a, t, st));
  return make_node<Concatenate>(shape, t, std::move(inputs), st, ax);
}
array concatenate(const std::vector<array>& arrays, StreamOrDevice s) {
  std::vector<array> flat;
  for (const auto& a : arrays) flat.push_back(reshape(a, {-1}, s));
  return concatenate(flat, 0, s);
}

array stack(const std::vector<array>& arrays, int axis, StreamOrDevice s) {
  if (arrays.empty()) throw Error("[stack] needs at least one array");
  for (const auto& a : arrays) {
    if (a.shape() != arrays[0].shape()) fail("stack", "all arrays must have the same shape", arrays);
  }
  int nd = arrays[0].ndim() + 1;
  int ax = axis < 0 ? axis + nd : axis;
  if (ax < 0 || ax >= nd) fail("stack", "axis " + std::to_string(axis) + " is out of range", arrays);
  std::vector<array> expanded;
  for (const auto& a : arrays) expanded.push_back(expand_dims(a, ax, s));
  if (expanded.size() == 1) return expanded[0];
  return concatenate(expanded, ax, s);
}
array stack(const std::vector<array>& arrays, StreamOrDevice s) { return stack(arrays, 0, s); }

std::vector<array> split(const array& a, const Shape& indices, int axis, StreamOrDevice s) {
  int ax = normalize_axis(axis, a.ndim(), "split", a);
  // Piece i is a[indices[i-1]:indices[i]] with Python's slice rules, as in
  // numpy and MLX: a piece whose bounds decrease is empty, and the next one
  // starts at its own index, not at the previous piece's end.
  std::vector<array> out;
  Shape start(a.ndim(), 0), stop = a.shape();
  for (size_t i = 0; i <= indices.size(); ++i) {
    stop[ax] = i < indices.size() ? indices[i] : a.shape()[ax];
    out.push_back(slice(a, start, stop, s));
    start[ax] = stop[ax];
  }
  return out;
}
std::vector<array> split(const array& a, const Shape& indices, StreamOrDevice s) { return split(a, indices, 0, s); }
std::vector<array> split(const array& a, int num_splits, int axis, StreamOrDevice s) {
  int ax = normalize_axis(axis, a.ndim(), "split", a);
  if (num_splits <= 0 || a.shape()[ax] % num_splits != 0) {
    fail("split", "axis " + std::to_string(ax) + " of size " + std::to_string(a.shape()[ax]) +
                      " cannot be split into " + std::to_string(num_splits) + " equal parts", {&a});
  }
  int part = a.shape()[ax] / num_splits;
  Shape idx;
  for (int i = 1; i < num_splits; ++i) idx.push_back(i * part);
  return split(a, idx, ax, s);
}
std::vector<array> split(const array& a, int num_splits, StreamOrDevice s) { return split(a, num_splits, 0, s); }

array pad(const array& a, const std::vector<std::pair<int, int>>& pad_width, const array& pad_value, StreamOrDevice s) {
  if (static_cast<int>(pad_width.size()) != a.ndim() && pad_width.size() != 1) {
    fail("pad", "needs one (before, after) pair per dimension or a single pair for all", {&a});
  }
  if (pad_value.size() != 1) fail("pad", "pad value must be a scalar", {&a, &pad_value});
  Shape shape = a.shape(), start(a.ndim()), stop(a.ndim());
  for (int i = 0; i < a.ndim(); ++i) {
    auto [lo, hi] = pad_width.size() == 1 ? pad_width[0] : pad_width[i];
    if (lo < 0 || hi < 0) fail("pad", "pad widths must be non-negative", {&a});
    shape[i] = checked_dim(static_cast<int64_t>(shape[i]) + lo + hi, "pad", a);
    start[i] = lo;
    stop[i] = lo + a.shape()[i];
  }
  Stream st = to_stream(s);
  array base = full(shape, reshape(pad_value, {}, st), a.dtype(), st);
  return slice_update(base, a, start, stop, st);
}
array pad(const array& a, int pad_width, const array& pad_value, StreamOrDevice s) {
  return pad(a, {{pad_width, pad_width}}, pad_value, s);
}

array repeat(const array& a, int repeats, int axis, StreamOrDevice s) {
  int ax = normalize_axis(axis, a.ndim(), "repeat", a);
  if (repeats < 0) fail("repeat", "repeats must be non-negative, got " + std::to_string(repeats), {&a});
  Stream st = to_stream(s);
  array x = expand_dims(a, ax + 1, st);
  Shape b = x.shape();
  b[ax + 1] = repeats;
  Shape out = a.shape();
  out[ax] = checked_dim(static_cast<int64_t>(out[ax]) * repeats, "repeat", a);
  return reshape(broadcast_to(x, b, st), out, st);
}
array repeat(const array& a, int repeats, StreamOrDevice s) { return repeat(reshape(a, {-1}, s), repeats, 0, s); }

array tile(const array& a, std::vector<int> reps, StreamOrDevice s) {
  for (int r : reps) if (r < 0) fail("tile", "repetitions must be non-negative", {&a});
  Stream st = to_stream(s);
  int nd = std::max(a.ndim(), static_cast<int>(reps.size()));
  reps.insert(reps.begin(), nd - reps.size(), 1);
  Shape shape = a.shape();
  shape.insert(shape.begin(), nd - shape.size(), 1);
  // View as [1, d0, 1, d1, ...], broadcast to [r0, d0, r1, d1, ...], merge.
  Shape expanded, target, out;
  for (int i = 0; i < nd; ++i) {
    expanded.insert(expanded.end(), {1, shape[i]});
    target.insert(target.end(), {reps[i], shape[i]});
    out.push_back(checked_dim(static_cast<int64_t>(reps[i]) * shape[i], "tile", a));
  }
  return reshape(broadcast_to(reshape(a, expanded, st), target, st), out, st);
}

array flip(const array& a, const std::vector<int>& axes_in, StreamOrDevice s) {
  std::vector<int> axes = normalize_axes(axes_in, a.ndim(), "flip", a);
  Shape start(a.ndim(), 0), stop = a.shape(), step(a.ndim(), 1);
  for (int ax : axes) {
    start[ax] = -1;
    stop[ax] = -a.shape()[ax] - 1;
    step[ax] = -1;
  }
  return slice(a, start, stop, step, s);
}
array flip(const array& a, int axis, StreamOrDevice s) { return flip(a, std::vector<int>{axis}, s); }
array flip(const array& a, StreamOrDevice s) {
  std::vector<int> axes(a.ndim());
  std::iota(axes.begin(), axes.end(), 0);
  return flip(a, axes, s);
}

array matmul(const array& a_in, const array& b_in, StreamOrDevice s) {
  if (a_in.ndim() == 0 || b_in.ndim() == 0) fail("matmul", "operands must have at least one dimension", {&a_in, &b_in});
  if (is_fp8(a_in.dtype()) || is_fp8(b_in.dtype())) {
    fail("matmul", "fp8 operands take scales: use scaled_matmul (or astype to bfloat16 / float32 first)",
         {&a_in, &b_in});
  }
  Stream st = to_stream(s);
  Dtype t = promote_types(a_in.dtype(), b_in.dtype());
  array a = a_in.ndim() == 1 ? reshape(a_in, {1, a_in.shape()[0]}, st) : a_in;
  array b = b_in.ndim() == 1 ? reshape(b_in, {b_in.shape()[0], 1}, st) : b_in;
  int K = a.shape()[a.ndim() - 1];
  if (b.shape()[b.ndim() - 2] != K) {
    fail("matmul", "inner dimensions differ: " + format_shape(a_in.shape()) + " x " + format_shape(b_in.shape()),
         {&a_in, &b_in});
  }
  int M = a.shape()[a.ndim() - 2], N = b.shape()[b.ndim() - 1];
  Shape batch_a(a.shape().begin(), a.shape().end() - 2), batch_b(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(batch_a, batch_b, "matmul", {&a_in, &b_in});
  Shape sa = batch, sb = batch, so = batch;
  sa.insert(sa.end(), {M, K});
  sb.insert(sb.end(), {K, N});
  so.insert(so.end(), {M, N});
  array out = make_node<Matmul>(so, t, {broadcast_to(astype(a, t, st), sa, st), broadcast_to(astype(b, t, st), sb, st)}, st);
  // Remove the axes added for 1-d operands.
  Shape final_shape = batch;
  if (a_in.ndim() != 1) final_shape.push_back(M);
  if (b_in.ndim() != 1) final_shape.push_back(N);
  return reshape(out, final_shape, st);
}

}  // namespace kiln

namespace kiln {
namespace {

array scatter_axis(const array& a, const array& indices, const array& values, int axis, ScatterAxis::Reduce reduce,
                   const char* op, StreamOrDevice s) {
  int ax = normalize_axis(axis, a.ndim(), op, a);
  if (!is_integral(indices.dtype())) fail(op, "indices must be integers", {&a, &indices, &values});
  if (indices.ndim() != a.ndim()) fail(op, "indices must have as many dimensions as the array", {&a, &indices, &values});
  if (a.dtype() == bool_ && reduce == ScatterAxis::Reduce::sum) fail(op, "cannot add bool values", {&a, &indices, &values});
  Stream st = to_stream(s);
  // indices broadcast against a except on axis; values broadcast to indices.
  Shape a_other = a.shape(), i_other = indices.shape();
  a_other[ax] = 1;
  i_other[ax] = 1;
  Shape shape = broadcast_shapes(a_other, i_other, op, {&a, &indices, &values});
  if (shape != a_other) fail(op, "indices cannot broadcast a beyond its shape", {&a, &indices, &values});
  shape[ax] = indices.shape()[ax];
  if (a.shape()[ax] == 0 && shape_size(shape) > 0) fail(op, "cannot write into an empty axis", {&a, &indices, &values});
  broadcast_shapes(values.shape(), shape, op, {&a, &indices, &values});
  array v = broadcast_to(values.dtype() == a.dtype() ? values : astype(values, a.dtype(), st), shape, st);
  array i = broadcast_to(indices, shape, st);
  return make_node<ScatterAxis>(a.shape(), a.dtype(), {a, i, v}, st, reduce, ax);
}

}  // namespace

array put_along_axis(const array& a, const array& indices, const array& values, int axis, StreamOrDevice s) {
  return scatter_axis(a, indices, values, axis, ScatterAxis::Reduce::none, "put_along_axis", s);
}
array scatter_add_axis(const array& a, const array& indices, const array& values, int axis, StreamOrDevice s) {
  return scatter_axis(a, indices, values, axis, ScatterAxis::Reduce::sum, "scatter_add_axis", s);
}

}  // namespace kiln
