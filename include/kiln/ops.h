#pragma once
// Array operations. Every op only builds the graph; nothing runs until eval,
// item or data. Each op checks its arguments and throws kiln::Error naming
// the op, the shapes and the dtypes. The trailing StreamOrDevice picks where
// the op runs (default: the default stream of the default device).
#include <initializer_list>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kiln/array.h"

namespace kiln {

// ---- creation ----
array zeros(const Shape& shape, Dtype dtype, StreamOrDevice s = {});
array zeros(const Shape& shape, StreamOrDevice s = {});  // float32
array ones(const Shape& shape, Dtype dtype, StreamOrDevice s = {});
array ones(const Shape& shape, StreamOrDevice s = {});  // float32
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
// vals broadcast to a's shape, cast to dtype (default: a's dtype).
array full_like(const array& a, const array& vals, Dtype dtype, StreamOrDevice s = {});
array full_like(const array& a, const array& vals, StreamOrDevice s = {});
template <typename T>
array full_like(const array& a, T val, Dtype dtype, StreamOrDevice s = {}) {
  return full_like(a, array(val, dtype), dtype, s);
}
template <typename T>
array full_like(const array& a, T val, StreamOrDevice s = {}) {
  return full_like(a, array(val, a.dtype()), s);
}
array zeros_like(const array& a, StreamOrDevice s = {});
array zeros_like(const array& a, Dtype dtype, StreamOrDevice s = {});
array ones_like(const array& a, StreamOrDevice s = {});
array ones_like(const array& a, Dtype dtype, StreamOrDevice s = {});
// Integer dtypes follow numpy and MLX: start and start + step are cast to
// the dtype first, so the values step by the cast difference
// (arange(0., 5., 1.5, int32) is [0, 1, 2, 3]). bool is not allowed.
array arange(double start, double stop, double step, Dtype dtype, StreamOrDevice s = {});
array arange(double start, double stop, double step, StreamOrDevice s = {});  // float32
array arange(double start, double stop, Dtype dtype, StreamOrDevice s = {});
array arange(double start, double stop, StreamOrDevice s = {});  // float32
array arange(double stop, Dtype dtype, StreamOrDevice s = {});
array arange(double stop, StreamOrDevice s = {});  // float32
array arange(int start, int stop, int step, StreamOrDevice s = {});  // int32
array arange(int start, int stop, StreamOrDevice s = {});            // int32
array arange(int stop, StreamOrDevice s = {});                       // int32
// num evenly spaced samples over [start, stop], or [start, stop) without
// the endpoint.
array linspace(double start, double stop, int num, bool endpoint, Dtype dtype = float32, StreamOrDevice s = {});
array linspace(double start, double stop, int num = 50, Dtype dtype = float32, StreamOrDevice s = {});
// n x m identity-like matrix with ones on diagonal k.
array eye(int n, int m, int k, Dtype dtype, StreamOrDevice s = {});
array eye(int n, Dtype dtype, StreamOrDevice s = {});
array eye(int n, int m, StreamOrDevice s = {});         // float32
array eye(int n, int m, int k, StreamOrDevice s = {});  // float32
array eye(int n, StreamOrDevice s = {});                // float32

array astype(const array& a, Dtype dtype, StreamOrDevice s = {});
// A view of a's elements in row-major order with the given shape, strides
// and offset (in elements); a non-contiguous a is copied first (MLX). The
// view must stay inside a's elements: kiln::Error otherwise (MLX does not
// check).
array as_strided(array a, Shape shape, Strides strides, size_t offset, StreamOrDevice s = {});
// a's bytes read as dtype (a bitcast). A larger item size merges elements
// of the last axis (its byte size must divide), a smaller one splits them;
// a scalar may only change to a type of the same size.
array view(const array& a, const Dtype& dtype, StreamOrDevice s = {});
// A new array with its own buffer, same layout semantics (row-major).
array copy(const array& a, StreamOrDevice s = {});
// Row-major contiguous: a view of a when it already is, else a copy.
array contiguous(const array& a, StreamOrDevice s = {});

// ---- unary (floating ops on integer inputs compute in float32) ----
array abs(const array& a, StreamOrDevice s = {});
array negative(const array& a, StreamOrDevice s = {});  // not for bool (use logical_not)
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
array tan(const array& a, StreamOrDevice s = {});
array arcsin(const array& a, StreamOrDevice s = {});
array arccos(const array& a, StreamOrDevice s = {});
array arctan(const array& a, StreamOrDevice s = {});
array sinh(const array& a, StreamOrDevice s = {});
array cosh(const array& a, StreamOrDevice s = {});
array arcsinh(const array& a, StreamOrDevice s = {});
array arccosh(const array& a, StreamOrDevice s = {});
array arctanh(const array& a, StreamOrDevice s = {});
array log2(const array& a, StreamOrDevice s = {});
array log10(const array& a, StreamOrDevice s = {});
array degrees(const array& a, StreamOrDevice s = {});
array radians(const array& a, StreamOrDevice s = {});
// numpy's rint(a * 10^decimals) / 10^decimals, in a's dtype (integers and
// 16-bit floats compute in float32 and are cast back).
array round(const array& a, int decimals, StreamOrDevice s = {});
// ~a on integers; logical_not on bool; an error for floats.
array bitwise_invert(const array& a, StreamOrDevice s = {});

// ---- complex64 (MLX) ----
// complex64 has abs (float32 result), negative, square, sqrt, rsqrt, exp,
// log, log1p, log2, log10, sin, cos, tan, arcsin, arccos, arctan, sinh,
// cosh, tanh, arcsinh, arccosh, arctanh (principal branches, numpy's cuts),
// sign (z / |z|; its gradient is zero, as MLX's), add, subtract, multiply,
// divide, power (numpy's: z^0 = 1, 0^w = 0 for real w > 0, else NaN), the
// comparisons and maximum / minimum (ordered by the real part, then the
// imaginary part, as numpy and MLX), equal, not_equal, where, sum, prod,
// mean, var, matmul and the layout ops. floor / ceil / round, expm1,
// sigmoid, erf and arctan2 throw a kiln::Error for complex64, as MLX's do.
// Differences from MLX: remainder, floor_divide and the ordering reductions
// and sorts (max, min, argmax, argmin, sort, partition, the scans) refuse
// complex64 too.
// The complex conjugate; a real array is returned as it is.
array conjugate(const array& a, StreamOrDevice s = {});
array conj(const array& a, StreamOrDevice s = {});
// The real and imaginary parts as float32 (views of the complex buffer); for
// a real array, real(a) is a and imag(a) is zeros_like(a).
array real(const array& a, StreamOrDevice s = {});
array imag(const array& a, StreamOrDevice s = {});

// ---- floating-point predicates and cleanup (integers: no NaN or inf) ----
array isnan(const array& a, StreamOrDevice s = {});
array isinf(const array& a, StreamOrDevice s = {});
array isfinite(const array& a, StreamOrDevice s = {});
array isposinf(const array& a, StreamOrDevice s = {});
array isneginf(const array& a, StreamOrDevice s = {});
// NaN -> nan, +inf -> posinf, -inf -> neginf (default: the dtype's largest
// finite values). Unlike MLX, float64 is supported.
array nan_to_num(const array& a, float nan = 0.0f, const std::optional<float> posinf = std::nullopt,
                 const std::optional<float> neginf = std::nullopt, StreamOrDevice s = {});
// |a - b| <= atol + rtol * |b| elementwise; infinities are close only to
// the same infinity. The tolerances apply in float64.
array isclose(const array& a, const array& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false,
              StreamOrDevice s = {});
array allclose(const array& a, const array& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false,
               StreamOrDevice s = {});
// A bool scalar: same shape and equal elements (false for different shapes).
array array_equal(const array& a, const array& b, bool equal_nan, StreamOrDevice s = {});
array array_equal(const array& a, const array& b, StreamOrDevice s = {});

// ---- binary (broadcasting, numpy promotion) ----
array add(const array& a, const array& b, StreamOrDevice s = {});
array subtract(const array& a, const array& b, StreamOrDevice s = {});
array multiply(const array& a, const array& b, StreamOrDevice s = {});
// True division: integer inputs give float32.
array divide(const array& a, const array& b, StreamOrDevice s = {});
// On bool, a ** b as on 0/1 (MLX): true unless a is false and b is true. An integer to a
// negative integer power throws (MLX: unchecked).
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
// numpy's floor division: integers round toward -inf and x // 0 is 0
// (MLX truncates integer quotients); floats as numpy's divmod.
array floor_divide(const array& a, const array& b, StreamOrDevice s = {});
// {floor_divide(a, b), remainder(a, b)}.
std::vector<array> divmod(const array& a, const array& b, StreamOrDevice s = {});
// Integer inputs compute in float32.
array arctan2(const array& a, const array& b, StreamOrDevice s = {});
// log(exp(a) + exp(b)) without overflow; integers compute in float32.
array logaddexp(const array& a, const array& b, StreamOrDevice s = {});
// Bitwise ops on integer or bool inputs (floats are an error). Shifts by a
// count outside [0, bits) give 0 (or -1 for a negative value shifted
// right), as numpy; bool operands shift as uint8.
array bitwise_and(const array& a, const array& b, StreamOrDevice s = {});
array bitwise_or(const array& a, const array& b, StreamOrDevice s = {});
array bitwise_xor(const array& a, const array& b, StreamOrDevice s = {});
array left_shift(const array& a, const array& b, StreamOrDevice s = {});
array right_shift(const array& a, const array& b, StreamOrDevice s = {});
array where(const array& condition, const array& x, const array& y, StreamOrDevice s = {});
array clip(const array& a, const std::optional<array>& a_min, const std::optional<array>& a_max,
           StreamOrDevice s = {});

// ---- reductions (axes may be negative; empty axes list = no reduction) ----
// sum and prod widen small integers as MLX does: bool and signed integers of
// up to 32 bits give int32, unsigned ones uint32, 64-bit ones stay.
array sum(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array sum(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array sum(const array& a, bool keepdims, StreamOrDevice s = {});
array sum(const array& a, StreamOrDevice s = {});
array mean(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array mean(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array mean(const array& a, bool keepdims, StreamOrDevice s = {});
array mean(const array& a, StreamOrDevice s = {});
array max(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array max(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array max(const array& a, bool keepdims, StreamOrDevice s = {});
array max(const array& a, StreamOrDevice s = {});
array min(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array min(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array min(const array& a, bool keepdims, StreamOrDevice s = {});
array min(const array& a, StreamOrDevice s = {});
array prod(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array prod(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array prod(const array& a, bool keepdims, StreamOrDevice s = {});
array prod(const array& a, StreamOrDevice s = {});
array all(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array all(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array all(const array& a, bool keepdims, StreamOrDevice s = {});
array all(const array& a, StreamOrDevice s = {});
array any(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array any(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array any(const array& a, bool keepdims, StreamOrDevice s = {});
array any(const array& a, StreamOrDevice s = {});
array logsumexp(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array logsumexp(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array logsumexp(const array& a, bool keepdims, StreamOrDevice s = {});
array logsumexp(const array& a, StreamOrDevice s = {});
array var(const array& a, const std::vector<int>& axes, bool keepdims = false, int ddof = 0,
          StreamOrDevice s = {});
array var(const array& a, int axis, bool keepdims = false, int ddof = 0, StreamOrDevice s = {});
array var(const array& a, bool keepdims, int ddof = 0, StreamOrDevice s = {});
array var(const array& a, StreamOrDevice s = {});
// The standard deviation, sqrt(var(...)) with var's axes, keepdims and ddof
// (MLX's `std`). Call it qualified, kiln::std(x): unqualified, `std` names
// the C++ standard library's namespace.
array std(const array& a, const std::vector<int>& axes, bool keepdims = false, int ddof = 0, StreamOrDevice s = {});
array std(const array& a, int axis, bool keepdims = false, int ddof = 0, StreamOrDevice s = {});
array std(const array& a, bool keepdims, int ddof = 0, StreamOrDevice s = {});
array std(const array& a, StreamOrDevice s = {});
// Index (uint32) of the first extreme value along axis; without an axis,
// over the flattened array.
array argmax(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array argmax(const array& a, bool keepdims, StreamOrDevice s = {});
array argmax(const array& a, StreamOrDevice s = {});
array argmin(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array argmin(const array& a, bool keepdims, StreamOrDevice s = {});
array argmin(const array& a, StreamOrDevice s = {});

array softmax(const array& a, const std::vector<int>& axes, StreamOrDevice s = {});
array softmax(const array& a, int axis, StreamOrDevice s = {});
array softmax(const array& a, StreamOrDevice s = {});  // over all axes
// MLX's `precise` overloads: Kiln's softmax always accumulates 16-bit
// inputs in float32, so precise changes nothing (MLX's default does not).
array softmax(const array& a, const std::vector<int>& axes, bool precise, StreamOrDevice s = {});
array softmax(const array& a, int axis, bool precise, StreamOrDevice s = {});
array softmax(const array& a, bool precise, StreamOrDevice s = {});  // over all axes

// ---- sorting, selection and scans (MLX's signatures and semantics) ----
// The order is numpy's: NaN after every number (NaNs keep their input
// order), -0.0 equal to +0.0; the sorts are stable (ties keep their input
// order, so argsort is deterministic). Without an axis: the flattened array.
// Indices are uint32, as in MLX.
array sort(const array& a, StreamOrDevice s = {});
array sort(const array& a, int axis, StreamOrDevice s = {});
array argsort(const array& a, StreamOrDevice s = {});
array argsort(const array& a, int axis, StreamOrDevice s = {});
// Position kth (negative: from the end) holds the value a sort puts there,
// with no larger value before it and no smaller one after; the order on
// each side is unspecified (it differs between CPU and GPU).
array partition(const array& a, int kth, StreamOrDevice s = {});
array partition(const array& a, int kth, int axis, StreamOrDevice s = {});
array argpartition(const array& a, int kth, StreamOrDevice s = {});
array argpartition(const array& a, int kth, int axis, StreamOrDevice s = {});
// The k largest values along axis (0 <= k <= size), as MLX: the last k of
// partition(a, -k), so they are NOT sorted (and k == size returns a as is).
array topk(const array& a, int k, StreamOrDevice s = {});
array topk(const array& a, int k, int axis, StreamOrDevice s = {});
// For each value, the index where it would be inserted into the 1-d
// sorted_sequence to keep it sorted: before equal values (side "left") or
// after them ("right"); uint32 with values' shape; both inputs are
// promoted to one dtype. NaN sorts last, as in numpy.
array searchsorted(const array& sorted_sequence, const array& values, const std::string& side = "left",
                   StreamOrDevice s = {});
// Cumulative ops along axis (without an axis: the flattened array).
// Exclusive scans start from the identity; reverse scans run from the end.
// cumsum of bool gives int32 (other dtypes are kept, as MLX: integer sums
// wrap); dtype casts the input first. Float sums are compensated (Kahan),
// so a long float32 cumsum stays within a few ulps of the float64 one.
// cummax/cummin propagate NaN (numpy's maximum.accumulate; MLX leaves it
// unspecified).
array cumsum(const array& a, bool reverse = false, bool inclusive = true, std::optional<Dtype> dtype = std::nullopt,
             StreamOrDevice s = {});
inline array cumsum(const array& a, bool reverse, bool inclusive, StreamOrDevice s) {
  return cumsum(a, reverse, inclusive, std::nullopt, s);
}
array cumsum(const array& a, int axis, bool reverse = false, bool inclusive = true,
             std::optional<Dtype> dtype = std::nullopt, StreamOrDevice s = {});
inline array cumsum(const array& a, int axis, bool reverse, bool inclusive, StreamOrDevice s) {
  return cumsum(a, axis, reverse, inclusive, std::nullopt, s);
}
array cumprod(const array& a, bool reverse = false, bool inclusive = true, std::optional<Dtype> dtype = std::nullopt,
              StreamOrDevice s = {});
inline array cumprod(const array& a, bool reverse, bool inclusive, StreamOrDevice s) {
  return cumprod(a, reverse, inclusive, std::nullopt, s);
}
array cumprod(const array& a, int axis, bool reverse = false, bool inclusive = true,
              std::optional<Dtype> dtype = std::nullopt, StreamOrDevice s = {});
inline array cumprod(const array& a, int axis, bool reverse, bool inclusive, StreamOrDevice s) {
  return cumprod(a, axis, reverse, inclusive, std::nullopt, s);
}
array cummax(const array& a, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});
array cummax(const array& a, int axis, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});
array cummin(const array& a, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});
array cummin(const array& a, int axis, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});
// log(cumsum(exp(a))) without overflow; floating dtypes only.
array logcumsumexp(const array& a, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});
array logcumsumexp(const array& a, int axis, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});

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
// Axes past either end are clamped to it (MLX).
array flatten(const array& a, int start_axis, int end_axis = -1, StreamOrDevice s = {});
array flatten(const array& a, StreamOrDevice s = {});
array broadcast_to(const array& a, const Shape& shape, StreamOrDevice s = {});
std::vector<array> broadcast_arrays(const std::vector<array>& inputs, StreamOrDevice s = {});
// Python-style slicing per axis: negative start/stop count from the end,
// steps may be negative; out-of-range bounds are clamped as in Python.
array slice(const array& a, Shape start, Shape stop, Shape strides, StreamOrDevice s = {});
array slice(const array& a, Shape start, Shape stop, StreamOrDevice s = {});
// Brace lists pick the static forms (as MLX), not the dynamic ones below.
inline array slice(const array& a, std::initializer_list<int> start, Shape stop, Shape strides, StreamOrDevice s = {}) {
  return slice(a, Shape(start), std::move(stop), std::move(strides), s);
}
// A copy of src with the slice replaced by update (broadcast to the slice).
array slice_update(const array& src, const array& update, Shape start, Shape stop, Shape strides,
                   StreamOrDevice s = {});
array slice_update(const array& src, const array& update, Shape start, Shape stop, StreamOrDevice s = {});
inline array slice_update(const array& src, const array& update, std::initializer_list<int> start, Shape stop,
                          StreamOrDevice s = {}) {
  return slice_update(src, update, Shape(start), std::move(stop), s);
}
// Dynamic slices: start (an integer array of one value per entry of axes,
// read on the device at evaluation, no host sync) gives the slice's start on
// those axes, 0 on the others. slice takes slice_size (one per dimension);
// slice_update writes update (broadcast to the slice, its shape the slice's
// size). Deliberate difference: MLX leaves starts out of range undefined;
// Kiln wraps a negative start once (start + dim) and then clamps it to
// [0, dim - size] so the slice stays inside the array.
array slice(const array& a, const array& start, std::vector<int> axes, Shape slice_size, StreamOrDevice s = {});
array slice_update(const array& src, const array& update, const array& start, std::vector<int> axes,
                   StreamOrDevice s = {});
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
// MLX's gather: the index arrays (one per axis in axes, integer, broadcast
// together to a shape I) pick the start of a slice of size slice_sizes (one
// per dimension of a) on those axes, 0 on the others; the result has shape
// I + slice_sizes. Negative indices count from the end. Unlike MLX (which
// does not check), an index whose slice leaves the array throws
// kiln::Error at evaluation (on the GPU: at the next synchronization).
array gather(const array& a, const std::vector<array>& indices, const std::vector<int>& axes, const Shape& slice_sizes,
             StreamOrDevice s = {});
array gather(const array& a, const array& indices, int axis, const Shape& slice_sizes, StreamOrDevice s = {});
// MLX's scatters: a copy of a with updates (shape I + a slice shape of a's
// rank, each dimension at most a's) written (scatter), added, multiplied,
// maxed or minned at the slices the indices start (as gather). Repeated
// indices accumulate for add/prod/max/min; scatter keeps one of the values
// written (the last on the CPU, any on the GPU). Bounds are checked as in gather.
array scatter(const array& a, const std::vector<array>& indices, const array& updates, const std::vector<int>& axes,
              StreamOrDevice s = {});
array scatter(const array& a, const array& indices, const array& updates, int axis, StreamOrDevice s = {});
array scatter_add(const array& a, const std::vector<array>& indices, const array& updates,
                  const std::vector<int>& axes, StreamOrDevice s = {});
array scatter_add(const array& a, const array& indices, const array& updates, int axis, StreamOrDevice s = {});
array scatter_prod(const array& a, const std::vector<array>& indices, const array& updates,
                   const std::vector<int>& axes, StreamOrDevice s = {});
array scatter_prod(const array& a, const array& indices, const array& updates, int axis, StreamOrDevice s = {});
array scatter_max(const array& a, const std::vector<array>& indices, const array& updates,
                  const std::vector<int>& axes, StreamOrDevice s = {});
array scatter_max(const array& a, const array& indices, const array& updates, int axis, StreamOrDevice s = {});
array scatter_min(const array& a, const std::vector<array>& indices, const array& updates,
                  const std::vector<int>& axes, StreamOrDevice s = {});
array scatter_min(const array& a, const array& indices, const array& updates, int axis, StreamOrDevice s = {});
array concatenate(const std::vector<array>& arrays, int axis, StreamOrDevice s = {});
array concatenate(const std::vector<array>& arrays, StreamOrDevice s = {});  // flattened
array stack(const std::vector<array>& arrays, int axis, StreamOrDevice s = {});
array stack(const std::vector<array>& arrays, StreamOrDevice s = {});
std::vector<array> split(const array& a, int num_splits, int axis, StreamOrDevice s = {});
std::vector<array> split(const array& a, int num_splits, StreamOrDevice s = {});
// Pieces a[0:i0], a[i0:i1], ..., a[ik:] along axis with Python slice rules
// (indices need not increase: a decreasing pair gives an empty piece).
std::vector<array> split(const array& a, const Shape& indices, int axis, StreamOrDevice s = {});
std::vector<array> split(const array& a, const Shape& indices, StreamOrDevice s = {});
array pad(const array& a, const std::vector<std::pair<int, int>>& pad_width, const array& pad_value = array(0),
          StreamOrDevice s = {});
array pad(const array& a, int pad_width, const array& pad_value = array(0), StreamOrDevice s = {});
array repeat(const array& a, int repeats, int axis, StreamOrDevice s = {});
array repeat(const array& a, int repeats, StreamOrDevice s = {});  // flattened
array tile(const array& a, std::vector<int> reps, StreamOrDevice s = {});
array flip(const array& a, const std::vector<int>& axes, StreamOrDevice s = {});
array flip(const array& a, int axis, StreamOrDevice s = {});
array flip(const array& a, StreamOrDevice s = {});  // every axis

// ---- more shape ops ----
array atleast_1d(const array& a, StreamOrDevice s = {});
std::vector<array> atleast_1d(const std::vector<array>& a, StreamOrDevice s = {});
array atleast_2d(const array& a, StreamOrDevice s = {});
std::vector<array> atleast_2d(const std::vector<array>& a, StreamOrDevice s = {});
array atleast_3d(const array& a, StreamOrDevice s = {});
std::vector<array> atleast_3d(const std::vector<array>& a, StreamOrDevice s = {});
array moveaxis(const array& a, int source, int destination, StreamOrDevice s = {});
// The slices of a along axis, each without that axis (none for an empty axis).
std::vector<array> unstack(const array& a, int axis, StreamOrDevice s = {});
std::vector<array> unstack(const array& a, StreamOrDevice s = {});  // axis 0
// Splits axis into shape (one entry may be -1).
array unflatten(const array& a, int axis, Shape shape, StreamOrDevice s = {});
// Elements shifted cyclically along axes; without axes over the flattened
// array (a Shape of shifts then rolls by their sum).
array roll(const array& a, int shift, StreamOrDevice s = {});
array roll(const array& a, const Shape& shift, StreamOrDevice s = {});
array roll(const array& a, int shift, int axis, StreamOrDevice s = {});
array roll(const array& a, int shift, const std::vector<int>& axes, StreamOrDevice s = {});
array roll(const array& a, const Shape& shift, int axis, StreamOrDevice s = {});
array roll(const array& a, const Shape& shift, const std::vector<int>& axes, StreamOrDevice s = {});
// Coordinate arrays from 1-d (or any, flattened) arrays; indexing "xy"
// (Cartesian, the default) or "ij" (matrix).
std::vector<array> meshgrid(const std::vector<array>& arrays, bool sparse = false,
                            const std::string& indexing = "xy", StreamOrDevice s = {});

// ---- matrix building ----
// n x m with ones on and below diagonal k.
array tri(int n, int m, int k, Dtype type, StreamOrDevice s = {});
array tri(int n, Dtype type, StreamOrDevice s = {});
// The lower / upper triangle (from diagonal k) of the last two axes.
array tril(array x, int k = 0, StreamOrDevice s = {});
array triu(array x, int k = 0, StreamOrDevice s = {});
array identity(int n, Dtype dtype, StreamOrDevice s = {});
array identity(int n, StreamOrDevice s = {});
// The diagonal `offset` of the (axis1, axis2) planes, as the last axis.
array diagonal(const array& a, int offset = 0, int axis1 = 0, int axis2 = 1, StreamOrDevice s = {});
// 1-d: a square matrix with a on diagonal k; 2-d: diagonal k.
array diag(const array& a, int k = 0, StreamOrDevice s = {});
// Sum of a diagonal (in dtype; default a's dtype, widened as sum does).
array trace(const array& a, int offset, int axis1, int axis2, Dtype dtype, StreamOrDevice s = {});
array trace(const array& a, int offset, int axis1, int axis2, StreamOrDevice s = {});
array trace(const array& a, StreamOrDevice s = {});

// The identity, with a zero derivative: transformations do not look
// through it.
array stop_gradient(const array& a, StreamOrDevice s = {});

// ---- linear algebra ----
// Batched matmul with numpy semantics: 1-d operands are promoted and the
// added axis removed; batch axes broadcast. An fp8 operand (float8_e4m3fn,
// float8_e5m2) is a kiln::Error that names scaled_matmul (fp8 needs scales;
// astype first for a plain product).
array matmul(const array& a, const array& b, StreamOrDevice s = {});
// Contracts the last `axis` axes of a with the first `axis` axes of b.
array tensordot(const array& a, const array& b, const int axis = 2, StreamOrDevice s = {});
array tensordot(const array& a, const array& b, const std::vector<int>& axes_a, const std::vector<int>& axes_b,
                StreamOrDevice s = {});
// a and b flattened: [a.size, b.size].
array outer(const array& a, const array& b, StreamOrDevice s = {});
// Contracts the last axes (a 0-d operand multiplies).
array inner(const array& a, const array& b, StreamOrDevice s = {});
array kron(const array& a, const array& b, StreamOrDevice s = {});
// alpha * (a @ b) + beta * c, floating types only; c broadcasts to a @ b.
array addmm(array c, array a, array b, const float& alpha = 1.f, const float& beta = 1.f, StreamOrDevice s = {});

// ---- quantization (MLX's group-wise affine and microscaling modes; llama.cpp block modes) ----
// w [..., K] -> {packed uint32 [..., K * bits / 32], scales, biases
// [..., K / group_size]} (scales and biases in w's dtype). Each group of
// group_size values along the last axis maps to q = round((w - bias) /
// scale) in [0, 2^bits), packed LSB-first as one little-endian bit stream
// per row (the words of MLX: bits 3, 5, 6 straddle word boundaries the way
// MLX's byte packing does). Defaults: group_size 64, bits 4. A block mode
// ("q4_0", ...: core/quantize_blocks.h) returns {w} alone.
// The microscaling modes (MLX's table; only these parameters are allowed):
//   mode    group  bits  values           scale (uint8, one per group)
//   mxfp4   32     4     fp4 e2m1         e8m0: 2^(s - 127)
//   mxfp8   32     8     fp8 e4m3         e8m0
//   nvfp4   16     4     fp4 e2m1         fp8 e4m3 (times global_scale / 2688)
// return {packed uint32, scales uint8} (no biases), with MLX's rounding bit
// for bit (mlx 0.32.4): the e8m0 exponent is ceil(log2(max|w| / vmax))
// (vmax 6 or 448; an all-zero group gets 2^0), fp4 takes the nearest of
// its 16 values (ties to the smaller magnitude, -0 as +0), fp8 rounds to
// nearest even and saturates at ±448.
// global_scale (nvfp4 only): a float32 scalar, the amax of w over the
// tensor that MLX's recipe passes; scales then hold s * 2688 / global_scale.
// Differences from MLX: float64 works everywhere (MLX's kernels reject it):
// quantize computes its groups in float as for the other types (the
// microscaling modes in double), dequantize and the products compute in
// double; the microscaling modes' group size and bits are checked by every
// op (MLX checks them in quantize and dequantize only).
std::vector<array> quantize(const array& w, std::optional<int> group_size = std::nullopt,
                            std::optional<int> bits = std::nullopt, const std::string& mode = "affine",
                            const std::optional<array>& global_scale = std::nullopt, StreamOrDevice s = {});
// q * scale + bias per group, computed in the scales' dtype (rounded after
// the product and after the sum, as MLX does); `dtype` casts the result.
// Microscaling modes: value * 2^(s - 127) (nvfp4: value * e4m3(s), times
// global_scale / 2688 in float32 when given) rounded once to `dtype`
// (default bfloat16, as MLX). Difference from MLX: with a global_scale MLX
// returns float32 whatever `dtype` says; Kiln returns `dtype`.
array dequantize(const array& w, const array& scales, const std::optional<array>& biases = std::nullopt,
                 std::optional<int> group_size = std::nullopt, std::optional<int> bits = std::nullopt,
                 const std::string& mode = "affine", const std::optional<array>& global_scale = std::nullopt,
                 std::optional<Dtype> dtype = std::nullopt, StreamOrDevice s = {});
// x [..., K] times the dequantized w: transposed ([N, K] packed along K,
// the layout of a Linear layer) or not ([K, N] packed along N). A w with
// batch axes broadcasts against x's batch axes (x needs at least 3 axes
// then; MLX leaves that case undefined). The microscaling modes take no
// biases and compute in x's dtype (accumulating in float32).
// llama.cpp's block formats (mode "q4_0", "q8_0", "q4_k", "q6_k", ...) on
// the CPU round x to 8 bits first, as llama.cpp's CPU backend does: a
// deliberate difference from a float product, for integer dot products that
// run at memory bandwidth (1.5-2.6 times the float kernels' speed). Each 32
// values of a row of float32, float16 or bfloat16 x become d * q with
// q = round_half_even(x * 127 / amax) and d = amax / 127 (amax = max |x| of
// the 32; computed in float32), so each output moves by at most
// sum_i (d_i / 2) |w_i| (about 0.4% of amax per term) beyond float32
// rounding; a block holding NaN or inf makes its row NaN. Every row count
// rounds the same way. float64 x is not rounded, nor is x under vmap over
// the weights; KILN_BLOCK_X=float (read once) keeps the float kernels on
// both backends. On the GPU x is rounded the same way (the same codes) for
// one row of x (decode) with Q4_K weights, and with Q4_0 / Q8_0 weights
// when x is float32; other GPU cases multiply x as it is (their kernels
// were as fast or faster that way).
array quantized_matmul(const array& x, const array& w, const array& scales,
                       const std::optional<array>& biases = std::nullopt, bool transpose = true,
                       std::optional<int> group_size = std::nullopt, std::optional<int> bits = std::nullopt,
                       const std::string& mode = "affine", StreamOrDevice s = {});
// The mixture-of-experts form: out[i] = x[lhs_indices[i]] @ w[rhs_indices[i]]
// over the flattened batch axes of x [..., M, K] and w [..., N, K'], with
// the indices broadcast together (default: each batch entry in order);
// output lhs.shape + [M, N]. sorted_indices is a hint and changes nothing.
array gather_qmm(const array& x, const array& w, const array& scales, const std::optional<array>& biases = std::nullopt,
                 std::optional<array> lhs_indices = std::nullopt, std::optional<array> rhs_indices = std::nullopt,
                 bool transpose = true, std::optional<int> group_size = std::nullopt,
                 std::optional<int> bits = std::nullopt, const std::string& mode = "affine",
                 bool sorted_indices = false, StreamOrDevice s = {});

// MLX's qqmm: x @ w^T with x, and w where it is given unquantized, rounded
// on the fly to a microscaling mode (mlx 0.32.4). out = x^ @ w^^T in x's
// dtype, accumulated in float32, where x^ is x rounded group by group
// along its last axis the way MLX's qqmm rounds it, which is not quite
// quantize then dequantize: the scale is computed in float32 whatever the
// dtype, and fp4 ties go to the even code; and w^ is dequantize(w, w_scales)
// for a quantized w (uint32 words with its uint8 scales; group_size, bits
// and mode those it was quantized with) or w rounded as x is. x [..., K]
// (1-d: one row; K a multiple of the group size), w [N, K] (2-d), of
// float16, bfloat16 or float32, and float64 (refused by MLX; rounded in
// float32 too, multiplied in float64). Modes
// "nvfp4" (the default) and "mxfp8", which MLX documents, and "mxfp4",
// which its CPU backend runs too; "affine" and the block formats are
// refused. nvfp4's global scales (float32 scalars, both or neither): x is
// rounded with global_scale_x and a float w with global_scale_w as quantize
// rounds with them, and the float32 product is multiplied by
// (global_scale_x / 2688) (global_scale_w / 2688) before its one rounding
// to x's dtype, which is x^ @ w^^T with both dequantized with their global
// scales, as MLX's CUDA backend and its tests define it. Deliberate
// differences from MLX's CPU backend, which runs only one row of x with a
// quantized w: every shape runs on both backends; the global scales are
// applied (MLX's CPU ignores them, a bug its tests note); a group holding
// inf or NaN rounds to NaN (MLX's CPU makes a NaN 6 * scale).
// vjp: MLX's rule, which quantizes the backward products too: dx =
// qqmm(cot, w^T) and dw = qqmm(cot^T, x^T), with the cotangent's max |cot|
// as its global scale where global scales are given. Those products round
// along N and along the rows of x; where these are not multiples of the
// group size, the last group is padded with zeros (MLX leaves that case
// undefined). A quantized w's words and scales get zero cotangents (dx
// uses w dequantized). jvp (MLX has none): the same products of the
// tangents. vmap: through the definition.
array qqmm(const array& x, const array& w, const std::optional<array>& w_scales = std::nullopt,
           std::optional<int> group_size = std::nullopt, std::optional<int> bits = std::nullopt,
           const std::string& mode = "nvfp4", const std::optional<array>& global_scale_x = std::nullopt,
           const std::optional<array>& global_scale_w = std::nullopt, StreamOrDevice s = {});
// qqmm with gather_mm's gathering: x [..., M, K], w [..., N, K] (quantized:
// uint32 words with scales_w), out[i] = qqmm(x_flat[lhs[i]], w_flat[rhs[i]])
// over the flattened batch axes, the indices broadcast together (default:
// each batch entry in order); output lhs.shape + [M, N]. MLX's CPU backend
// has no kernel for it; its GPU tests define it as gather_mm of the
// rounded operands, which this computes on both backends. No derivative
// (MLX defines none). sorted_indices is a hint and changes nothing.
array gather_qqmm(const array& x, const array& w, const std::optional<array>& scales_w = std::nullopt,
                  const std::optional<array>& lhs_indices = std::nullopt,
                  const std::optional<array>& rhs_indices = std::nullopt, std::optional<int> group_size = std::nullopt,
                  std::optional<int> bits = std::nullopt, const std::string& mode = "nvfp4",
                  const std::optional<array>& global_scale_x = std::nullopt,
                  const std::optional<array>& global_scale_w = std::nullopt, bool sorted_indices = false,
                  StreamOrDevice s = {});

// FP8 matrix product (a Kiln extension: MLX has no fp8 dtype; the
// semantics of torch._scaled_mm and DeepSeek-V3's block-scaled GEMM).
// a [M, K] and b [K, N] of dtype float8_e4m3fn or float8_e5m2 (either, in
// any pairing except both float8_e5m2, which cuBLASLt refuses and Kiln
// therefore refuses everywhere), any strides (a transposed view of a
// row-major [N, K] weight, `transpose(w)`, is the layout the GPU reads
// without a copy). The scales, float32, choose the mode by their shapes:
//   - per tensor: scale_a and scale_b scalars (shape () or (1));
//   - blocks: scale_a [M, ceil(K/128)] (one scale per row and 128-wide K
//     block: 1x128 activation blocks), scale_b [ceil(K/128), ceil(N/128)]
//     (one per 128x128 weight block); the last blocks may be partial.
// out[m, n] = sum_k (a[m, k] * sa(m, k)) * (b[k, n] * sb(k, n)), with the
// products and the sum in float32 (the order of the sum is the backend's),
// rounded once to out_dtype: bfloat16 or float32, others refused. Only
// 2-d operands (no batch axes: refused); no gradients (vjp, jvp and vmap
// throw a kiln::Error). Plain matmul refuses fp8 operands and names this
// op. GPU: cuBLASLt's FP8 path on Hopper for M, N, K multiples of 16 (block
// scales: CUDA 12.9+, K a multiple of 512, N of 128; there the tensor cores
// add each 128-wide K block in reduced precision, about 2e-4 of sum |a*b|,
// as torch._scaled_mm's block mode does; KILN_CUDA_FP8_BLOCK_LT=0 sends
// block scales to the exact path instead); other shapes take the
// dequantizing path (float32 copies with the scales folded in, the float32
// GEMM), as the CPU does.
array scaled_matmul(const array& a, const array& b, const array& scale_a, const array& scale_b,
                    Dtype out_dtype = bfloat16, StreamOrDevice s = {});

// MLX's fp8 helpers: x (floating) -> its fp8 e4m3 codes as uint8 (round
// to nearest even, saturating at ±448; inf and NaN saturate too, as MLX's
// do), and codes (uint8) -> values in `dtype` (0x7f and 0xff are NaN).
// MLX's bit-level bridge, kept as MLX has it; Kiln's fp8 dtypes
// (float8_e4m3fn, include/kiln/dtype.h) differ in one point: there NaN
// stays NaN. `view(astype(x, float8_e4m3fn), uint8)` gives the codes of the
// dtype.
array to_fp8(const array& x, StreamOrDevice s = {});
array from_fp8(const array& x, Dtype dtype = bfloat16, StreamOrDevice s = {});

// ---- convolution (MLX's layout: input [N, spatial.., C_in] channels last,
// weight [C_out, kernel.., C_in / groups]; output [N, spatial.., C_out]) ----
// Floating dtypes; the two operands are promoted to one dtype. Padding is
// symmetric here and per side (lo, hi) in conv_general; negative padding
// crops. conv_general's input_dilation inserts input_dilation - 1 zeros
// between input elements, flip turns the cross-correlation into a true
// convolution. Deliberate differences from MLX: groups work for 3-d
// convolutions too (MLX allows groups != 1 only in 1-d and 2-d), and
// negative padding crops the input after its dilation (MLX crops before;
// the two agree when input_dilation is 1).
array conv1d(const array& input, const array& weight, int stride = 1, int padding = 0, int dilation = 1,
             int groups = 1, StreamOrDevice s = {});
array conv2d(const array& input, const array& weight, const std::pair<int, int>& stride = {1, 1},
             const std::pair<int, int>& padding = {0, 0}, const std::pair<int, int>& dilation = {1, 1},
             int groups = 1, StreamOrDevice s = {});
array conv3d(const array& input, const array& weight, const std::tuple<int, int, int>& stride = {1, 1, 1},
             const std::tuple<int, int, int>& padding = {0, 0, 0},
             const std::tuple<int, int, int>& dilation = {1, 1, 1}, int groups = 1, StreamOrDevice s = {});
// The gradient of the convolution of the same parameters with respect to
// its input (a "deconvolution"): spatial output (S - 1) * stride - 2 *
// padding + dilation * (K - 1) + 1 + output_padding.
array conv_transpose1d(const array& input, const array& weight, int stride = 1, int padding = 0, int dilation = 1,
                       int output_padding = 0, int groups = 1, StreamOrDevice s = {});
array conv_transpose2d(const array& input, const array& weight, const std::pair<int, int>& stride = {1, 1},
                       const std::pair<int, int>& padding = {0, 0}, const std::pair<int, int>& dilation = {1, 1},
                       const std::pair<int, int>& output_padding = {0, 0}, int groups = 1, StreamOrDevice s = {});
array conv_transpose3d(const array& input, const array& weight,
                       const std::tuple<int, int, int>& stride = {1, 1, 1},
                       const std::tuple<int, int, int>& padding = {0, 0, 0},
                       const std::tuple<int, int, int>& dilation = {1, 1, 1},
                       const std::tuple<int, int, int>& output_padding = {0, 0, 0}, int groups = 1,
                       StreamOrDevice s = {});
// Any of 1-3 spatial axes; each parameter vector has one entry per spatial
// axis, or one entry (or none: the default) used for every axis.
array conv_general(array input, array weight, std::vector<int> stride = {}, std::vector<int> padding_lo = {},
                   std::vector<int> padding_hi = {}, std::vector<int> kernel_dilation = {},
                   std::vector<int> input_dilation = {}, int groups = 1, bool flip = false, StreamOrDevice s = {});
inline array conv_general(const array& input, const array& weight, std::vector<int> stride = {},
                          std::vector<int> padding = {}, std::vector<int> kernel_dilation = {},
                          std::vector<int> input_dilation = {}, int groups = 1, bool flip = false,
                          StreamOrDevice s = {}) {
  return conv_general(input, weight, std::move(stride), padding, padding, std::move(kernel_dilation),
                      std::move(input_dilation), groups, flip, s);
}

// ---- more of MLX's ops (compositions of the ops above) ----
// Window functions (float32; [1] for M == 1, empty for M < 1).
array hanning(int M, StreamOrDevice s = {});
array hamming(int M, StreamOrDevice s = {});
array bartlett(int M, StreamOrDevice s = {});
array blackman(int M, StreamOrDevice s = {});
// The n-th discrete difference along axis (numpy's diff; booleans differ by
// not_equal, as MLX's subtract on bool gives).
array diff(const array& a, int n = 1, int axis = -1, StreamOrDevice s = {});
// Median over axes (all axes without them); NaN propagates; integers give
// float32. An even count averages the two middle values.
array median(const array& a, bool keepdims, StreamOrDevice s = {});
array median(const array& a, StreamOrDevice s = {});
array median(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array median(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
// Number of non-zero elements (int32).
array count_nonzero(const array& a, bool keepdims = false, StreamOrDevice s = {});
array count_nonzero(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array count_nonzero(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
// sum(conjugate(a) * b) along axis (MLX's vecdot).
array vecdot(const array& a, const array& b, int axis = -1, StreamOrDevice s = {});
array trunc(const array& a, StreamOrDevice s = {});       // towards zero; integers unchanged
array reciprocal(const array& a, StreamOrDevice s = {});  // 1 / a (integers: float32)
array positive(const array& a, StreamOrDevice s = {});    // a itself
array logical_xor(const array& a, const array& b, StreamOrDevice s = {});
// The product of a's sizes along axes (or its inverse) as a scalar of dtype.
array number_of_elements(const array& a, std::vector<int> axes, bool inverted, Dtype dtype = int32,
                         StreamOrDevice s = {});
// The inputs, computed only once every dependency is: outputs share the
// inputs' buffers; gradients flow to the inputs only.
std::vector<array> depends(const std::vector<array>& inputs, const std::vector<array>& dependencies);

// Matrix products with masks, gathers and segments (MLX's semantics; these
// are compositions: gather_mm materializes the gathered operands).
// Masks have one entry per block_size x block_size tile (32 or 64): a
// boolean mask zeroes the masked tiles, a float mask scales them.
array block_masked_mm(array a, array b, int block_size, std::optional<array> mask_out = std::nullopt,
                      std::optional<array> mask_lhs = std::nullopt, std::optional<array> mask_rhs = std::nullopt,
                      StreamOrDevice s = {});
// out[i] = a[lhs_indices[i]] @ b[rhs_indices[i]] over the flattened batches.
array gather_mm(array a, array b, std::optional<array> lhs_indices = std::nullopt,
                std::optional<array> rhs_indices = std::nullopt, bool sorted_indices = false, StreamOrDevice s = {});
// out[...] = a[:, lo:hi] @ b[lo:hi, :] for each (lo, hi) in segments (..., 2).
array segmented_mm(array a, array b, array segments, StreamOrDevice s = {});
// a @ H_n * scale over the last axis (default scale 1/sqrt(n)). n must be a
// power of two: MLX also accepts 12, 20 and 28 times one (not yet here).
array hadamard_transform(const array& a, std::optional<float> scale = std::nullopt, StreamOrDevice s = {});
// The positions where mask (a leading part of a's shape, broadcast over the
// rest) is true take consecutive elements of values, in row-major order.
array masked_scatter(const array& a, const array& mask, const array& values, StreamOrDevice s = {});
// slice_update that combines the update with the slice's current values.
array slice_update_add(const array& src, const array& update, Shape start, Shape stop, Shape strides,
                       StreamOrDevice s = {});
array slice_update_add(const array& src, const array& update, Shape start, Shape stop, StreamOrDevice s = {});
array slice_update_prod(const array& src, const array& update, Shape start, Shape stop, Shape strides,
                        StreamOrDevice s = {});
array slice_update_prod(const array& src, const array& update, Shape start, Shape stop, StreamOrDevice s = {});
array slice_update_max(const array& src, const array& update, Shape start, Shape stop, Shape strides,
                       StreamOrDevice s = {});
array slice_update_max(const array& src, const array& update, Shape start, Shape stop, StreamOrDevice s = {});
array slice_update_min(const array& src, const array& update, Shape start, Shape stop, Shape strides,
                       StreamOrDevice s = {});
array slice_update_min(const array& src, const array& update, Shape start, Shape stop, StreamOrDevice s = {});

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
array operator~(const array& a);
array operator&(const array& a, const array& b);
array operator|(const array& a, const array& b);
array operator^(const array& a, const array& b);
array operator<<(const array& a, const array& b);
array operator>>(const array& a, const array& b);

// A C++ scalar next to an array is weakly typed: it takes the array's dtype
// when its kind (bool < integer < float) is no higher, so
// `bf16_array * 2.0f` stays bfloat16 and `int_array + 1` stays int. An
// integer scalar that does not fit the integer dtype it takes throws (as
// numpy 2 raises OverflowError) instead of wrapping: `int8_array + 300`.
Dtype weak_scalar_dtype(bool is_float, const array& like);
// Throws "[op] scalar ... is out of bounds for <dtype>" unless the integer
// `value` (or, with beyond_int64, a value above INT64_MAX) fits `dtype`;
// float and bool dtypes take any integer.
void check_scalar_fits(int64_t value, bool beyond_int64, Dtype dtype, const char* op);
template <typename T>
array as_weak_scalar(T value, const array& like, const char* op = "scalar") {
  Dtype t = weak_scalar_dtype(std::is_floating_point_v<T>, like);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    bool beyond = std::is_unsigned_v<T> && static_cast<uint64_t>(value) > static_cast<uint64_t>(INT64_MAX);
    check_scalar_fits(static_cast<int64_t>(value), beyond, t, op);
    if (!beyond) return array(static_cast<int64_t>(value), t);  // exact, even above 2^53
    if (t == uint64) return array(static_cast<uint64_t>(value), t);
  }
  return array(static_cast<double>(value), t);
}

#define KILN_SCALAR_OPERATOR(OP, NAME)                                       \
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>> \
  array operator OP(const array& a, T b) {                                   \
    return a OP as_weak_scalar(b, a, NAME);                                  \
  }                                                                          \
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>> \
  array operator OP(T a, const array& b) {                                   \
    return as_weak_scalar(a, b, NAME) OP b;                                  \
  }
KILN_SCALAR_OPERATOR(+, "add")
KILN_SCALAR_OPERATOR(-, "subtract")
KILN_SCALAR_OPERATOR(*, "multiply")
KILN_SCALAR_OPERATOR(/, "divide")
KILN_SCALAR_OPERATOR(%, "remainder")
KILN_SCALAR_OPERATOR(==, "equal")
KILN_SCALAR_OPERATOR(!=, "not_equal")
KILN_SCALAR_OPERATOR(<, "less")
KILN_SCALAR_OPERATOR(<=, "less_equal")
KILN_SCALAR_OPERATOR(>, "greater")
KILN_SCALAR_OPERATOR(>=, "greater_equal")
KILN_SCALAR_OPERATOR(&, "bitwise_and")
KILN_SCALAR_OPERATOR(|, "bitwise_or")
KILN_SCALAR_OPERATOR(^, "bitwise_xor")
KILN_SCALAR_OPERATOR(<<, "left_shift")
KILN_SCALAR_OPERATOR(>>, "right_shift")
#undef KILN_SCALAR_OPERATOR

}  // namespace kiln
