// The distributions MLX builds from uniform bits by composing plain ops
// (truncated normal, Gumbel, categorical, Laplace, permutations): no
// primitive of their own, so every backend, vmap and compile get them for
// free and the numbers are the same on the CPU and the GPU.
#include <cmath>
#include <limits>

#include "core/ops_util.h"
#include "kiln/ops.h"
#include "kiln/random.h"

namespace kiln::random {
namespace {

Dtype compute_type(Dtype dtype, const char* op) {
  if (!is_floating_point(dtype)) throw Error(std::string("[") + op + "] needs a floating dtype, got " + dtype_name(dtype));
  return dtype == float64 ? float64 : float32;
}

// Gumbel-max: argmax over the category axis of logits + Gumbel noise; the
// noise has `shape` with the category axis inserted where it lands after
// logits broadcast against shape.
array categorical_impl(const array& logits, int axis, const Shape& shape, const std::optional<array>& key, Stream st) {
  if (logits.shape(axis) == 0) fail("random.categorical", "the category axis is empty", {&logits});
  Shape gshape = shape;
  int offset = axis + static_cast<int>(shape.size()) - logits.ndim() + 1;
  gshape.insert(gshape.begin() + offset, logits.shape(axis));
  Dtype ct = logits.dtype() == float64 ? float64 : float32;
  array g = gumbel(gshape, ct, key, st);
  return argmax(add(g, astype(logits, ct, st), st), offset, false, st);
}

}  // namespace

array truncated_normal(const array& lower, const array& upper, const Shape& shape, Dtype dtype,
                       const std::optional<array>& key, StreamOrDevice s) {
  const char* op = "random.truncated_normal";
  Dtype ct = compute_type(dtype, op);
  for (int d : shape) {
    if (d < 0) throw Error(std::string("[") + op + "] negative dimension in shape " + format_shape(shape));
  }
  if (broadcast_shapes(broadcast_shapes(lower.shape(), upper.shape(), op, {&lower, &upper}), shape, op,
                       {&lower, &upper}) != shape) {
    fail(op, "lower and upper do not broadcast to " + format_shape(shape), {&lower, &upper});
  }
  Stream st = to_stream(s);
  array r2 = array(std::sqrt(2.0), ct);
  array lo = astype(lower, ct, st), hi = astype(upper, ct, st);
  // The inverse CDF between the CDF values of the bounds, then clipped:
  // erfinv loses a few ulps near +-1, which could step outside.
  array a = erf(divide(lo, r2, st), st), b = erf(divide(hi, r2, st), st);
  array u = uniform(a, b, shape, ct, key, st);
  array z = multiply(r2, erfinv(u, st), st);
  return astype(minimum(maximum(z, lo, st), hi, st), dtype, st);
}

array truncated_normal(const array& lower, const array& upper, Dtype dtype, const std::optional<array>& key,
                       StreamOrDevice s) {
  Shape shape = broadcast_shapes(lower.shape(), upper.shape(), "random.truncated_normal", {&lower, &upper});
  return truncated_normal(lower, upper, shape, dtype, key, s);
}

array gumbel(const Shape& shape, Dtype dtype, const std::optional<array>& key, StreamOrDevice s) {
  Dtype ct = compute_type(dtype, "random.gumbel");
  Stream st = to_stream(s);
  // u in (0, 1): the smallest positive value as the low end keeps log(u)
  // finite (MLX draws [0, 1), where u = 0 gives -inf).
  double tiny = ct == float64 ? std::numeric_limits<double>::denorm_min() : std::numeric_limits<float>::denorm_min();
  array u = uniform(array(tiny, ct), array(1.0, ct), shape, ct, key, st);
  return astype(negative(log(negative(log(u, st), st), st), st), dtype, st);
}

array categorical(const array& logits, int axis, const Shape& shape, const std::optional<array>& key,
                  StreamOrDevice s) {
  const char* op = "random.categorical";
  axis = normalize_axis(axis, logits.ndim(), op, logits);
  Shape reduced = logits.shape();
  reduced.erase(reduced.begin() + axis);
  if (broadcast_shapes(shape, reduced, op, {&logits}) != shape) {
    fail(op, "shape " + format_shape(shape) + " is not a broadcast of the logits' shape without the axis, " +
                 format_shape(reduced),
         {&logits});
  }
  return categorical_impl(logits, axis, shape, key, to_stream(s));
}

array categorical(const array& logits, int axis, int num_samples, const std::optional<array>& key,
                  StreamOrDevice s) {
  const char* op = "random.categorical";
  axis = normalize_axis(axis, logits.ndim(), op, logits);
  if (num_samples < 0) fail(op, "num_samples must be >= 0, got " + std::to_string(num_samples), {&logits});
  Stream st = to_stream(s);
  array l = expand_dims(logits, -1, st);
  Shape shape = l.shape();
  shape.erase(shape.begin() + axis);
  shape.back() = num_samples;
  return categorical_impl(l, axis, shape, key, st);
}

array categorical(const array& logits, int axis, const std::optional<array>& key, StreamOrDevice s) {
  axis = normalize_axis(axis, logits.ndim(), "random.categorical", logits);
  Shape shape = logits.shape();
  shape.erase(shape.begin() + axis);
  return categorical_impl(logits, axis, shape, key, to_stream(s));
}

array laplace(const Shape& shape, Dtype dtype, float loc, float scale, const std::optional<array>& key,
              StreamOrDevice s) {
  Dtype ct = compute_type(dtype, "random.laplace");
  Stream st = to_stream(s);
  // Inverse CDF: -sign(u) log(1 - |u|) for u uniform in (-1, 1).
  double lo = ct == float64 ? std::nextafter(-1.0, 0.0) : std::nextafter(-1.0f, 0.0f);
  array u = uniform(array(lo, ct), array(1.0, ct), shape, ct, key, st);
  array x = negative(multiply(sign(u, st), log1p(negative(abs(u, st), st), st), st), st);
  if (scale != 1.0f) x = multiply(x, array(static_cast<double>(scale), ct), st);
  if (loc != 0.0f) x = add(x, array(static_cast<double>(loc), ct), st);
  return astype(x, dtype, st);
}

array permutation(int x, const std::optional<array>& key, StreamOrDevice s) {
  if (x < 0) throw Error("[random.permutation] needs a size >= 0, got " + std::to_string(x));
  // Sorting random words: ties (probability ~ n^2 / 2^33) keep index order,
  // so the result is always a permutation.
  return argsort(bits({x}, key, s), s);
}

array permutation(const array& x, int axis, const std::optional<array>& key, StreamOrDevice s) {
  axis = normalize_axis(axis, x.ndim(), "random.permutation", x);
  return take(x, permutation(x.shape(axis), key, s), axis, s);
}

}  // namespace kiln::random
