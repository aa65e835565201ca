// Elementwise ops, casts and creation ops: argument checks, dtype
// promotion, broadcasting, then a node.
#include <cmath>
#include <iterator>

#include "core/ops_util.h"
#include "core/primitives.h"
#include "kiln/ops.h"

namespace kiln {

const char* unary_op_name(UnaryOp op) {
  static const char* names[] = {"abs",  "negative", "sign",  "exp",   "expm1", "log",        "log1p", "sqrt",
                                "rsqrt", "square",  "sin",   "cos",   "tanh",  "sigmoid",    "erf",   "erfinv",
                                "floor", "ceil",    "round", "relu",  "gelu",  "gelu_approx", "silu", "logical_not"};
  static_assert(std::size(names) == kUnaryOpCount, "a UnaryOp without a name, or kUnaryOpCount out of date");
  return names[static_cast<int>(op)];
}

const char* binary_op_name(BinaryOp op) {
  static const char* names[] = {"add",        "subtract", "multiply", "divide",     "power",     "maximum",
                                "minimum",    "remainder", "equal",   "not_equal",  "less",      "less_equal",
                                "greater",    "greater_equal", "logical_and", "logical_or"};
  static_assert(std::size(names) == kBinaryOpCount, "a BinaryOp without a name, or kBinaryOpCount out of date");
  return names[static_cast<int>(op)];
}

bool is_comparison(BinaryOp op) {
  return op == BinaryOp::equal || op == BinaryOp::not_equal || op == BinaryOp::less ||
         op == BinaryOp::less_equal || op == BinaryOp::greater || op == BinaryOp::greater_equal ||
         op == BinaryOp::logical_and || op == BinaryOp::logical_or;
}

bool Unary::is_equivalent(const Primitive& o) const {
  auto* u = dynamic_cast<const Unary*>(&o);
  return u && u->op_ == op_;
}
bool Binary::is_equivalent(const Primitive& o) const {
  auto* b = dynamic_cast<const Binary*>(&o);
  return b && b->op_ == op_;
}
bool Select::is_equivalent(const Primitive& o) const { return dynamic_cast<const Select*>(&o) != nullptr; }
bool Copy::is_equivalent(const Primitive& o) const {
  auto* c = dynamic_cast<const Copy*>(&o);
  return c && c->view_if_contiguous_ == view_if_contiguous_;
}

namespace {

array unary_op(UnaryOp op, const array& a, StreamOrDevice s, bool floating) {
  Stream st = to_stream(s);
  array x = a;
  if (floating && !is_floating_point(a.dtype())) x = astype(a, float32, st);
  if (op == UnaryOp::logical_not && a.dtype() != bool_) x = astype(a, bool_, st);
  return make_node<Unary>(x.shape(), x.dtype(), {x}, st, op);
}

array binary_op(BinaryOp op, const array& a, const array& b, StreamOrDevice s) {
  const char* name = binary_op_name(op);
  Stream st = to_stream(s);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name, {&a, &b});
  Dtype t = promote_types(a.dtype(), b.dtype());
  if (op == BinaryOp::divide && !is_floating_point(t)) t = float32;
  if (op == BinaryOp::logical_and || op == BinaryOp::logical_or) t = bool_;
  if (t == bool_ && (op == BinaryOp::subtract || op == BinaryOp::power || op == BinaryOp::remainder)) {
    fail(name, "is not defined for bool inputs", {&a, &b});
  }
  array x = a.dtype() == t ? a : astype(a, t, st);
  array y = b.dtype() == t ? b : astype(b, t, st);
  if (x.shape() != shape) x = broadcast_to(x, shape, st);
  if (y.shape() != shape) y = broadcast_to(y, shape, st);
  return make_node<Binary>(shape, is_comparison(op) ? bool_ : t, {x, y}, st, op);
}

}  // namespace

#define KILN_UNARY(NAME, FLOATING) \
  array NAME(const array& a, StreamOrDevice s) { return unary_op(UnaryOp::NAME, a, s, FLOATING); }
KILN_UNARY(abs, false)
KILN_UNARY(negative, false)
KILN_UNARY(sign, false)
KILN_UNARY(exp, true)
KILN_UNARY(expm1, true)
KILN_UNARY(log, true)
KILN_UNARY(log1p, true)
KILN_UNARY(sqrt, true)
KILN_UNARY(rsqrt, true)
KILN_UNARY(square, false)
KILN_UNARY(sin, true)
KILN_UNARY(cos, true)
KILN_UNARY(tanh, true)
KILN_UNARY(sigmoid, true)
KILN_UNARY(erf, true)
KILN_UNARY(erfinv, true)
KILN_UNARY(floor, false)
KILN_UNARY(ceil, false)
KILN_UNARY(round, false)
KILN_UNARY(relu, false)
KILN_UNARY(gelu, true)
KILN_UNARY(gelu_approx, true)
KILN_UNARY(silu, true)
KILN_UNARY(logical_not, false)
#undef KILN_UNARY

#define KILN_BINARY(NAME) \
  array NAME(const array& a, const array& b, StreamOrDevice s) { return binary_op(BinaryOp::NAME, a, b, s); }
KILN_BINARY(add)
KILN_BINARY(subtract)
KILN_BINARY(multiply)
KILN_BINARY(divide)
KILN_BINARY(power)
KILN_BINARY(maximum)
KILN_BINARY(minimum)
KILN_BINARY(remainder)
KILN_BINARY(equal)
KILN_BINARY(not_equal)
KILN_BINARY(less)
KILN_BINARY(less_equal)
KILN_BINARY(greater)
KILN_BINARY(greater_equal)
KILN_BINARY(logical_and)
KILN_BINARY(logical_or)
#undef KILN_BINARY

array operator-(const array& a) { return negative(a); }
array operator!(const array& a) { return logical_not(a); }
array operator+(const array& a, const array& b) { return add(a, b); }
array operator-(const array& a, const array& b) { return subtract(a, b); }
array operator*(const array& a, const array& b) { return multiply(a, b); }
array operator/(const array& a, const array& b) { return divide(a, b); }
array operator%(const array& a, const array& b) { return remainder(a, b); }
array operator==(const array& a, const array& b) { return equal(a, b); }
array operator!=(const array& a, const array& b) { return not_equal(a, b); }
array operator<(const array& a, const array& b) { return less(a, b); }
array operator<=(const array& a, const array& b) { return less_equal(a, b); }
array operator>(const array& a, const array& b) { return greater(a, b); }
array operator>=(const array& a, const array& b) { return greater_equal(a, b); }
array operator&&(const array& a, const array& b) { return logical_and(a, b); }
array operator||(const array& a, const array& b) { return logical_or(a, b); }

array scalar_like(double value, bool is_float, const array& like) {
  auto kind = [](Dtype t) { return t == bool_ ? 0 : (is_floating_point(t) ? 2 : 1); };
  int scalar_kind = is_float ? 2 : 1;
  Dtype t = scalar_kind <= kind(like.dtype()) ? like.dtype() : (is_float ? float32 : int32);
  return array(value, t);
}

array where(const array& condition, const array& x, const array& y, StreamOrDevice s) {
  Stream st = to_stream(s);
  Shape shape = broadcast_shapes(condition.shape(), x.shape(), "where", {&condition, &x, &y});
  shape = broadcast_shapes(shape, y.shape(), "where", {&condition, &x, &y});
  Dtype t = promote_types(x.dtype(), y.dtype());
  auto prep = [&](const array& a, Dtype dt) {
    array r = a.dtype() == dt ? a : astype(a, dt, st);
    return r.shape() == shape ? r : broadcast_to(r, shape, st);
  };
  return make_node<Select>(shape, t, {prep(condition, bool_), prep(x, t), prep(y, t)}, st);
}

array clip(const array& a, const std::optional<array>& a_min, const std::optional<array>& a_max, StreamOrDevice s) {
  if (!a_min && !a_max) fail("clip", "needs at least one of a_min and a_max", {&a});
  array r = a;
  if (a_min) r = maximum(r, *a_min, s);
  if (a_max) r = minimum(r, *a_max, s);
  return r;
}

array astype(const array& a, Dtype dtype, StreamOrDevice s) {
  if (a.dtype() == dtype) return a;
  Stream st = to_stream(s);
  return make_node<Copy>(a.shape(), dtype, {a}, st);
}

array copy(const array& a, StreamOrDevice s) { return make_node<Copy>(a.shape(), a.dtype(), {a}, to_stream(s)); }

array contiguous(const array& a, StreamOrDevice s) {
  return make_node<Copy>(a.shape(), a.dtype(), {a}, to_stream(s), true);
}

// ---- creation ----

namespace {
void check_shape(const Shape& shape, const char* op) {
  for (int d : shape) {
    if (d < 0) throw Error(std::string("[") + op + "] negative dimension in shape " + format_shape(shape));
  }
}
}  // namespace

array full(const Shape& shape, const array& vals, Dtype dtype, StreamOrDevice s) {
  check_shape(shape, "full");
  Stream st = to_stream(s);
  return copy(broadcast_to(astype(vals, dtype, st), shape, st), st);
}
array full(const Shape& shape, const array& vals, StreamOrDevice s) { return full(shape, vals, vals.dtype(), s); }
array zeros(const Shape& shape, Dtype dtype, StreamOrDevice s) { return full(shape, array(0, dtype), dtype, s); }
array ones(const Shape& shape, Dtype dtype, StreamOrDevice s) { return full(shape, array(1, dtype), dtype, s); }
array zeros_like(const array& a, StreamOrDevice s) { return zeros(a.shape(), a.dtype(), s); }
array ones_like(const array& a, StreamOrDevice s) { return ones(a.shape(), a.dtype(), s); }

array arange(double start, double stop, double step, Dtype dtype, StreamOrDevice s) {
  if (step == 0 || !std::isfinite(start) || !std::isfinite(stop) || !std::isfinite(step)) {
    throw Error("[arange] needs finite start, stop and a non-zero step; got start " + std::to_string(start) +
                ", stop " + std::to_string(stop) + ", step " + std::to_string(step));
  }
  double n = std::ceil((stop - start) / step);
  if (n > 2147483647.0) throw Error("[arange] too many elements: " + std::to_string(n));
  int count = n > 0 ? static_cast<int>(n) : 0;
  return make_node<Arange>({count}, dtype, {}, to_stream(s), start, step, count);
}
array arange(double start, double stop, Dtype dtype, StreamOrDevice s) { return arange(start, stop, 1.0, dtype, s); }
array arange(double stop, Dtype dtype, StreamOrDevice s) { return arange(0.0, stop, 1.0, dtype, s); }
array arange(int start, int stop, int step, StreamOrDevice s) {
  return arange(static_cast<double>(start), static_cast<double>(stop), static_cast<double>(step), int32, s);
}
array arange(int stop, StreamOrDevice s) { return arange(0, stop, 1, s); }

array linspace(double start, double stop, int num, Dtype dtype, StreamOrDevice s) {
  if (num < 0) throw Error("[linspace] number of samples must be non-negative, got " + std::to_string(num));
  double step = num > 1 ? (stop - start) / (num - 1) : 0.0;
  return make_node<Arange>({num}, dtype, {}, to_stream(s), start, step, num);
}

array eye(int n, int m, int k, Dtype dtype, StreamOrDevice s) {
  if (n < 0 || m < 0) {
    throw Error("[eye] dimensions must be non-negative, got " + std::to_string(n) + " x " + std::to_string(m));
  }
  Stream st = to_stream(s);
  array rows = reshape(arange(0, n, 1, st), {n, 1}, st);
  array cols = reshape(arange(0, m, 1, st), {1, m}, st);
  return astype(equal(add(rows, array(k), st), cols, st), dtype, st);
}
array eye(int n, Dtype dtype, StreamOrDevice s) { return eye(n, n, 0, dtype, s); }

}  // namespace kiln
