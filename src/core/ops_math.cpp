// Elementwise math composed from other ops: floating-point predicates and
// cleanup (isnan ... nan_to_num, isclose, allclose, array_equal), angle
// conversions, logaddexp, round to decimals, floor division and divmod.
#include <cmath>
#include <limits>

#include "core/ops_util.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

// Integers and bool compute in float32, as MLX's at_least_float.
Dtype at_least_float(Dtype t) { return is_floating_point(t) ? t : float32; }

double dtype_max(Dtype t) {
  switch (t) {
    case float16: return 65504.0;
    case bfloat16: return static_cast<double>(bfloat16_t::to_float(0x7f7f));
    case float32: return std::numeric_limits<float>::max();
    default: return std::numeric_limits<double>::max();
  }
}

}  // namespace

// Integers and bool hold no NaN or infinity.
array isnan(const array& a, StreamOrDevice s) {
  if (!is_floating_point(a.dtype())) return full(a.shape(), array(false), bool_, s);
  return not_equal(a, a, s);
}
array isposinf(const array& a, StreamOrDevice s) {
  if (!is_floating_point(a.dtype())) return full(a.shape(), array(false), bool_, s);
  return equal(a, array(INFINITY, a.dtype()), s);
}
array isneginf(const array& a, StreamOrDevice s) {
  if (!is_floating_point(a.dtype())) return full(a.shape(), array(false), bool_, s);
  return equal(a, array(-INFINITY, a.dtype()), s);
}
array isinf(const array& a, StreamOrDevice s) {
  if (!is_floating_point(a.dtype())) return full(a.shape(), array(false), bool_, s);
  return equal(abs(a, s), array(INFINITY, a.dtype()), s);
}
array isfinite(const array& a, StreamOrDevice s) {
  if (!is_floating_point(a.dtype())) return full(a.shape(), array(true), bool_, s);
  // |x| < inf is false for NaN and both infinities.
  return less(abs(a, s), array(INFINITY, a.dtype()), s);
}

array nan_to_num(const array& a, float nan, const std::optional<float> posinf, const std::optional<float> neginf,
                 StreamOrDevice s) {
  Dtype t = a.dtype();
  if (!is_floating_point(t)) return a;
  Stream st = to_stream(s);
  double hi = posinf ? static_cast<double>(*posinf) : dtype_max(t);
  double lo = neginf ? static_cast<double>(*neginf) : -dtype_max(t);
  array out = where(isnan(a, st), array(nan, t), a, st);
  out = where(isposinf(a, st), array(hi, t), out, st);
  return where(isneginf(a, st), array(lo, t), out, st);
}

array isclose(const array& a, const array& b, double rtol, double atol, bool equal_nan, StreamOrDevice s) {
  Stream st = to_stream(s);
  broadcast_shapes(a.shape(), b.shape(), "isclose", {&a, &b});
  // Integers and bool compare in float64 (exact below 2^53, and bool has
  // no subtraction).
  Dtype t = promote_types(a.dtype(), b.dtype());
  Dtype ct = is_floating_point(t) ? t : float64;
  array x = astype(a, ct, st), y = astype(b, ct, st);
  // |a - b| <= atol + rtol |b|, in float64 for the tolerances.
  array lhs = astype(abs(subtract(x, y, st), st), float64, st);
  array rhs = add(array(atol), multiply(array(rtol), astype(abs(y, st), float64, st), st), st);
  array out = less_equal(lhs, rhs, st);
  // An infinity is close only to the same infinity.
  array any_inf = logical_or(isinf(x, st), isinf(y, st), st);
  out = logical_and(out, logical_not(any_inf, st), st);
  out = logical_or(out, logical_and(any_inf, equal(x, y, st), st), st);
  if (equal_nan) out = logical_or(out, logical_and(isnan(x, st), isnan(y, st), st), st);
  return out;
}

array allclose(const array& a, const array& b, double rtol, double atol, bool equal_nan, StreamOrDevice s) {
  return all(isclose(a, b, rtol, atol, equal_nan, s), s);
}

array array_equal(const array& a, const array& b, bool equal_nan, StreamOrDevice s) {
  if (a.shape() != b.shape()) return array(false);
  Stream st = to_stream(s);
  array eq = equal(a, b, st);
  if (equal_nan) eq = logical_or(eq, logical_and(isnan(a, st), isnan(b, st), st), st);
  return all(eq, false, st);
}
array array_equal(const array& a, const array& b, StreamOrDevice s) { return array_equal(a, b, false, s); }

array degrees(const array& a, StreamOrDevice s) {
  return multiply(a, array(180.0 / M_PI, at_least_float(a.dtype())), s);
}
array radians(const array& a, StreamOrDevice s) {
  return multiply(a, array(M_PI / 180.0, at_least_float(a.dtype())), s);
}

array logaddexp(const array& a, const array& b, StreamOrDevice s) {
  Stream st = to_stream(s);
  broadcast_shapes(a.shape(), b.shape(), "logaddexp", {&a, &b});
  Dtype t = at_least_float(promote_types(a.dtype(), b.dtype()));
  // 16-bit floats compute in float32, then round once.
  Dtype ct = t == float64 ? float64 : float32;
  array x = astype(a, ct, st), y = astype(b, ct, st);
  // max + log1p(exp(min - max)) cannot overflow; when the max is +inf or
  // the min is -inf the answer is the max (inf - inf would give NaN).
  array hi = maximum(x, y, st), lo = minimum(x, y, st);
  array stable = add(hi, log1p(exp(subtract(lo, hi, st), st), st), st);
  array take_hi = logical_or(equal(hi, array(INFINITY, ct), st), equal(lo, array(-INFINITY, ct), st), st);
  return astype(where(take_hi, hi, stable, st), t, st);
}

array round(const array& a, int decimals, StreamOrDevice s) {
  if (decimals == 0) return round(a, s);
  Stream st = to_stream(s);
  // numpy: rint(x * 10^d) / 10^d; for a negative d the scale is 10^-|d| as
  // a division by 10^|d| so that both directions use an exact power of 10.
  // 16-bit floats compute in float32: x * 10^d rounded to 11 bits would
  // often land on the wrong side of a tie.
  Dtype t = a.dtype() == float64 ? float64 : float32;
  double p = std::pow(10.0, std::abs(decimals));
  array x = astype(a, t, st);
  array r = decimals > 0 ? divide(round(multiply(x, array(p, t), st), st), array(p, t), st)
                         : multiply(round(divide(x, array(p, t), st), st), array(p, t), st);
  return astype(r, a.dtype(), st);
}

std::vector<array> divmod(const array& a, const array& b, StreamOrDevice s) {
  Stream st = to_stream(s);
  return {floor_divide(a, b, st), remainder(a, b, st)};
}

}  // namespace kiln
