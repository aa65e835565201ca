// MLX's gather / scatter family, the dynamic slices, as_strided and view:
// argument checks (kiln::Error naming the op, the shapes and dtypes) and
// node creation. The primitives are in core/primitives_index.h.
#include <algorithm>
#include <numeric>
#include <set>

#include "core/ops_util.h"
#include "core/primitives_index.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

std::vector<array> with(const array& a, const std::vector<array>& more, const array* last = nullptr) {
  std::vector<array> all = {a};
  all.insert(all.end(), more.begin(), more.end());
  if (last) all.push_back(*last);
  return all;
}

// Normalizes axes (negative count from the end; repeats throw) and checks
// the index arrays: one per axis, integers, not bool. Returns them
// broadcast together and cast to one dtype.
std::vector<array> prepare_indices(const char* op, const array& a, const std::vector<array>& indices,
                                   std::vector<int>& axes, const std::vector<array>& all, Stream st) {
  if (indices.size() > static_cast<size_t>(a.ndim())) {
    fail(op, std::to_string(indices.size()) + " index arrays for an array of " + std::to_string(a.ndim()) +
                 " dimensions", all);
  }
  if (indices.size() != axes.size()) {
    fail(op, std::to_string(indices.size()) + " index arrays do not match " + std::to_string(axes.size()) + " axes",
         all);
  }
  std::set<int> seen;
  for (int& ax : axes) {
    int n = ax < 0 ? ax + a.ndim() : ax;
    if (n < 0 || n >= a.ndim()) {
      fail(op, "axis " + std::to_string(ax) + " is out of range for an array of " + std::to_string(a.ndim()) +
                   " dimensions", all);
    }
    if (!seen.insert(n).second) fail(op, "axis " + std::to_string(ax) + " is repeated", all);
    ax = n;
  }
  if (indices.empty()) return {};
  Dtype t = indices[0].dtype();
  Shape shape;
  for (const auto& i : indices) {
    if (i.dtype() == bool_ || !is_integral(i.dtype())) fail(op, "indices must be integers (not bool)", all);
    t = promote_types(t, i.dtype());
    shape = broadcast_shapes(shape, i.shape(), op, {&a, &i});
  }
  std::vector<array> out;
  for (const auto& i : indices) out.push_back(broadcast_to(astype(i, t, st), shape, st));
  return out;
}

// The checks MLX makes of a dynamic start and its axes.
void check_dynamic_start(const char* op, const array& a, const array& start, std::vector<int>& axes,
                         std::initializer_list<const array*> all) {
  if (start.ndim() > 1) fail(op, "the start must be a 0-d or 1-d array", all);
  if (start.size() > static_cast<size_t>(a.ndim())) fail(op, "more start values than the array has dimensions", all);
  if (start.size() != axes.size()) {
    fail(op, std::to_string(start.size()) + " start values do not match " + std::to_string(axes.size()) + " axes", all);
  }
  if (start.dtype() == bool_ || !is_integral(start.dtype())) fail(op, "the start must have an integer dtype", all);
  std::set<int> seen;
  for (int& ax : axes) {
    int n = ax < 0 ? ax + a.ndim() : ax;
    if (n < 0 || n >= a.ndim()) fail(op, "axis " + std::to_string(ax) + " is out of range", all);
    if (!seen.insert(n).second) fail(op, "axis " + std::to_string(ax) + " is repeated", all);
    ax = n;
  }
}

}  // namespace

const char* scatter_op_name(Scatter::Reduce r) {
  switch (r) {
    case Scatter::Reduce::none: return "scatter";
    case Scatter::Reduce::sum: return "scatter_add";
    case Scatter::Reduce::prod: return "scatter_prod";
    case Scatter::Reduce::max: return "scatter_max";
    case Scatter::Reduce::min: return "scatter_min";
  }
  return "scatter";
}

array gather(const array& a, const std::vector<array>& indices, const std::vector<int>& axes_in,
             const Shape& slice_sizes, StreamOrDevice s) {
  const char* op = "gather";
  Stream st = to_stream(s);
  std::vector<array> all = with(a, indices);
  std::vector<int> axes = axes_in;
  std::vector<array> idx = prepare_indices(op, a, indices, axes, all, st);
  if (slice_sizes.size() != static_cast<size_t>(a.ndim())) {
    fail(op, "slice sizes " + format_shape(slice_sizes) + " need one entry per dimension of the array", all);
  }
  int64_t n_idx = idx.empty() ? 1 : static_cast<int64_t>(idx[0].size());
  if (a.size() == 0) {
    if (n_idx != 0 && shape_size(slice_sizes) != 0) {
      fail(op, "an empty array takes empty indices or an empty slice", all);
    }
  }
  for (int i = 0; i < a.ndim(); ++i) {
    if (slice_sizes[i] < 0 || (a.size() > 0 && slice_sizes[i] > a.shape(i))) {
      fail(op, "slice sizes " + format_shape(slice_sizes) + " must lie in [0, shape] for an array of shape " +
                   format_shape(a.shape()), all);
    }
  }
  Shape out = idx.empty() ? Shape{} : idx[0].shape();
  out.insert(out.end(), slice_sizes.begin(), slice_sizes.end());
  idx.insert(idx.begin(), a);
  return make_node<GatherSlices>(std::move(out), a.dtype(), std::move(idx), st, std::move(axes), slice_sizes);
}
array gather(const array& a, const array& indices, int axis, const Shape& slice_sizes, StreamOrDevice s) {
  return gather(a, std::vector<array>{indices}, std::vector<int>{axis}, slice_sizes, s);
}

array scatter_with(const array& a, const std::vector<array>& indices, const array& updates,
                   const std::vector<int>& axes_in, Scatter::Reduce reduce, StreamOrDevice s) {
  const char* op = scatter_op_name(reduce);
  Stream st = to_stream(s);
  std::vector<array> all = with(a, indices, &updates);
  std::vector<int> axes = axes_in;
  std::vector<array> idx = prepare_indices(op, a, indices, axes, all, st);
  Shape ishape = idx.empty() ? Shape{} : idx[0].shape();
  int ni = static_cast<int>(ishape.size());
  if (updates.ndim() != a.ndim() + ni) {
    fail(op, "updates need " + std::to_string(a.ndim() + ni) + " dimensions (the indices' " + std::to_string(ni) +
                 " and the array's " + std::to_string(a.ndim()) + ")", all);
  }
  for (int i = 0; i < ni; ++i) {
    if (updates.shape(i) != ishape[i]) {
      fail(op, "updates of shape " + format_shape(updates.shape()) + " do not start with the indices' shape " +
                   format_shape(ishape), all);
    }
  }
  for (int i = 0; i < a.ndim(); ++i) {
    if (updates.shape(ni + i) > a.shape(i)) {
      fail(op, "updates of shape " + format_shape(updates.shape()) + " are too large for an array of shape " +
                   format_shape(a.shape()), all);
    }
  }
  idx.insert(idx.begin(), a);
  idx.push_back(astype(updates, a.dtype(), st));
  return make_node<Scatter>(a.shape(), a.dtype(), std::move(idx), st, reduce, std::move(axes));
}

#define KILN_SCATTER_OPS(NAME, MODE)                                                                              \
  array NAME(const array& a, const std::vector<array>& indices, const array& updates, const std::vector<int>& axes, \
             StreamOrDevice s) {                                                                                  \
    return scatter_with(a, indices, updates, axes, Scatter::Reduce::MODE, s);                                     \
  }                                                                                                               \
  array NAME(const array& a, const array& indices, const array& updates, int axis, StreamOrDevice s) {           \
    return scatter_with(a, {indices}, updates, {axis}, Scatter::Reduce::MODE, s);                                 \
  }
KILN_SCATTER_OPS(scatter, none)
KILN_SCATTER_OPS(scatter_add, sum)
KILN_SCATTER_OPS(scatter_prod, prod)
KILN_SCATTER_OPS(scatter_max, max)
KILN_SCATTER_OPS(scatter_min, min)
#undef KILN_SCATTER_OPS

array slice(const array& a, const array& start, std::vector<int> axes, Shape slice_size, StreamOrDevice s) {
  check_dynamic_start("slice", a, start, axes, {&a, &start});
  if (slice_size.size() != static_cast<size_t>(a.ndim())) {
    fail("slice", "slice size " + format_shape(slice_size) + " needs one entry per dimension", {&a, &start});
  }
  for (int i = 0; i < a.ndim(); ++i) {
    if (slice_size[i] < 0 || slice_size[i] > a.shape(i)) {
      fail("slice", "slice size " + format_shape(slice_size) + " does not fit an array of shape " +
                        format_shape(a.shape()), {&a, &start});
    }
  }
  Stream st = to_stream(s);
  Shape out = slice_size;
  return make_node<DynamicSlice>(std::move(out), a.dtype(), {a, reshape(start, {-1}, st)}, st, std::move(axes),
                                 std::move(slice_size));
}

array slice_update(const array& src, const array& update, const array& start, std::vector<int> axes,
                   StreamOrDevice s) {
  check_dynamic_start("slice_update", src, start, axes, {&src, &update, &start});
  if (update.ndim() > src.ndim()) {
    fail("slice_update", "the update has more dimensions than the array", {&src, &update, &start});
  }
  // As MLX: missing leading dimensions take the array's size, or 1 on a
  // sliced axis; the update may not be larger than the array.
  int lead = src.ndim() - update.ndim();
  Shape shape(src.shape().begin(), src.shape().begin() + lead);
  shape.insert(shape.end(), update.shape().begin(), update.shape().end());
  for (int ax : axes) {
    if (ax < lead) shape[ax] = 1;
  }
  for (int d = lead; d < src.ndim(); ++d) {
    if (shape[d] > src.shape(d)) {
      fail("slice_update", "an update of shape " + format_shape(update.shape()) + " does not fit an array of shape " +
                               format_shape(src.shape()), {&src, &update, &start});
    }
  }
  Stream st = to_stream(s);
  array upd = broadcast_to(astype(update, src.dtype(), st), shape, st);
  return make_node<DynamicSliceUpdate>(src.shape(), src.dtype(), {src, upd, reshape(start, {-1}, st)}, st,
                                       std::move(axes));
}

array as_strided(array a, Shape shape, Strides strides, size_t offset, StreamOrDevice s) {
  for (int d : shape) {
    if (d < 0) fail("as_strided", "negative dimension in " + format_shape(shape), {&a});
  }
  if (strides.size() != shape.size()) {
    fail("as_strided", "shape " + format_shape(shape) + " and " + std::to_string(strides.size()) +
                           " strides differ in length", {&a});
  }
  // The first and last elements the view reaches must lie inside a.
  if (shape_size(shape) > 0) {
    int64_t lo = static_cast<int64_t>(offset), hi = lo;
    for (size_t i = 0; i < shape.size(); ++i) {
      int64_t reach = strides[i] * (shape[i] - 1);
      (reach < 0 ? lo : hi) += reach;
    }
    if (lo < 0 || hi >= static_cast<int64_t>(a.size())) {
      fail("as_strided", "the view (shape " + format_shape(shape) + ", offset " + std::to_string(offset) +
                             ") reaches elements [" + std::to_string(lo) + ", " + std::to_string(hi) +
                             "] outside the array's " + std::to_string(a.size()), {&a});
    }
  }
  Stream st = to_stream(s);
  array flat = contiguous(reshape(a, {-1}, st), st);
  Shape out = shape;
  return make_node<AsStrided>(std::move(out), a.dtype(), {flat}, st, std::move(shape), std::move(strides),
                              static_cast<int64_t>(offset));
}

array view(const array& a, const Dtype& dtype, StreamOrDevice s) {
  if (a.dtype() == dtype) return a;
  size_t ib = size_of(a.dtype()), ob = size_of(dtype);
  Shape shape = a.shape();
  if (ib != ob) {
    if (a.ndim() == 0) {
      fail("view", std::string("a scalar can only be viewed as a type of its size, not ") + dtype_name(dtype), {&a});
    }
    if (ib < ob) {
      if (shape.back() % static_cast<int>(ob / ib) != 0) {
        fail("view", std::string("the last axis's size in bytes must be a multiple of ") + dtype_name(dtype) +
                         "'s size", {&a});
      }
      shape.back() /= static_cast<int>(ob / ib);
    } else {
      shape.back() *= static_cast<int>(ib / ob);
    }
  }
  return make_node<View>(std::move(shape), dtype, {a}, to_stream(s), dtype);
}

}  // namespace kiln
