// Transformation rules of the data-movement primitives: views (Reshape,
// Transpose, Broadcast, Slice), SliceUpdate, Concatenate and the gathers
// and scatters. A gather's vjp is a scatter-add of the cotangent and a
// scatter's vjp a gather, so the pair is closed under differentiation.
#include <numeric>

#include "core/ops_util.h"
#include "core/primitives.h"
#include "core/transform_util.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

Shape prepend(int n, const Shape& s) {
  Shape out = {n};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

std::vector<int> shifted(const std::vector<int>& axes) {
  std::vector<int> out = {0};
  for (int a : axes) out.push_back(a + 1);
  return out;
}

}  // namespace

// ---- Reshape ----
std::vector<array> Reshape::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                                const std::vector<int>&, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  return {reshape(cot[0], primals[0].shape())};
}
std::vector<array> Reshape::jvp(const std::vector<array>&, const std::vector<array>& tan, const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  return {reshape(tan[0], shape_)};
}
std::pair<std::vector<array>, std::vector<int>> Reshape::vmap(const std::vector<array>& inputs,
                                                              const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  array x = detail::move_axis(inputs[0], axes[0], 0);
  return {{reshape(x, prepend(x.shape(0), shape_))}, {0}};
}
std::vector<Shape> Reshape::output_shapes(const std::vector<array>&) { return {shape_}; }
bool Reshape::is_equivalent(const Primitive& o) const {
  auto* r = dynamic_cast<const Reshape*>(&o);
  return r && r->shape_ == shape_;
}

// ---- Transpose ----
std::vector<array> Transpose::vjp(const std::vector<array>&, const std::vector<array>& cot, const std::vector<int>&,
                                  const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  std::vector<int> inverse(axes_.size());
  for (size_t i = 0; i < axes_.size(); ++i) inverse[axes_[i]] = static_cast<int>(i);
  return {transpose(cot[0], inverse)};
}
std::vector<array> Transpose::jvp(const std::vector<array>&, const std::vector<array>& tan, const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  return {transpose(tan[0], axes_)};
}
std::pair<std::vector<array>, std::vector<int>> Transpose::vmap(const std::vector<array>& inputs,
                                                                const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  return {{transpose(detail::move_axis(inputs[0], axes[0], 0), shifted(axes_))}, {0}};
}
std::vector<Shape> Transpose::output_shapes(const std::vector<array>& inputs) {
  Shape s;
  for (int a : axes_) s.push_back(inputs[0].shape()[a]);
  return {s};
}

// ---- Broadcast ----
std::vector<array> Broadcast::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                                  const std::vector<int>&, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  const Shape& in = primals[0].shape();
  int lead = static_cast<int>(shape_.size() - in.size());
  std::vector<int> axes;
  for (int i = 0; i < static_cast<int>(shape_.size()); ++i) {
    if (i < lead || (in[i - lead] == 1 && shape_[i] != 1)) axes.push_back(i);
  }
  array g = axes.empty() ? cot[0] : sum(cot[0], axes, true);
  return {reshape(g, in)};
}
std::vector<array> Broadcast::jvp(const std::vector<array>&, const std::vector<array>& tan, const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  return {broadcast_to(tan[0], shape_)};
}
std::pair<std::vector<array>, std::vector<int>> Broadcast::vmap(const std::vector<array>& inputs,
                                                                const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  array x = detail::move_axis(inputs[0], axes[0], 0);
  int n = x.shape(0);
  // [n, 1..., in...] so that the input's axes stay right-aligned.
  Shape padded = {n};
  padded.resize(1 + shape_.size() - (x.ndim() - 1), 1);
  for (int i = 1; i < x.ndim(); ++i) padded.push_back(x.shape(i));
  return {{broadcast_to(reshape(x, padded), prepend(n, shape_))}, {0}};
}
std::vector<Shape> Broadcast::output_shapes(const std::vector<array>&) { return {shape_}; }
bool Broadcast::is_equivalent(const Primitive& o) const {
  auto* b = dynamic_cast<const Broadcast*>(&o);
  return b && b->shape_ == shape_;
}

// ---- Slice ----
std::vector<array> Slice::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                              const std::vector<int>&, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  const array& x = primals[0];
  return {make_node<SliceUpdate>(x.shape(), cot[0].dtype(), {zeros(x.shape(), cot[0].dtype()), cot[0]}, stream(),
                                 start_, step_)};
}
std::vector<array> Slice::jvp(const std::vector<array>&, const std::vector<array>& tan, const std::vector<int>&) {
  return {make_node<Slice>(shape_, tan[0].dtype(), {tan[0]}, stream(), start_, step_, shape_)};
}
std::pair<std::vector<array>, std::vector<int>> Slice::vmap(const std::vector<array>& inputs,
                                                            const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  array x = detail::move_axis(inputs[0], axes[0], 0);
  Shape start = prepend(0, start_), step = prepend(1, step_), shape = prepend(x.shape(0), shape_);
  return {{make_node<Slice>(shape, x.dtype(), {x}, stream(), start, step, shape)}, {0}};
}
std::vector<Shape> Slice::output_shapes(const std::vector<array>&) { return {shape_}; }

// ---- SliceUpdate: inputs src, update (shaped like the slice) ----
std::vector<array> SliceUpdate::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                                    const std::vector<int>& argnums, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  const array& upd = primals[1];
  std::vector<array> out;
  for (int a : argnums) {
    if (a == 0) {
      out.push_back(make_node<SliceUpdate>(cot[0].shape(), cot[0].dtype(), {cot[0], zeros(upd.shape(), cot[0].dtype())},
                                           stream(), start_, step_));
    } else {
      out.push_back(make_node<Slice>(upd.shape(), cot[0].dtype(), {cot[0]}, stream(), start_, step_, upd.shape()));
    }
  }
  return out;
}
std::vector<array> SliceUpdate::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                                    const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  array ts = zeros_like(primals[0]), tu = zeros_like(primals[1]);
  for (size_t k = 0; k < argnums.size(); ++k) (argnums[k] == 0 ? ts : tu) = tan[k];
  return {make_node<SliceUpdate>(ts.shape(), ts.dtype(), {ts, tu}, stream(), start_, step_)};
}
std::pair<std::vector<array>, std::vector<int>> SliceUpdate::vmap(const std::vector<array>& inputs,
                                                                  const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  int n = detail::batch_size(inputs, axes);
  array src = detail::batch_first(inputs[0], axes[0], n);
  array upd = detail::batch_first(inputs[1], axes[1], n);
  return {{make_node<SliceUpdate>(src.shape(), src.dtype(), {src, upd}, stream(), prepend(0, start_),
                                  prepend(1, step_))},
          {0}};
}
std::vector<Shape> SliceUpdate::output_shapes(const std::vector<array>& inputs) { return {inputs[0].shape()}; }

// ---- Concatenate ----
std::vector<array> Concatenate::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                                    const std::vector<int>& argnums, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  std::vector<int> starts = {0};
  for (const auto& p : primals) starts.push_back(starts.back() + p.shape(axis_));
  std::vector<array> out;
  for (int a : argnums) {
    Shape start(cot[0].ndim(), 0), stop = cot[0].shape();
    start[axis_] = starts[a];
    stop[axis_] = starts[a + 1];
    out.push_back(slice(cot[0], start, stop));
  }
  return out;
}
std::vector<array> Concatenate::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                                    const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  std::vector<array> parts;
  for (const auto& p : primals) parts.push_back(zeros_like(p));
  for (size_t k = 0; k < argnums.size(); ++k) parts[argnums[k]] = tan[k];
  return {concatenate(parts, axis_)};
}
std::pair<std::vector<array>, std::vector<int>> Concatenate::vmap(const std::vector<array>& inputs,
                                                                  const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  int n = detail::batch_size(inputs, axes);
  std::vector<array> xs;
  for (size_t i = 0; i < inputs.size(); ++i) xs.push_back(detail::batch_first(inputs[i], axes[i], n));
  return {{concatenate(xs, axis_ + 1)}, {0}};
}
std::vector<Shape> Concatenate::output_shapes(const std::vector<array>& inputs) {
  Shape s = inputs[0].shape();
  s[axis_] = 0;
  for (const auto& x : inputs) s[axis_] += x.shape(axis_);
  return {s};
}

// ---- Gather (take along an axis): inputs a, indices ----
std::vector<array> Gather::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                               const std::vector<int>& argnums, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  const array& a = primals[0];
  const array& idx = primals[1];
  std::vector<array> out;
  for (int k : argnums) {
    if (k == 1) {
      out.push_back(zeros_like(idx));
      continue;
    }
    // Flatten the index axes into one, then scatter-add along axis.
    int n = static_cast<int>(idx.size());
    Shape gshape(a.shape().begin(), a.shape().begin() + axis_);
    gshape.push_back(n);
    gshape.insert(gshape.end(), a.shape().begin() + axis_ + 1, a.shape().end());
    array g = reshape(cot[0], gshape);
    Shape ishape(a.ndim(), 1);
    ishape[axis_] = n;
    array i = broadcast_to(reshape(idx, ishape), gshape);
    out.push_back(scatter_add_axis(zeros(a.shape(), cot[0].dtype()), i, g, axis_));
  }
  return out;
}
std::vector<array> Gather::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                               const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  for (size_t k = 0; k < argnums.size(); ++k) {
    if (argnums[k] == 0) return {take(tan[k], primals[1], axis_)};
  }
  return {zeros(output_shapes(primals)[0], primals[0].dtype())};
}
std::pair<std::vector<array>, std::vector<int>> Gather::vmap(const std::vector<array>& inputs,
                                                             const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  const array& a = inputs[0];
  const array& idx = inputs[1];
  if (axes[1] < 0) {
    return {{take(detail::move_axis(a, axes[0], 0), idx, axis_ + 1)}, {0}};
  }
  if (axes[0] < 0) {
    // The index axes replace a's axis in place: the batch axis lands there.
    return {{take(a, idx, axis_)}, {axis_ + axes[1]}};
  }
  // Both batched: gather from a's batch b with index b's indices, through
  // one flat axis of size n * a.shape[axis].
  array ab = detail::move_axis(a, axes[0], 0);           // [n, ...]
  array am = detail::move_axis(ab, axis_ + 1, 1);        // [n, A, pre..., post...]
  int n = am.shape(0), len = am.shape(1);
  Shape flat = {n * len};
  flat.insert(flat.end(), am.shape().begin() + 2, am.shape().end());
  array ib = detail::move_axis(idx, axes[1], 0);         // [n, idx...]
  ib = astype(ib, int64);
  ib = where(ib < scalar_like(0, false, ib), ib + scalar_like(len, false, ib), ib);
  Shape offs_shape(ib.ndim(), 1);
  offs_shape[0] = n;
  array offs = reshape(arange(0, n * len, len, int64), offs_shape);
  array g = take(reshape(am, flat), ib + offs, 0);      // [n, idx..., pre..., post...]
  // Move pre... back in front of idx...
  int ni = ib.ndim() - 1, npre = axis_;
  std::vector<int> perm = {0};
  for (int i = 0; i < npre; ++i) perm.push_back(1 + ni + i);
  for (int i = 0; i < ni; ++i) perm.push_back(1 + i);
  for (int i = 1 + ni + npre; i < g.ndim(); ++i) perm.push_back(i);
  return {{transpose(g, perm)}, {0}};
}
std::vector<Shape> Gather::output_shapes(const std::vector<array>& inputs) {
  const Shape& a = inputs[0].shape();
  Shape s(a.begin(), a.begin() + axis_);
  s.insert(s.end(), inputs[1].shape().begin(), inputs[1].shape().end());
  s.insert(s.end(), a.begin() + axis_ + 1, a.end());
  return {s};
}

// ---- GatherAxis (take_along_axis): inputs a, indices (pre-broadcast) ----
std::vector<array> GatherAxis::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                                   const std::vector<int>& argnums, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  std::vector<array> out;
  for (int k : argnums) {
    out.push_back(k == 1 ? zeros_like(primals[1])
                         : scatter_add_axis(zeros(primals[0].shape(), cot[0].dtype()), primals[1], cot[0], axis_));
  }
  return out;
}
std::vector<array> GatherAxis::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                                   const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  for (size_t k = 0; k < argnums.size(); ++k) {
    if (argnums[k] == 0) return {take_along_axis(tan[k], primals[1], axis_)};
  }
  return {zeros(primals[1].shape(), primals[0].dtype())};
}
std::pair<std::vector<array>, std::vector<int>> GatherAxis::vmap(const std::vector<array>& inputs,
                                                                 const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  int n = detail::batch_size(inputs, axes);
  array a = detail::batch_first(inputs[0], axes[0], n);
  array i = detail::batch_first(inputs[1], axes[1], n);
  return {{take_along_axis(a, i, axis_ + 1)}, {0}};
}
std::vector<Shape> GatherAxis::output_shapes(const std::vector<array>& inputs) { return {inputs[1].shape()}; }

// ---- ScatterAxis: inputs a, indices, values (indices and values one shape) ----
std::vector<array> ScatterAxis::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                                    const std::vector<int>& argnums, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  const array& idx = primals[1];
  std::vector<array> out;
  for (int k : argnums) {
    if (k == 1) {
      out.push_back(zeros_like(idx));
    } else if (k == 2) {
      out.push_back(take_along_axis(cot[0], idx, axis_));
    } else if (reduce_ == Reduce::sum) {
      out.push_back(cot[0]);
    } else {
      // Overwritten positions get no cotangent.
      out.push_back(put_along_axis(cot[0], idx, zeros(idx.shape(), cot[0].dtype()), axis_));
    }
  }
  return out;
}
std::vector<array> ScatterAxis::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                                    const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  array ta = zeros_like(primals[0]), tv = zeros_like(primals[2]);
  for (size_t k = 0; k < argnums.size(); ++k) {
    if (argnums[k] == 0) ta = tan[k];
    if (argnums[k] == 2) tv = tan[k];
  }
  return {reduce_ == Reduce::sum ? scatter_add_axis(ta, primals[1], tv, axis_)
                                 : put_along_axis(ta, primals[1], tv, axis_)};
}
std::pair<std::vector<array>, std::vector<int>> ScatterAxis::vmap(const std::vector<array>& inputs,
                                                                  const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  int n = detail::batch_size(inputs, axes);
  array a = detail::batch_first(inputs[0], axes[0], n);
  array i = detail::batch_first(inputs[1], axes[1], n);
  array v = detail::batch_first(inputs[2], axes[2], n);
  return {{reduce_ == Reduce::sum ? scatter_add_axis(a, i, v, axis_ + 1) : put_along_axis(a, i, v, axis_ + 1)},
          {0}};
}
std::vector<Shape> ScatterAxis::output_shapes(const std::vector<array>& inputs) { return {inputs[0].shape()}; }
bool ScatterAxis::is_equivalent(const Primitive& o) const {
  auto* s = dynamic_cast<const ScatterAxis*>(&o);
  return s && s->reduce_ == reduce_ && s->axis_ == axis_;
}

}  // namespace kiln
