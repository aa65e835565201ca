// Transformation rules of the gather / scatter family, the dynamic slices
// and the views as_strided / view. A gather's vjp is a scatter-add and a
// scatter's a gather (MLX's rules, primitives.cpp); vmap adds the batch as
// one more indexed axis (an arange index) where the indices are batched,
// and as one more sliced axis where only the data is.
#include <numeric>

#include "core/ops_util.h"
#include "core/primitives_index.h"
#include "core/transform_util.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

std::vector<array> index_inputs(const std::vector<array>& v, size_t first, size_t last) {
  return std::vector<array>(v.begin() + first, v.begin() + last);
}

// The slice shape of a scatter's updates (what follows the index dims).
Shape update_slice(const array& updates, int a_ndim) {
  return Shape(updates.shape().end() - a_ndim, updates.shape().end());
}

// [0, n) shaped to broadcast on the first of `ndim` dimensions.
array batch_index(int n, int ndim) {
  Shape s(std::max(ndim, 1), 1);
  s[0] = n;
  return reshape(arange(0, n, 1, int64), s);
}

// Column j of a batched start [n, k] (batch first), wrapped once and
// clamped to [0, dim - size] as the dynamic slices do.
array clamped_start(const array& start, int j, int dim, int size) {
  array s = astype(reshape(slice(start, {0, j}, {start.shape(0), j + 1}), {-1}), int64);
  s = where(s < as_weak_scalar(0, s), s + as_weak_scalar(dim, s), s);
  return clip(s, array(int64_t{0}), array(static_cast<int64_t>(dim - size)));
}

}  // namespace

// ---- GatherSlices: inputs a, indices... ----
std::vector<array> GatherSlices::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                                     const std::vector<int>& argnums, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  std::vector<array> out;
  for (int k : argnums) {
    if (k > 0) {
      out.push_back(zeros_like(primals[k]));
    } else {
      auto idx = index_inputs(primals, 1, primals.size());
      out.push_back(scatter_add(zeros(primals[0].shape(), cot[0].dtype()), idx, cot[0], axes_));
    }
  }
  return out;
}
std::vector<array> GatherSlices::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                                     const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  for (size_t k = 0; k < argnums.size(); ++k) {
    if (argnums[k] == 0) return {gather(tan[k], index_inputs(primals, 1, primals.size()), axes_, slice_sizes_)};
  }
  return {zeros(output_shapes(primals)[0], primals[0].dtype())};
}
std::pair<std::vector<array>, std::vector<int>> GatherSlices::vmap(const std::vector<array>& inputs,
                                                                   const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  int n = detail::batch_size(inputs, axes);
  bool idx_batched = false;
  for (size_t i = 1; i < axes.size(); ++i) idx_batched |= axes[i] >= 0;
  std::vector<int> gaxes = axes_;
  Shape sizes = slice_sizes_;
  array a = inputs[0];
  if (axes[0] >= 0) {
    a = detail::move_axis(a, axes[0], 0);
    for (int& g : gaxes) ++g;
    sizes.insert(sizes.begin(), idx_batched ? 1 : n);
  }
  if (!idx_batched) {
    // Only a is batched: the batch is one more sliced axis, after the index dims.
    int ni = inputs.size() > 1 ? inputs[1].ndim() : 0;
    return {{gather(a, index_inputs(inputs, 1, inputs.size()), gaxes, sizes)}, {ni}};
  }
  std::vector<array> idx;
  for (size_t i = 1; i < inputs.size(); ++i) {
    idx.push_back(axes[i] >= 0 ? detail::move_axis(inputs[i], axes[i], 0) : expand_dims(inputs[i], 0));
  }
  if (axes[0] < 0) return {{gather(a, idx, gaxes, sizes)}, {0}};
  // Both batched: batch b of the indices reads batch b of a.
  int ni = idx[0].ndim();
  idx.push_back(batch_index(n, ni));
  gaxes.push_back(0);
  return {{squeeze(gather(a, idx, gaxes, sizes), ni)}, {0}};
}
std::vector<Shape> GatherSlices::output_shapes(const std::vector<array>& inputs) {
  Shape s = inputs.size() > 1 ? inputs[1].shape() : Shape{};
  s.insert(s.end(), slice_sizes_.begin(), slice_sizes_.end());
  return {s};
}
bool GatherSlices::is_equivalent(const Primitive& o) const {
  auto* g = dynamic_cast<const GatherSlices*>(&o);
  return g && g->axes_ == axes_ && g->slice_sizes_ == slice_sizes_;
}

// ---- Scatter: inputs a, indices..., updates ----
std::vector<array> Scatter::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                                const std::vector<int>& argnums, const std::vector<array>& outputs) {
  detail::RuleStreamScope scope(stream());
  const array& a = primals[0];
  const array& upd = primals.back();
  const array& result = outputs[0];
  auto idx = index_inputs(primals, 1, primals.size() - 1);
  Shape sizes = update_slice(upd, a.ndim());
  array zero = array(0.0, cot[0].dtype());
  std::vector<array> out;
  for (int k : argnums) {
    if (k == 0) {
      switch (reduce_) {
        case Reduce::none: out.push_back(scatter(cot[0], idx, zeros_like(upd), axes_)); break;
        case Reduce::sum: out.push_back(cot[0]); break;
        // d out / d a is the product of the updates that landed there.
        case Reduce::prod:
          out.push_back(multiply(cot[0], scatter_prod(ones_like(a), idx, upd, axes_)));
          break;
        case Reduce::max:
        case Reduce::min: out.push_back(where(equal(result, a), cot[0], zero)); break;
      }
    } else if (k == static_cast<int>(primals.size()) - 1) {
      array g = gather(cot[0], idx, axes_, sizes);
      switch (reduce_) {
        case Reduce::none:
        case Reduce::sum: out.push_back(g); break;
        // d out / d u = out / u (an update of exactly 0 gets a non-finite value).
        case Reduce::prod: out.push_back(divide(multiply(g, gather(result, idx, axes_, sizes)), upd)); break;
        case Reduce::max:
        case Reduce::min: out.push_back(where(equal(gather(result, idx, axes_, sizes), upd), g, zero)); break;
      }
    } else {
      out.push_back(zeros_like(primals[k]));
    }
  }
  return out;
}
std::vector<array> Scatter::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                                const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  const array& a = primals[0];
  const array& upd = primals.back();
  auto idx = index_inputs(primals, 1, primals.size() - 1);
  array ta = zeros_like(a), tu = zeros_like(upd);
  for (size_t k = 0; k < argnums.size(); ++k) {
    if (argnums[k] == 0) ta = tan[k];
    if (argnums[k] == static_cast<int>(primals.size()) - 1) tu = tan[k];
  }
  if (reduce_ == Reduce::none) return {scatter(ta, idx, tu, axes_)};
  if (reduce_ == Reduce::sum) return {scatter_add(ta, idx, tu, axes_)};
  array result = scatter_with(a, idx, upd, axes_, reduce_);
  Shape sizes = update_slice(upd, a.ndim());
  array at = gather(result, idx, axes_, sizes);
  array zero = array(0.0, ta.dtype());
  if (reduce_ == Reduce::prod) {
    array from_a = multiply(ta, scatter_prod(ones_like(a), idx, upd, axes_));
    return {add(from_a, scatter_add(zeros_like(a), idx, divide(multiply(at, tu), upd), axes_))};
  }
  // max / min: the tangent of whichever value won.
  array from_a = where(equal(result, a), ta, zero);
  return {add(from_a, scatter_add(zeros_like(a), idx, where(equal(at, upd), tu, zero), axes_))};
}
std::pair<std::vector<array>, std::vector<int>> Scatter::vmap(const std::vector<array>& inputs,
                                                              const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  int n = detail::batch_size(inputs, axes);
  size_t last = inputs.size() - 1;
  array a = detail::batch_first(inputs[0], axes[0], n);
  std::vector<array> idx;
  for (size_t i = 1; i < last; ++i) {
    idx.push_back(axes[i] >= 0 ? detail::move_axis(inputs[i], axes[i], 0) : expand_dims(inputs[i], 0));
  }
  int ni = last > 1 ? inputs[1].ndim() - (axes[1] >= 0 ? 1 : 0) : 0;  // the unbatched index rank
  idx.push_back(batch_index(n, ni + 1));
  std::vector<int> saxes;
  for (int ax : axes_) saxes.push_back(ax + 1);
  saxes.push_back(0);
  // Updates [n, I..., 1, slice...]: the batch axis of a is sliced with size 1.
  array u = detail::batch_first(inputs[last], axes[last], n);
  u = expand_dims(u, 1 + ni);
  Shape ishape = idx.back().shape();
  for (size_t i = 0; i + 1 < idx.size(); ++i) ishape = broadcast_shapes(ishape, idx[i].shape(), "scatter", {});
  Shape ushape = ishape;
  ushape.insert(ushape.end(), u.shape().begin() + 1 + ni, u.shape().end());
  u = broadcast_to(u, ushape);
  return {{scatter_with(a, idx, u, saxes, reduce_)}, {0}};
}
std::vector<Shape> Scatter::output_shapes(const std::vector<array>& inputs) { return {inputs[0].shape()}; }
bool Scatter::is_equivalent(const Primitive& o) const {
  auto* s = dynamic_cast<const Scatter*>(&o);
  return s && s->reduce_ == reduce_ && s->axes_ == axes_;
}
std::string Scatter::describe() const { return std::string("Scatter(") + scatter_op_name(reduce_) + ")"; }

// ---- DynamicSlice: inputs a, start ----
std::vector<array> DynamicSlice::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                                     const std::vector<int>& argnums, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  std::vector<array> out;
  for (int k : argnums) {
    out.push_back(k == 1 ? zeros_like(primals[1])
                         : slice_update(zeros(primals[0].shape(), cot[0].dtype()), cot[0], primals[1], axes_));
  }
  return out;
}
std::vector<array> DynamicSlice::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                                     const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  for (size_t k = 0; k < argnums.size(); ++k) {
    if (argnums[k] == 0) return {slice(tan[k], primals[1], axes_, slice_size_)};
  }
  return {zeros(slice_size_, primals[0].dtype())};
}
std::pair<std::vector<array>, std::vector<int>> DynamicSlice::vmap(const std::vector<array>& inputs,
                                                                   const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  int n = detail::batch_size(inputs, axes);
  std::vector<int> shifted;
  for (int ax : axes_) shifted.push_back(ax + 1);
  Shape sizes = slice_size_;
  if (axes[1] < 0) {
    array a = detail::move_axis(inputs[0], axes[0], 0);
    sizes.insert(sizes.begin(), n);
    return {{slice(a, inputs[1], shifted, sizes)}, {0}};
  }
  // A start per batch: a gather of one slice per batch at clamped starts.
  array start = detail::move_axis(inputs[1], axes[1], 0);
  const array& a = inputs[0];
  int off = axes[0] >= 0 ? 1 : 0;
  std::vector<array> idx;
  for (size_t j = 0; j < axes_.size(); ++j) {
    int ax = axes_[j];
    idx.push_back(clamped_start(start, static_cast<int>(j), a.shape(ax + (axes[0] >= 0 && axes[0] <= ax ? 1 : 0)),
                                slice_size_[ax]));
  }
  if (!off) return {{gather(a, idx, axes_, sizes)}, {0}};
  array ab = detail::move_axis(a, axes[0], 0);
  idx.push_back(arange(0, n, 1, int64));
  shifted.push_back(0);
  sizes.insert(sizes.begin(), 1);
  return {{squeeze(gather(ab, idx, shifted, sizes), 1)}, {0}};
}
std::vector<Shape> DynamicSlice::output_shapes(const std::vector<array>&) { return {slice_size_}; }
bool DynamicSlice::is_equivalent(const Primitive& o) const {
  auto* d = dynamic_cast<const DynamicSlice*>(&o);
  return d && d->axes_ == axes_ && d->slice_size_ == slice_size_;
}

// ---- DynamicSliceUpdate: inputs src, update, start ----
std::vector<array> DynamicSliceUpdate::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                                           const std::vector<int>& argnums, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  const array& upd = primals[1];
  const array& start = primals[2];
  std::vector<array> out;
  for (int k : argnums) {
    if (k == 0) out.push_back(slice_update(cot[0], zeros(upd.shape(), cot[0].dtype()), start, axes_));
    else if (k == 1) out.push_back(slice(cot[0], start, axes_, upd.shape()));
    else out.push_back(zeros_like(start));
  }
  return out;
}
std::vector<array> DynamicSliceUpdate::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                                           const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  array ts = zeros_like(primals[0]), tu = zeros_like(primals[1]);
  for (size_t k = 0; k < argnums.size(); ++k) {
    if (argnums[k] == 0) ts = tan[k];
    if (argnums[k] == 1) tu = tan[k];
  }
  return {slice_update(ts, tu, primals[2], axes_)};
}
std::pair<std::vector<array>, std::vector<int>> DynamicSliceUpdate::vmap(const std::vector<array>& inputs,
                                                                         const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  int n = detail::batch_size(inputs, axes);
  array src = detail::batch_first(inputs[0], axes[0], n);
  array upd = detail::batch_first(inputs[1], axes[1], n);
  std::vector<int> shifted;
  for (int ax : axes_) shifted.push_back(ax + 1);
  if (axes[2] < 0) return {{slice_update(src, upd, inputs[2], shifted)}, {0}};
  // A start per batch: a scatter of one slice per batch at clamped starts.
  array start = detail::move_axis(inputs[2], axes[2], 0);
  std::vector<array> idx;
  for (size_t j = 0; j < axes_.size(); ++j) {
    int ax = axes_[j];
    idx.push_back(clamped_start(start, static_cast<int>(j), src.shape(ax + 1), upd.shape(ax + 1)));
  }
  idx.push_back(arange(0, n, 1, int64));
  shifted.push_back(0);
  return {{scatter(src, idx, expand_dims(upd, 1), shifted)}, {0}};
}
std::vector<Shape> DynamicSliceUpdate::output_shapes(const std::vector<array>& inputs) { return {inputs[0].shape()}; }
bool DynamicSliceUpdate::is_equivalent(const Primitive& o) const {
  auto* d = dynamic_cast<const DynamicSliceUpdate*>(&o);
  return d && d->axes_ == axes_;
}

// ---- AsStrided: input the flat, row-major array ----
std::vector<array> AsStrided::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                                  const std::vector<int>&, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  // Each output element adds its cotangent to the element it views.
  array pos = array(offset_, int64);
  for (size_t d = 0; d < shape_.size(); ++d) {
    Shape s(shape_.size(), 1);
    s[d] = shape_[d];
    pos = add(pos, reshape(multiply(arange(0, shape_[d], 1, int64), array(strides_[d], int64)), s));
  }
  pos = reshape(broadcast_to(pos, shape_), {-1});
  array flat = zeros(primals[0].shape(), cot[0].dtype());
  return {scatter_add_axis(flat, pos, reshape(cot[0], {-1}), 0)};
}
std::vector<array> AsStrided::jvp(const std::vector<array>&, const std::vector<array>& tan, const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  return {as_strided(tan[0], shape_, strides_, static_cast<size_t>(offset_))};
}
std::pair<std::vector<array>, std::vector<int>> AsStrided::vmap(const std::vector<array>& inputs,
                                                                const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  array x = detail::move_axis(inputs[0], axes[0], 0);  // [n, size]
  Shape shape = shape_;
  shape.insert(shape.begin(), x.shape(0));
  Strides strides = strides_;
  strides.insert(strides.begin(), x.shape(1));
  return {{as_strided(x, shape, strides, static_cast<size_t>(offset_))}, {0}};
}
std::vector<Shape> AsStrided::output_shapes(const std::vector<array>&) { return {shape_}; }
bool AsStrided::is_equivalent(const Primitive& o) const {
  auto* v = dynamic_cast<const AsStrided*>(&o);
  return v && v->shape_ == shape_ && v->strides_ == strides_ && v->offset_ == offset_;
}

// ---- View: a bitcast has no derivative ----
std::vector<array> View::vjp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&,
                             const std::vector<array>&) {
  throw Error("[View] a bitcast (view) has no derivative");
}
std::vector<array> View::jvp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&) {
  throw Error("[View] a bitcast (view) has no derivative");
}
std::pair<std::vector<array>, std::vector<int>> View::vmap(const std::vector<array>& inputs,
                                                           const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  // The last axis changes size: a batch there moves first.
  int ax = axes[0];
  array x = inputs[0];
  if (ax == x.ndim() - 1) {
    x = detail::move_axis(x, ax, 0);
    ax = 0;
  }
  return {{view(x, dtype_)}, {ax}};
}
std::vector<Shape> View::output_shapes(const std::vector<array>& inputs) {
  Shape s = inputs[0].shape();
  size_t ib = size_of(inputs[0].dtype()), ob = size_of(dtype_);
  if (!s.empty() && ib != ob) s.back() = ib < ob ? s.back() / static_cast<int>(ob / ib) : s.back() * static_cast<int>(ib / ob);
  return {s};
}
bool View::is_equivalent(const Primitive& o) const {
  auto* v = dynamic_cast<const View*>(&o);
  return v && v->dtype_ == dtype_;
}

}  // namespace kiln
