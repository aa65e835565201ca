// MLX's masked, gathered and segmented products, the Hadamard transform,
// masked_scatter and the accumulating slice updates, written with other ops
// (take, where, repeat, slice_update, matmul). Compositions run on every
// backend and get vjp, jvp and vmap from their parts; where MLX has a fused
// kernel (gather_mm, block_masked_mm) these trade memory for that: the
// gathered operands are materialized before the batched matmul.
#include <algorithm>
#include <cmath>
#include <string>

#include "core/ops_util.h"
#include "kiln/ops.h"
#include "kiln/utils.h"

namespace kiln {
namespace {

// The leading 1-D promotion of matmul: a (K) -> (1, K), b (K) -> (K, 1).
void promote_vectors(array& a, array& b, const char* op, Stream st) {
  if (a.ndim() == 0 || b.ndim() == 0) fail(op, "inputs must have at least one dimension", {&a, &b});
  if (a.ndim() == 1) a = expand_dims(a, 0, st);
  if (b.ndim() == 1) b = expand_dims(b, 1, st);
  if (a.shape(-1) != b.shape(-2)) {
    fail(op, "the last dimension of a must match the second to last of b", {&a, &b});
  }
}

Dtype floating_result(const array& a, const array& b, const char* op) {
  Dtype t = result_type(a, b);
  if (!is_floating_point(t)) fail(op, "only real floating-point types are supported", {&a, &b});
  return t;
}

// Drops the axes the 1-D promotion added.
array unpromote(const array& out, bool a_vec, bool b_vec, Stream st) {
  std::vector<int> axes;
  if (a_vec) axes.push_back(out.ndim() - 2);
  if (b_vec) axes.push_back(out.ndim() - 1);
  return axes.empty() ? out : squeeze(out, axes, st);
}

// One entry per block_size x block_size tile -> one per element, cropped
// to rows x cols (the last tile may be partial).
array expand_block_mask(const array& mask, int block_size, int rows, int cols, Stream st) {
  array m = repeat(repeat(mask, block_size, -2, st), block_size, -1, st);
  Shape start(m.ndim(), 0), stop = m.shape();
  stop[m.ndim() - 2] = rows;
  stop[m.ndim() - 1] = cols;
  return slice(m, start, stop, st);
}

// A boolean mask zeroes the masked entries (so inf or NaN there does not
// leak into the product, as MLX skips those tiles); a float mask scales.
array apply_mask(const array& x, const array& mask, Stream st) {
  if (mask.dtype() == bool_) return where(mask, x, array(0, x.dtype()), st);
  return multiply(x, astype(mask, x.dtype(), st), st);
}

array batch_indices(const std::optional<array>& given, const array& x, const char* op, Stream st) {
  if (x.ndim() < 2) fail(op, "inputs must have at least two dimensions", {&x});
  if (given) {
    if (!is_integral(given->dtype()) || given->dtype() == bool_) fail(op, "indices must be integral", {&*given});
    return astype(*given, uint32, st);
  }
  Shape batch(x.shape().begin(), x.shape().end() - 2);
  return reshape(arange(0.0, static_cast<double>(shape_size(batch)), uint32, st), batch, st);
}

bool broadcastable(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (size_t i = 0; i < from.size(); ++i) {
    const int f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
    if (f != 1 && f != t) return false;
  }
  return true;
}

template <typename Combine>
array slice_update_with(const char* op, const array& src, const array& update, Shape start, Shape stop,
                        Shape strides, StreamOrDevice s, Combine combine) {
  Stream st = to_stream(s);
  array current = slice(src, start, stop, strides, st);
  if (!broadcastable(update.shape(), current.shape())) {
    fail(op, "the update of shape " + format_shape(update.shape()) + " does not broadcast to the slice of shape " +
                 format_shape(current.shape()),
         {&src, &update});
  }
  array merged = astype(combine(current, astype(update, src.dtype(), st), st), src.dtype(), st);
  return slice_update(src, merged, std::move(start), std::move(stop), std::move(strides), st);
}

}  // namespace

array block_masked_mm(array a, array b, int block_size, std::optional<array> mask_out, std::optional<array> mask_lhs,
                      std::optional<array> mask_rhs, StreamOrDevice s) {
  Stream st = to_stream(s);
  if (!mask_out && !mask_lhs && !mask_rhs) return matmul(a, b, st);
  if (block_size != 32 && block_size != 64) {
    fail("block_masked_mm", "only block sizes 32 and 64 are supported, got " + std::to_string(block_size), {&a, &b});
  }
  const bool a_vec = a.ndim() == 1, b_vec = b.ndim() == 1;
  promote_vectors(a, b, "block_masked_mm", st);
  const Dtype t = floating_result(a, b, "block_masked_mm");
  a = astype(a, t, st);
  b = astype(b, t, st);
  const int M = a.shape(-2), K = a.shape(-1), N = b.shape(-1);
  // A mask of a 1-D operand lacks the axis the promotion added.
  auto fix = [&](array m, bool add_row, bool add_col) {
    if (add_row) m = expand_dims(m, -2, st);
    if (add_col) m = expand_dims(m, -1, st);
    return m;
  };
  if (mask_lhs) a = apply_mask(a, expand_block_mask(fix(*mask_lhs, a_vec, false), block_size, M, K, st), st);
  if (mask_rhs) b = apply_mask(b, expand_block_mask(fix(*mask_rhs, false, b_vec), block_size, K, N, st), st);
  array out = matmul(a, b, st);
  if (mask_out) out = apply_mask(out, expand_block_mask(fix(*mask_out, a_vec, b_vec), block_size, M, N, st), st);
  return unpromote(out, a_vec, b_vec, st);
}

array gather_mm(array a, array b, std::optional<array> lhs_indices, std::optional<array> rhs_indices,
                bool /*sorted_indices: a hint for MLX's kernel*/, StreamOrDevice s) {
  Stream st = to_stream(s);
  if (!lhs_indices && !rhs_indices) return matmul(a, b, st);
  const bool a_vec = a.ndim() == 1, b_vec = b.ndim() == 1;
  promote_vectors(a, b, "gather_mm", st);
  const Dtype t = floating_result(a, b, "gather_mm");
  a = astype(a, t, st);
  b = astype(b, t, st);
  auto idx = broadcast_arrays({batch_indices(lhs_indices, a, "gather_mm", st), batch_indices(rhs_indices, b, "gather_mm", st)}, st);
  const int M = a.shape(-2), K = a.shape(-1), N = b.shape(-1);
  array a_flat = reshape(a, {-1, M, K}, st), b_flat = reshape(b, {-1, K, N}, st);
  array ga = take(a_flat, flatten(idx[0], st), 0, st), gb = take(b_flat, flatten(idx[1], st), 0, st);
  Shape out_shape = idx[0].shape();
  out_shape.push_back(M);
  out_shape.push_back(N);
  return unpromote(reshape(matmul(ga, gb, st), out_shape, st), a_vec, b_vec, st);
}

array segmented_mm(array a, array b, array segments, StreamOrDevice s) {
  Stream st = to_stream(s);
  if (a.ndim() != 2 || b.ndim() != 2) fail("segmented_mm", "a and b must be matrices (no batch)", {&a, &b});
  if (segments.ndim() < 1 || segments.shape().back() != 2) {
    fail("segmented_mm", "segments must have shape (..., 2)", {&segments});
  }
  if (!is_integral(segments.dtype()) || segments.dtype() == bool_) {
    fail("segmented_mm", "segments must be integral", {&segments});
  }
  if (a.shape(1) != b.shape(0)) fail("segmented_mm", "the inner dimensions differ", {&a, &b});
  const Dtype t = floating_result(a, b, "segmented_mm");
  a = astype(a, t, st);
  b = astype(b, t, st);
  // out[..] = a[:, lo:hi] @ b[lo:hi, :]: a K mask per segment on a's columns.
  const int K = a.shape(1);
  array seg = astype(segments, int32, st);
  Shape lo_stop = seg.shape(), hi_start(seg.ndim(), 0);
  lo_stop.back() = 1;
  hi_start.back() = 1;
  array lo = slice(seg, Shape(seg.ndim(), 0), lo_stop, st), hi = slice(seg, hi_start, seg.shape(), st);
  array k = arange(0, K, st);
  array mask = logical_and(greater_equal(k, lo, st), less(k, hi, st), st);  // (..., K)
  return matmul(where(expand_dims(mask, -2, st), a, array(0, t), st), b, st);
}

array hadamard_transform(const array& a, std::optional<float> scale, StreamOrDevice s) {
  if (a.size() == 0) fail("hadamard_transform", "does not support empty arrays", {&a});
  Stream st = to_stream(s);
  const int n = a.ndim() > 0 ? a.shape(-1) : 1;
  if ((n & (n - 1)) != 0) {
    fail("hadamard_transform",
         "the last dimension must be a power of two, got " + std::to_string(n) +
             " (MLX also accepts 12, 20 or 28 times a power of two; Kiln does not yet)",
         {&a});
  }
  const Dtype t = is_floating_point(a.dtype()) ? a.dtype() : float32;
  const double sc = scale ? static_cast<double>(*scale) : 1.0 / std::sqrt(static_cast<double>(n));
  array x = astype(a, t, st);
  if (n > 1) {
    // Sylvester's butterfly: log2(n) passes of (x + y, x - y) over pairs h
    // apart, rounded to the dtype after each pass as MLX's kernel does.
    Shape outer(x.shape().begin(), x.shape().end() - 1);
    for (int h = 1; h < n; h *= 2) {
      Shape split = outer;
      split.insert(split.end(), {n / (2 * h), 2, h});
      array y = reshape(x, split, st);
      const int d = y.ndim() - 2;
      Shape lo_stop = y.shape(), hi_start(y.ndim(), 0);
      lo_stop[d] = 1;
      hi_start[d] = 1;
      array u = slice(y, Shape(y.ndim(), 0), lo_stop, st), v = slice(y, hi_start, y.shape(), st);
      x = reshape(concatenate({add(u, v, st), subtract(u, v, st)}, d, st), a.shape(), st);
    }
  }
  if (sc == 1.0) return x;
  return multiply(x, array(sc, t), st);
}

array masked_scatter(const array& a, const array& mask, const array& values, StreamOrDevice s) {
  Stream st = to_stream(s);
  if (mask.dtype() != bool_) fail("masked_scatter", "the mask must be boolean", {&a, &mask});
  if (mask.ndim() > a.ndim() || !std::equal(mask.shape().begin(), mask.shape().end(), a.shape().begin())) {
    fail("masked_scatter", "the mask's shape must be a leading part of the array's shape", {&a, &mask});
  }
  const int inner = a.ndim() - mask.ndim();
  if (values.ndim() > inner + 1) {
    fail("masked_scatter", "values must broadcast with the last " + std::to_string(inner) + " dimensions of the array",
         {&a, &values});
  }
  // Each selected position (mask broadcast over the trailing dimensions)
  // takes the next value in row-major order.
  Shape mshape = mask.shape();
  mshape.resize(a.ndim(), 1);
  array m = flatten(broadcast_to(reshape(mask, mshape, st), a.shape(), st), st);
  Shape vshape(inner + 1 - values.ndim(), 1);
  vshape.insert(vshape.end(), values.shape().begin(), values.shape().end());
  array v = reshape(astype(values, a.dtype(), st), vshape, st);
  Shape target = v.shape();
  for (int i = 1; i <= inner; ++i) target[i] = a.shape(mask.ndim() + i - 1);
  if (values.ndim() < inner + 1) target[0] = static_cast<int>(mask.size());
  v = flatten(broadcast_to(v, target, st), st);
  if (v.size() == 0) return a;
  array pos = subtract(cumsum(astype(m, int32, st), 0, false, true, st), array(1), st);
  pos = clip(pos, array(0), array(static_cast<int>(v.size()) - 1), st);
  return reshape(where(m, take(v, pos, 0, st), flatten(a, st), st), a.shape(), st);
}

#define KILN_SLICE_UPDATE_OP(NAME, COMBINE)                                                                         \
  array NAME(const array& src, const array& update, Shape start, Shape stop, Shape strides, StreamOrDevice s) {    \
    return slice_update_with(#NAME, src, update, std::move(start), std::move(stop), std::move(strides), s, COMBINE); \
  }                                                                                                                 \
  array NAME(const array& src, const array& update, Shape start, Shape stop, StreamOrDevice s) {                   \
    Shape strides(src.ndim(), 1);                                                                                   \
    return NAME(src, update, std::move(start), std::move(stop), std::move(strides), s);                             \
  }
KILN_SLICE_UPDATE_OP(slice_update_add, [](const array& x, const array& u, Stream st) { return add(x, u, st); })
KILN_SLICE_UPDATE_OP(slice_update_prod, [](const array& x, const array& u, Stream st) { return multiply(x, u, st); })
KILN_SLICE_UPDATE_OP(slice_update_max, [](const array& x, const array& u, Stream st) { return maximum(x, u, st); })
KILN_SLICE_UPDATE_OP(slice_update_min, [](const array& x, const array& u, Stream st) { return minimum(x, u, st); })
#undef KILN_SLICE_UPDATE_OP

}  // namespace kiln
