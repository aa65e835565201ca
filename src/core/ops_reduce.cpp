// Reductions, arg-reductions, softmax and the ops composed from them.
#include <cmath>
#include <iterator>
#include <limits>
#include <numeric>

#include "core/ops_util.h"
#include "core/primitives.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

std::vector<int> all_axes(const array& a) {
  std::vector<int> axes(a.ndim());
  std::iota(axes.begin(), axes.end(), 0);
  return axes;
}

Shape kept_shape(const Shape& shape, const std::vector<int>& axes) {
  Shape out = shape;
  for (int ax : axes) out[ax] = 1;
  return out;
}

Shape squeezed_shape(const Shape& shape, const std::vector<int>& axes) {
  Shape out;
  size_t j = 0;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    if (j < axes.size() && axes[j] == d) {
      ++j;
      continue;
    }
    out.push_back(shape[d]);
  }
  return out;
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  static const char* names[] = {"sum", "prod", "max", "min", "all", "any"};
  static_assert(std::size(names) == kReduceOpCount, "a ReduceOp without a name, or kReduceOpCount out of date");
  return names[static_cast<int>(op)];
}

namespace {

Dtype reduce_dtype(ReduceOp op, Dtype in) {
  if (op == ReduceOp::all || op == ReduceOp::any) return bool_;
  // MLX's rule: integers of up to 32 bits accumulate in 32 bits of their
  // signedness (bool counts as signed); 64-bit ones stay.
  if (op == ReduceOp::sum || op == ReduceOp::prod) {
    if (in == bool_ || in == int8 || in == int16) return int32;
    if (in == uint8 || in == uint16) return uint32;
  }
  return in;
}

array reduce(ReduceOp op, const char* name, const array& a, const std::vector<int>& axes_in, bool keepdims,
             StreamOrDevice s) {
  std::vector<int> axes = normalize_axes(axes_in, a.ndim(), name, a);
  Stream st = to_stream(s);
  Dtype out_dtype = reduce_dtype(op, a.dtype());
  if (is_complex(a.dtype()) && op != ReduceOp::sum && op != ReduceOp::prod) {
    fail(name, "is not supported for complex64", {&a});
  }
  if (op == ReduceOp::max || op == ReduceOp::min) {
    for (int ax : axes) {
      if (a.shape()[ax] == 0) fail(name, "cannot reduce an empty axis (no identity)", {&a});
    }
  }
  if (axes.empty()) return astype(a, out_dtype, st);
  array out = make_node<Reduce>(kept_shape(a.shape(), axes), out_dtype, {a}, st, op, axes);
  return keepdims ? out : reshape(out, squeezed_shape(a.shape(), axes), st);
}

// Compositions (mean, var, logsumexp, softmax) run in float32 for 16-bit
// floats and integers, so intermediates are not rounded to the narrow type.
array compute_input(const array& a, Stream st) {
  return a.dtype() == float32 || a.dtype() == float64 || a.dtype() == complex64 ? a : astype(a, float32, st);
}
Dtype result_dtype(const array& a) { return is_floating_point(a.dtype()) || is_complex(a.dtype()) ? a.dtype() : float32; }

int64_t count_over(const array& a, const std::vector<int>& axes) {
  int64_t n = 1;
  for (int ax : axes) n *= a.shape()[ax];
  return n;
}

}  // namespace

#define KILN_REDUCTION(NAME, OP)                                                                 \
  array NAME(const array& a, const std::vector<int>& axes, bool keepdims, StreamOrDevice s) {  \
    return reduce(OP, #NAME, a, axes, keepdims, s);                                              \
  }                                                                                              \
  array NAME(const array& a, int axis, bool keepdims, StreamOrDevice s) {                      \
    return reduce(OP, #NAME, a, {axis}, keepdims, s);                                            \
  }                                                                                              \
  array NAME(const array& a, bool keepdims, StreamOrDevice s) {                                \
    return reduce(OP, #NAME, a, all_axes(a), keepdims, s);                                       \
  }                                                                                              \
  array NAME(const array& a, StreamOrDevice s) { return NAME(a, false, s); }
KILN_REDUCTION(sum, ReduceOp::sum)
KILN_REDUCTION(prod, ReduceOp::prod)
KILN_REDUCTION(max, ReduceOp::max)
KILN_REDUCTION(min, ReduceOp::min)
KILN_REDUCTION(all, ReduceOp::all)
KILN_REDUCTION(any, ReduceOp::any)
#undef KILN_REDUCTION

array mean(const array& a, const std::vector<int>& axes_in, bool keepdims, StreamOrDevice s) {
  std::vector<int> axes = normalize_axes(axes_in, a.ndim(), "mean", a);
  Stream st = to_stream(s);
  array x = compute_input(a, st);
  int64_t n = count_over(a, axes);
  array total = sum(x, axes, keepdims, st);
  return astype(multiply(total, array(n ? 1.0 / static_cast<double>(n) : NAN, x.dtype()), st), result_dtype(a), st);
}
array mean(const array& a, int axis, bool keepdims, StreamOrDevice s) {
  return mean(a, std::vector<int>{axis}, keepdims, s);
}
array mean(const array& a, bool keepdims, StreamOrDevice s) { return mean(a, all_axes(a), keepdims, s); }
array mean(const array& a, StreamOrDevice s) { return mean(a, false, s); }

array var(const array& a, const std::vector<int>& axes_in, bool keepdims, int ddof, StreamOrDevice s) {
  std::vector<int> axes = normalize_axes(axes_in, a.ndim(), "var", a);
  Stream st = to_stream(s);
  array x = compute_input(a, st);
  int64_t n = count_over(a, axes);
  array centered = subtract(x, mean(x, axes, true, st), st);
  // Complex values: the mean squared magnitude, a float32 (MLX).
  array sq = is_complex(x.dtype()) ? real(multiply(centered, conjugate(centered, st), st), st)
                                   : multiply(centered, centered, st);
  array ss = sum(sq, axes, keepdims, st);
  // numpy divides by max(n - ddof, 0): a zero count gives inf (or nan where
  // the squares sum to 0).
  double denom = static_cast<double>(std::max<int64_t>(n - ddof, 0));
  return astype(multiply(ss, array(denom > 0 ? 1.0 / denom : INFINITY, ss.dtype()), st),
                is_complex(a.dtype()) ? float32 : result_dtype(a), st);
}
array var(const array& a, int axis, bool keepdims, int ddof, StreamOrDevice s) {
  return var(a, std::vector<int>{axis}, keepdims, ddof, s);
}
array var(const array& a, bool keepdims, int ddof, StreamOrDevice s) { return var(a, all_axes(a), keepdims, ddof, s); }
array var(const array& a, StreamOrDevice s) { return var(a, false, 0, s); }

array std(const array& a, const std::vector<int>& axes, bool keepdims, int ddof, StreamOrDevice s) {
  return sqrt(var(a, axes, keepdims, ddof, s), s);
}
array std(const array& a, int axis, bool keepdims, int ddof, StreamOrDevice s) {
  return sqrt(var(a, axis, keepdims, ddof, s), s);
}
array std(const array& a, bool keepdims, int ddof, StreamOrDevice s) { return sqrt(var(a, keepdims, ddof, s), s); }
array std(const array& a, StreamOrDevice s) { return sqrt(var(a, s), s); }

array logsumexp(const array& a, const std::vector<int>& axes_in, bool keepdims, StreamOrDevice s) {
  std::vector<int> axes = normalize_axes(axes_in, a.ndim(), "logsumexp", a);
  Stream st = to_stream(s);
  array x = compute_input(a, st);
  if (axes.empty()) return astype(x, result_dtype(a), st);
  if (count_over(a, axes) == 0) {  // the log of an empty sum
    Shape shape = keepdims ? kept_shape(a.shape(), axes) : squeezed_shape(a.shape(), axes);
    return full(shape, array(-INFINITY, result_dtype(a)), st);
  }
  // Shift by the max so exp cannot overflow; an infinite max is replaced by
  // 0 so that rows of -inf give -inf rather than nan.
  array m = max(x, axes, true, st);
  array shift = where(equal(abs(m, st), array(INFINITY, x.dtype()), st), zeros_like(m, st), m, st);
  array lse = astype(add(log(sum(exp(subtract(x, shift, st), st), axes, true, st), st), shift, st), result_dtype(a), st);
  return keepdims ? lse : reshape(lse, squeezed_shape(a.shape(), axes), st);
}
array logsumexp(const array& a, int axis, bool keepdims, StreamOrDevice s) {
  return logsumexp(a, std::vector<int>{axis}, keepdims, s);
}
array logsumexp(const array& a, bool keepdims, StreamOrDevice s) { return logsumexp(a, all_axes(a), keepdims, s); }
array logsumexp(const array& a, StreamOrDevice s) { return logsumexp(a, false, s); }

namespace {
array arg_reduce(bool is_max, const array& a, int axis, bool keepdims, StreamOrDevice s) {
  const char* name = is_max ? "argmax" : "argmin";
  if (is_complex(a.dtype())) fail(name, "is not supported for complex64", {&a});
  int ax = normalize_axis(axis, a.ndim(), name, a);
  if (a.shape()[ax] == 0) fail(name, "cannot reduce an empty axis", {&a});
  Stream st = to_stream(s);
  array out = make_node<ArgReduce>(kept_shape(a.shape(), {ax}), uint32, {a}, st, is_max, ax);
  return keepdims ? out : reshape(out, squeezed_shape(a.shape(), {ax}), st);
}
array arg_reduce_flat(bool is_max, const array& a, bool keepdims, StreamOrDevice s) {
  const char* name = is_max ? "argmax" : "argmin";
  if (a.size() == 0) fail(name, "cannot reduce an empty array", {&a});
  array out = arg_reduce(is_max, reshape(a, {-1}, s), 0, false, s);
  return keepdims ? reshape(out, Shape(a.ndim(), 1), s) : out;
}
}  // namespace

array argmax(const array& a, int axis, bool keepdims, StreamOrDevice s) { return arg_reduce(true, a, axis, keepdims, s); }
array argmax(const array& a, bool keepdims, StreamOrDevice s) { return arg_reduce_flat(true, a, keepdims, s); }
array argmax(const array& a, StreamOrDevice s) { return arg_reduce_flat(true, a, false, s); }
array argmin(const array& a, int axis, bool keepdims, StreamOrDevice s) { return arg_reduce(false, a, axis, keepdims, s); }
array argmin(const array& a, bool keepdims, StreamOrDevice s) { return arg_reduce_flat(false, a, keepdims, s); }
array argmin(const array& a, StreamOrDevice s) { return arg_reduce_flat(false, a, false, s); }

array softmax(const array& a, const std::vector<int>& axes_in, StreamOrDevice s) {
  std::vector<int> axes = normalize_axes(axes_in, a.ndim(), "softmax", a);
  if (is_complex(a.dtype())) fail("softmax", "is not supported for complex64", {&a});
  Stream st = to_stream(s);
  Dtype out = result_dtype(a);
  if (axes.empty()) return ones(a.shape(), out, st);  // each element is its own group
  // Nothing to normalize: the same empty array whatever the axes (the max
  // below has no identity over an empty axis).
  if (a.size() == 0) return zeros(a.shape(), out, st);
  if (axes.size() == 1 && axes[0] == a.ndim() - 1) {
    // The fused kernel computes in float for 16-bit inputs.
    array x = is_floating_point(a.dtype()) ? a : astype(a, float32, st);
    return make_node<Softmax>(x.shape(), x.dtype(), {x}, st);
  }
  array x = compute_input(a, st);
  array e = exp(subtract(x, max(x, axes, true, st), st), st);
  return astype(divide(e, sum(e, axes, true, st), st), out, st);
}
array softmax(const array& a, int axis, StreamOrDevice s) { return softmax(a, std::vector<int>{axis}, s); }
array softmax(const array& a, StreamOrDevice s) { return softmax(a, all_axes(a), s); }
array softmax(const array& a, const std::vector<int>& axes, bool, StreamOrDevice s) { return softmax(a, axes, s); }
array softmax(const array& a, int axis, bool, StreamOrDevice s) { return softmax(a, std::vector<int>{axis}, s); }
array softmax(const array& a, bool, StreamOrDevice s) { return softmax(a, all_axes(a), s); }

}  // namespace kiln
