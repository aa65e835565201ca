// Elementwise ops, casts and creation ops: argument checks, dtype
// promotion, broadcasting, then a node.
#include <cmath>
#include <iterator>
#include <optional>

#include "core/array_desc.h"
#include "core/ops_util.h"
#include "core/primitives.h"
#include "kiln/ops.h"

namespace kiln {

#define KILN_NAME_ENTRY(name) #name,
const char* unary_op_name(UnaryOp op) {
  static const char* names[] = {KILN_UNARY_OPS(KILN_NAME_ENTRY)};
  return names[static_cast<int>(op)];
}

const char* binary_op_name(BinaryOp op) {
  static const char* names[] = {KILN_BINARY_OPS(KILN_NAME_ENTRY)};
  return names[static_cast<int>(op)];
}
#undef KILN_NAME_ENTRY

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

// The elementwise ops complex64 has (op_math.inc accepts them on
// complex64_t); the others refuse it here, before any kernel, as MLX's do.
bool complex_unary(UnaryOp op) {
  switch (op) {
    case UnaryOp::abs: case UnaryOp::negative: case UnaryOp::square: case UnaryOp::sqrt: case UnaryOp::rsqrt:
    case UnaryOp::exp: case UnaryOp::log: case UnaryOp::log1p: case UnaryOp::log2: case UnaryOp::log10:
    case UnaryOp::sin: case UnaryOp::cos: case UnaryOp::tan: case UnaryOp::arcsin: case UnaryOp::arccos:
    case UnaryOp::arctan: case UnaryOp::sinh: case UnaryOp::cosh: case UnaryOp::tanh: case UnaryOp::arcsinh:
    case UnaryOp::arccosh: case UnaryOp::arctanh: case UnaryOp::sign: case UnaryOp::conjugate:
    case UnaryOp::logical_not:
      return true;
    default: return false;
  }
}
bool complex_binary(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: case BinaryOp::subtract: case BinaryOp::multiply: case BinaryOp::divide:
    case BinaryOp::power: case BinaryOp::maximum: case BinaryOp::minimum: case BinaryOp::equal:
    case BinaryOp::not_equal: case BinaryOp::less: case BinaryOp::less_equal: case BinaryOp::greater:
    case BinaryOp::greater_equal: case BinaryOp::logical_and: case BinaryOp::logical_or:
      return true;
    default: return false;
  }
}

array unary_op(UnaryOp op, const array& a, StreamOrDevice s, bool floating) {
  Stream st = to_stream(s);
  if (is_complex(a.dtype())) {
    if (!complex_unary(op)) fail(unary_op_name(op), "is not supported for complex64", {&a});
    if (op == UnaryOp::logical_not) return make_node<Unary>(a.shape(), bool_, {astype(a, bool_, st)}, st, op);
    array out = make_node<Unary>(a.shape(), a.dtype(), {a}, st, op);
    // |z| is computed into the real part; the result is float32 (MLX).
    return op == UnaryOp::abs ? astype(out, float32, st) : out;
  }
  array x = a;
  if (floating && !is_floating_point(a.dtype())) x = astype(a, float32, st);
  if (op == UnaryOp::logical_not && a.dtype() != bool_) x = astype(a, bool_, st);
  return make_node<Unary>(x.shape(), x.dtype(), {x}, st, op);
}

// The first negative element of an evaluated signed-integer array, if any.
template <typename T>
std::optional<int64_t> first_negative(const array& a) {
  const T* p = a.data<T>();
  const Strides& st = a.strides();
  std::vector<int> idx(a.ndim(), 0);
  for (size_t i = 0; i < a.size(); ++i) {
    int64_t off = 0;
    for (int d = 0; d < a.ndim(); ++d) off += idx[d] * st[d];
    if (p[off] < 0) return static_cast<int64_t>(p[off]);
    for (int d = a.ndim() - 1; d >= 0 && ++idx[d] == a.shape()[d]; --d) idx[d] = 0;
  }
  return std::nullopt;
}

// numpy refuses integers to negative integer powers. An exponent already
// evaluated (a scalar, a constant) is checked here; any other is checked by
// the kernel before it runs.
void check_integer_exponent(const array& a, const array& b, Dtype t) {
  if (!is_integral(t) || !is_signed(t) || b.desc()->get_status() != Status::available) return;
  std::optional<int64_t> neg;
  if (b.dtype() == int8) neg = first_negative<int8_t>(b);
  if (b.dtype() == int16) neg = first_negative<int16_t>(b);
  if (b.dtype() == int32) neg = first_negative<int32_t>(b);
  if (b.dtype() == int64) neg = first_negative<int64_t>(b);
  if (neg) {
    fail("power", "integers to negative integer powers are not allowed (exponent " + std::to_string(*neg) + ")",
         {&a, &b});
  }
}

array binary_op(BinaryOp op, const array& a, const array& b, StreamOrDevice s) {
  const char* name = binary_op_name(op);
  Stream st = to_stream(s);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name, {&a, &b});
  Dtype t = promote_types(a.dtype(), b.dtype());
  if (is_complex(t) && !complex_binary(op)) fail(name, "is not supported for complex64", {&a, &b});
  if ((op == BinaryOp::divide || op == BinaryOp::arctan2) && !is_floating_point(t) && !is_complex(t)) t = float32;
  bool bitwise = op == BinaryOp::bitwise_and || op == BinaryOp::bitwise_or || op == BinaryOp::bitwise_xor ||
                 op == BinaryOp::left_shift || op == BinaryOp::right_shift;
  if (bitwise && is_floating_point(t)) fail(name, "needs integer or bool inputs", {&a, &b});
  // Shifting bools shifts 0/1 bytes (MLX).
  if (t == bool_ && (op == BinaryOp::left_shift || op == BinaryOp::right_shift)) t = uint8;
  if (op == BinaryOp::logical_and || op == BinaryOp::logical_or) t = bool_;
  if (t == bool_ && (op == BinaryOp::subtract || op == BinaryOp::remainder || op == BinaryOp::floor_divide)) {
    fail(name, "is not defined for bool inputs", {&a, &b});
  }
  if (op == BinaryOp::power) check_integer_exponent(a, b, t);
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
KILN_UNARY(tan, true)
KILN_UNARY(arcsin, true)
KILN_UNARY(arccos, true)
KILN_UNARY(arctan, true)
KILN_UNARY(sinh, true)
KILN_UNARY(cosh, true)
KILN_UNARY(arcsinh, true)
KILN_UNARY(arccosh, true)
KILN_UNARY(arctanh, true)
KILN_UNARY(log2, true)
KILN_UNARY(log10, true)
#undef KILN_UNARY

#define KILN_BINARY(NAME) \
  array NAME(const array& a, const array& b, StreamOrDevice s) { return binary_op(BinaryOp::NAME, a, b, s); }
KILN_BINARY(add)
KILN_BINARY(subtract)
KILN_BINARY(multiply)
KILN_BINARY(divide)
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
KILN_BINARY(arctan2)
KILN_BINARY(floor_divide)
KILN_BINARY(bitwise_and)
KILN_BINARY(bitwise_or)
KILN_BINARY(bitwise_xor)
KILN_BINARY(left_shift)
KILN_BINARY(right_shift)
#undef KILN_BINARY

array negative(const array& a, StreamOrDevice s) {
  if (a.dtype() == bool_) fail("negative", "is not defined for bool; use logical_not", {&a});
  return unary_op(UnaryOp::negative, a, s, false);
}

array power(const array& a, const array& b, StreamOrDevice s) {
  if (promote_types(a.dtype(), b.dtype()) == bool_) {
    // a ** b on 0/1 values: 0 ** 1 is the only false case.
    broadcast_shapes(a.shape(), b.shape(), "power", {&a, &b});
    return logical_or(a, logical_not(b, s), s);
  }
  return binary_op(BinaryOp::power, a, b, s);
}

array conjugate(const array& a, StreamOrDevice s) {
  if (!is_complex(a.dtype())) return a;  // numpy and MLX: the conjugate of a real array is itself
  return unary_op(UnaryOp::conjugate, a, s, false);
}
array conj(const array& a, StreamOrDevice s) { return conjugate(a, s); }

array bitwise_invert(const array& a, StreamOrDevice s) {
  if (is_complex(a.dtype())) fail("bitwise_invert", "needs integer or bool input", {&a});
  if (is_floating_point(a.dtype())) fail("bitwise_invert", "needs integer or bool input", {&a});
  if (a.dtype() == bool_) return logical_not(a, s);
  return unary_op(UnaryOp::bitwise_invert, a, s, false);
}

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
array operator~(const array& a) { return bitwise_invert(a); }
array operator&(const array& a, const array& b) { return bitwise_and(a, b); }
array operator|(const array& a, const array& b) { return bitwise_or(a, b); }
array operator^(const array& a, const array& b) { return bitwise_xor(a, b); }
array operator<<(const array& a, const array& b) { return left_shift(a, b); }
array operator>>(const array& a, const array& b) { return right_shift(a, b); }

Dtype weak_scalar_dtype(bool is_float, const array& like) {
  auto kind = [](Dtype t) { return t == bool_ ? 0 : is_complex(t) ? 3 : is_floating_point(t) ? 2 : 1; };
  int scalar_kind = is_float ? 2 : 1;
  return scalar_kind <= kind(like.dtype()) ? like.dtype() : (is_float ? float32 : int32);
}

void check_scalar_fits(int64_t value, bool beyond_int64, Dtype dtype, const char* op) {
  int64_t lo = 0, hi = 0;
  switch (dtype) {
    case int8: lo = INT8_MIN, hi = INT8_MAX; break;
    case uint8: lo = 0, hi = UINT8_MAX; break;
    case int16: lo = INT16_MIN, hi = INT16_MAX; break;
    case uint16: lo = 0, hi = UINT16_MAX; break;
    case int32: lo = INT32_MIN, hi = INT32_MAX; break;
    case uint32: lo = 0, hi = UINT32_MAX; break;
    case int64: lo = INT64_MIN, hi = INT64_MAX; break;
    case uint64:  // every value above INT64_MAX fits too
      if (beyond_int64 || value >= 0) return;
      break;
    default: return;  // bool and the floats
  }
  if (!beyond_int64 && value >= lo && value <= hi) return;
  std::string v = beyond_int64 ? "above " + std::to_string(INT64_MAX) : std::to_string(value);
  throw Error(std::string("[") + op + "] scalar " + v + " is out of bounds for " + dtype_name(dtype) +
              " (the dtype of the array it is combined with)");
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
  // Checked here so that a bad bound is reported as clip's, not maximum's.
  Shape shape = a.shape();
  for (const auto* bound : {&a_min, &a_max}) {
    if (*bound) shape = broadcast_shapes(shape, (*bound)->shape(), "clip", {&a, &**bound});
  }
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

// `op` is the creation function the user called, for its error messages.
array filled(const Shape& shape, const array& vals, Dtype dtype, StreamOrDevice s, const char* op) {
  check_shape(shape, op);
  Stream st = to_stream(s);
  array v = astype(vals, dtype, st);
  if (broadcast_shapes(v.shape(), shape, op, {&vals}) != shape) {
    fail(op, "values do not broadcast to the shape " + format_shape(shape), {&vals});
  }
  return copy(broadcast_to(v, shape, st), st);
}
}  // namespace

array full(const Shape& shape, const array& vals, Dtype dtype, StreamOrDevice s) {
  return filled(shape, vals, dtype, s, "full");
}
array full(const Shape& shape, const array& vals, StreamOrDevice s) { return full(shape, vals, vals.dtype(), s); }
array zeros(const Shape& shape, Dtype dtype, StreamOrDevice s) { return filled(shape, array(0, dtype), dtype, s, "zeros"); }
array zeros(const Shape& shape, StreamOrDevice s) { return zeros(shape, float32, s); }
array ones(const Shape& shape, Dtype dtype, StreamOrDevice s) { return filled(shape, array(1, dtype), dtype, s, "ones"); }
array ones(const Shape& shape, StreamOrDevice s) { return ones(shape, float32, s); }
array full_like(const array& a, const array& vals, Dtype dtype, StreamOrDevice s) {
  return filled(a.shape(), vals, dtype, s, "full_like");
}
array full_like(const array& a, const array& vals, StreamOrDevice s) { return full_like(a, vals, a.dtype(), s); }
array zeros_like(const array& a, StreamOrDevice s) { return zeros(a.shape(), a.dtype(), s); }
array zeros_like(const array& a, Dtype dtype, StreamOrDevice s) { return zeros(a.shape(), dtype, s); }
array ones_like(const array& a, StreamOrDevice s) { return ones(a.shape(), a.dtype(), s); }
array ones_like(const array& a, Dtype dtype, StreamOrDevice s) { return ones(a.shape(), dtype, s); }

array arange(double start, double stop, double step, Dtype dtype, StreamOrDevice s) {
  if (dtype == bool_) throw Error("[arange] is not defined for bool");
  if (step == 0 || std::isnan(step) || !std::isfinite(start) || !std::isfinite(stop)) {
    throw Error("[arange] needs finite start and stop and a non-zero step; got start " + std::to_string(start) +
                ", stop " + std::to_string(stop) + ", step " + std::to_string(step));
  }
  Stream st = to_stream(s);
  // An infinite step gives the start alone when the range is not empty.
  if (std::isinf(step)) {
    bool empty = step > 0 ? start >= stop : start <= stop;
    int n = empty ? 0 : 1;
    return make_node<Arange>({n}, dtype, {}, st, start, 0.0, n);
  }
  double n = std::ceil((stop - start) / step);
  if (n > 2147483647.0) throw Error("[arange] too many elements: " + std::to_string(n));
  int count = n > 0 ? static_cast<int>(n) : 0;
  double first = start, delta = step;
  if (!is_floating_point(dtype)) {
    // numpy and MLX compute integer ranges in the output type: the start
    // and the second value are truncated first.
    first = std::trunc(start);
    delta = std::trunc(start + step) - first;
  }
  return make_node<Arange>({count}, dtype, {}, st, first, delta, count);
}
array arange(double start, double stop, double step, StreamOrDevice s) { return arange(start, stop, step, float32, s); }
array arange(double start, double stop, Dtype dtype, StreamOrDevice s) { return arange(start, stop, 1.0, dtype, s); }
array arange(double start, double stop, StreamOrDevice s) { return arange(start, stop, 1.0, float32, s); }
array arange(double stop, Dtype dtype, StreamOrDevice s) { return arange(0.0, stop, 1.0, dtype, s); }
array arange(double stop, StreamOrDevice s) { return arange(0.0, stop, 1.0, float32, s); }
array arange(int start, int stop, int step, StreamOrDevice s) {
  return arange(static_cast<double>(start), static_cast<double>(stop), static_cast<double>(step), int32, s);
}
array arange(int start, int stop, StreamOrDevice s) { return arange(start, stop, 1, s); }
array arange(int stop, StreamOrDevice s) { return arange(0, stop, 1, s); }

array linspace(double start, double stop, int num, bool endpoint, Dtype dtype, StreamOrDevice s) {
  if (num < 0) throw Error("[linspace] number of samples must be non-negative, got " + std::to_string(num));
  // Without the endpoint, stop would be the sample after the last one.
  int intervals = endpoint ? num - 1 : num;
  double step = intervals > 0 ? (stop - start) / intervals : 0.0;
  return make_node<Arange>({num}, dtype, {}, to_stream(s), start, step, num);
}
array linspace(double start, double stop, int num, Dtype dtype, StreamOrDevice s) {
  return linspace(start, stop, num, true, dtype, s);
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
array eye(int n, int m, StreamOrDevice s) { return eye(n, m, 0, float32, s); }
array eye(int n, int m, int k, StreamOrDevice s) { return eye(n, m, k, float32, s); }
array eye(int n, StreamOrDevice s) { return eye(n, n, 0, float32, s); }

}  // namespace kiln
