#pragma once
// Array operations. Every op only builds the graph; nothing runs until eval,
// item or data. Each op checks its arguments and throws kiln::Error naming
// the op, the shapes and the dtypes. The trailing StreamOrDevice picks where
// the op runs (default: the default stream of the default device).
#include <optional>
#include <utility>
#include <vector>

#include "kiln/array.h"

namespace kiln {

// ---- creation ----
array zeros(const Shape& shape, Dtype dtype = float32, StreamOrDevice s = {});
array ones(const Shape& shape, Dtype dtype = float32, StreamOrDevice s = {});
// Broadcasts vals to shape, cast to dtype.
array full(const Shape& shape, const array& vals, Dtype dtype, StreamOrDevice s = {});
array full(const Shape& shape, const array& vals, StreamOrDevice s = {});
template <typename T>
array full(const Shape& shape, T val, Dtype dtype, StreamOrDevice s = {}) {
  return full(shape, array(val, dtype), dtype, s);
}
template <typename T>
array full(const Shape& shape, T val, StreamOrDevice s = {}) {
  return full(shape, array(val), s);
}
array zeros_like(const array& a, StreamOrDevice s = {});
array ones_like(const array& a, StreamOrDevice s = {});
array arange(double start, double stop, double step, Dtype dtype = float32, StreamOrDevice s = {});
array arange(double start, double stop, Dtype dtype = float32, StreamOrDevice s = {});
array arange(double stop, Dtype dtype = float32, StreamOrDevice s = {});
array arange(int start, int stop, int step = 1, StreamOrDevice s = {});  // int32
array arange(int stop, StreamOrDevice s = {});                         // int32
array linspace(double start, double stop, int num = 50, Dtype dtype = float32, StreamOrDevice s = {});
// n x m identity-like matrix with ones on diagonal k.
array eye(int n, int m, int k = 0, Dtype dtype = float32, StreamOrDevice s = {});
array eye(int n, Dtype dtype = float32, StreamOrDevice s = {});

array astype(const array& a, Dtype dtype, StreamOrDevice s = {});
// A new array with its own buffer, same layout semantics (row-major).
array copy(const array& a, StreamOrDevice s = {});
// Row-major contiguous: a view of a when it already is, else a copy.
array contiguous(const array& a, StreamOrDevice s = {});

// ---- unary (floating ops on integer inputs compute in float32) ----
array abs(const array& a, StreamOrDevice s = {});
array negative(const array& a, StreamOrDevice s = {});
array sign(const array& a, StreamOrDevice s = {});
array exp(const array& a, StreamOrDevice s = {});
array expm1(const array& a, StreamOrDevice s = {});
array log(const array& a, StreamOrDevice s = {});
array log1p(const array& a, StreamOrDevice s = {});
array sqrt(const array& a, StreamOrDevice s = {});
array rsqrt(const array& a, StreamOrDevice s = {});
array square(const array& a, StreamOrDevice s = {});
array sin(const array& a, StreamOrDevice s = {});
array cos(const array& a, StreamOrDevice s = {});
array tanh(const array& a, StreamOrDevice s = {});
array sigmoid(const array& a, StreamOrDevice s = {});
array erf(const array& a, StreamOrDevice s = {});
array erfinv(const array& a, StreamOrDevice s = {});
array floor(const array& a, StreamOrDevice s = {});
array ceil(const array& a, StreamOrDevice s = {});
array round(const array& a, StreamOrDevice s = {});  // half to even
array relu(const array& a, StreamOrDevice s = {});
array gelu(const array& a, StreamOrDevice s = {});         // x * Phi(x), exact (erf)
array gelu_approx(const array& a, StreamOrDevice s = {});  // tanh approximation
array silu(const array& a, StreamOrDevice s = {});         // x * sigmoid(x)
array logical_not(const array& a, StreamOrDevice s = {});

// ---- binary (broadcasting, numpy promotion) ----
array add(const array& a, const array& b, StreamOrDevice s = {});
array subtract(const array& a, const array& b, StreamOrDevice s = {});
array multiply(const array& a, const array& b, StreamOrDevice s = {});
// True division: integer inputs give float32.
array divide(const array& a, const array& b, StreamOrDevice s = {});
array power(const array& a, const array& b, StreamOrDevice s = {});
array maximum(const array& a, const array& b, StreamOrDevice s = {});
array minimum(const array& a, const array& b, StreamOrDevice s = {});
// Result has the sign of b (Python/numpy semantics).
array remainder(const array& a, const array& b, StreamOrDevice s = {});
array equal(const array& a, const array& b, StreamOrDevice s = {});
array not_equal(const array& a, const array& b, StreamOrDevice s = {});
array less(const array& a, const array& b, StreamOrDevice s = {});
array less_equal(const array& a, const array& b, StreamOrDevice s = {});
array greater(const array& a, const array& b, StreamOrDevice s = {});
array greater_equal(const array& a, const array& b, StreamOrDevice s = {});
array logical_and(const array& a, const array& b, StreamOrDevice s = {});
array logical_or(const array& a, const array& b, StreamOrDevice s = {});
array where(const array& condition, const array& x, const array& y, StreamOrDevice s = {});
array clip(const array& a, const std::optional<array>& a_min, const std::optional<array>& a_max,
           StreamOrDevice s = {});

// ---- reductions (axes may be negative; empty axes list = no reduction) ----
array sum(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array sum(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array sum(const array& a, bool keepdims = false, StreamOrDevice s = {});
array mean(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array mean(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array mean(const array& a, bool keepdims = false, StreamOrDevice s = {});
array max(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array max(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array max(const array& a, bool keepdims = false, StreamOrDevice s = {});
array min(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array min(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array min(const array& a, bool keepdims = false, StreamOrDevice s = {});
array prod(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array prod(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array prod(const array& a, bool keepdims = false, StreamOrDevice s = {});
array all(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array all(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array all(const array& a, bool keepdims = false, StreamOrDevice s = {});
array any(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array any(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array any(const array& a, bool keepdims = false, StreamOrDevice s = {});
array logsumexp(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array logsumexp(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array logsumexp(const array& a, bool keepdims = false, StreamOrDevice s = {});
array var(const array& a, const std::vector<int>& axes, bool keepdims = false, int ddof = 0,
          StreamOrDevice s = {});
array var(const array& a, int axis, bool keepdims = false, int ddof = 0, StreamOrDevice s = {});
array var(const array& a, bool keepdims = false, int ddof = 0, StreamOrDevice s = {});
// Index (uint32) of the first extreme value along axis; without an axis,
// over the flattened array.
array argmax(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array argmax(const array& a, bool keepdims = false, StreamOrDevice s = {});
array argmin(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array argmin(const array& a, bool keepdims = false, StreamOrDevice s = {});

array softmax(const array& a, const std::vector<int>& axes, StreamOrDevice s = {});
array softmax(const array& a, int axis, StreamOrDevice s = {});
array softmax(const array& a, StreamOrDevice s = {});  // over all axes

// ---- shape and data movement ----
array reshape(const array& a, Shape shape, StreamOrDevice s = {});  // one dim may be -1
array transpose(const array& a, const std::vector<int>& axes, StreamOrDevice s = {});
array transpose(const array& a, StreamOrDevice s = {});  // reverses the axes
array swapaxes(const array& a, int axis1, int axis2, StreamOrDevice s = {});
array expand_dims(const array& a, const std::vector<int>& axes, StreamOrDevice s = {});
array expand_dims(const array& a, int axis, StreamOrDevice s = {});
array squeeze(const array& a, const std::vector<int>& axes, StreamOrDevice s = {});
array squeeze(const array& a, int axis, StreamOrDevice s = {});
array squeeze(const array& a, StreamOrDevice s = {});  // every size-1 axis
array flatten(const array& a, int start_axis = 0, int end_axis = -1, StreamOrDevice s = {});
array broadcast_to(const array& a, const Shape& shape, StreamOrDevice s = {});
std::vector<array> broadcast_arrays(const std::vector<array>& inputs, StreamOrDevice s = {});
// Python-style slicing per axis: negative start/stop count from the end,
// steps may be negative; out-of-range bounds are clamped as in Python.
array slice(const array& a, Shape start, Shape stop, Shape strides, StreamOrDevice s = {});
array slice(const array& a, Shape start, Shape stop, StreamOrDevice s = {});
// A copy of src with the slice replaced by update (broadcast to the slice).
array slice_update(const array& src, const array& update, Shape start, Shape stop, Shape strides,
                   StreamOrDevice s = {});
array slice_update(const array& src, const array& update, Shape start, Shape stop, StreamOrDevice s = {});
// Gathers along axis; negative indices count from the end; an index out of
// range throws kiln::Error at evaluation.
array take(const array& a, const array& indices, int axis, StreamOrDevice s = {});
array take(const array& a, const array& indices, StreamOrDevice s = {});  // flattened a
array take_along_axis(const array& a, const array& indices, int axis, StreamOrDevice s = {});
// A copy of a with values (broadcast to indices' shape) written at, or
// added to, the positions indices name along axis (indices: a's rank,
// broadcast against a except on axis; negative indices count from the end).
// put_along_axis with repeated indices keeps one of the values written.
array put_along_axis(const array& a, const array& indices, const array& values, int axis, StreamOrDevice s = {});
array scatter_add_axis(const array& a, const array& indices, const array& values, int axis, StreamOrDevice s = {});
array concatenate(const std::vector<array>& arrays, int axis, StreamOrDevice s = {});
array concatenate(const std::vector<array>& arrays, StreamOrDevice s = {});  // flattened
array stack(const std::vector<array>& arrays, int axis, StreamOrDevice s = {});
array stack(const std::vector<array>& arrays, StreamOrDevice s = {});
std::vector<array> split(const array& a, int num_splits, int axis, StreamOrDevice s = {});
std::vector<array> split(const array& a, int num_splits, StreamOrDevice s = {});
std::vector<array> split(const array& a, const Shape& indices, int axis, StreamOrDevice s = {});
array pad(const array& a, const std::vector<std::pair<int, int>>& pad_width, const array& pad_value = array(0),
          StreamOrDevice s = {});
array pad(const array& a, int pad_width, const array& pad_value = array(0), StreamOrDevice s = {});
array repeat(const array& a, int repeats, int axis, StreamOrDevice s = {});
array repeat(const array& a, int repeats, StreamOrDevice s = {});  // flattened
array tile(const array& a, std::vector<int> reps, StreamOrDevice s = {});
array flip(const array& a, const std::vector<int>& axes, StreamOrDevice s = {});
array flip(const array& a, StreamOrDevice s = {});  // every axis

// The identity, with a zero derivative: transformations do not look
// through it.
array stop_gradient(const array& a, StreamOrDevice s = {});

// ---- linear algebra ----
// Batched matmul with numpy semantics: 1-d operands are promoted and the
// added axis removed; batch axes broadcast.
array matmul(const array& a, const array& b, StreamOrDevice s = {});

// ---- operators ----
array operator-(const array& a);
array operator!(const array& a);
array operator+(const array& a, const array& b);
array operator-(const array& a, const array& b);
array operator*(const array& a, const array& b);
array operator/(const array& a, const array& b);
array operator%(const array& a, const array& b);
array operator==(const array& a, const array& b);
array operator!=(const array& a, const array& b);
array operator<(const array& a, const array& b);
array operator<=(const array& a, const array& b);
array operator>(const array& a, const array& b);
array operator>=(const array& a, const array& b);
array operator&&(const array& a, const array& b);
array operator||(const array& a, const array& b);

// A C++ scalar next to an array is weakly typed: it takes the array's dtype
// when its kind (bool < integer < float) is no higher, so
// `bf16_array * 2.0f` stays bfloat16 and `int_array + 1` stays int.
array scalar_like(double value, bool is_float, const array& like);
template <typename T>
array as_weak_scalar(T value, const array& like) {
  return scalar_like(static_cast<double>(value), std::is_floating_point_v<T>, like);
}

#define KILN_SCALAR_OPERATOR(OP)                                             \
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>> \
  array operator OP(const array& a, T b) {                                   \
    return a OP as_weak_scalar(b, a);                                        \
  }                                                                          \
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>> \
  array operator OP(T a, const array& b) {                                   \
    return as_weak_scalar(a, b) OP b;                                        \
  }
KILN_SCALAR_OPERATOR(+)
KILN_SCALAR_OPERATOR(-)
KILN_SCALAR_OPERATOR(*)
KILN_SCALAR_OPERATOR(/)
KILN_SCALAR_OPERATOR(%)
KILN_SCALAR_OPERATOR(==)
KILN_SCALAR_OPERATOR(!=)
KILN_SCALAR_OPERATOR(<)
KILN_SCALAR_OPERATOR(<=)
KILN_SCALAR_OPERATOR(>)
KILN_SCALAR_OPERATOR(>=)
#undef KILN_SCALAR_OPERATOR

}  // namespace kiln
