// MLX ops written with other ops (no primitive of their own): window
// functions, diff, median, count_nonzero, vecdot, trunc, reciprocal,
// positive, logical_xor, number_of_elements. Being compositions, they run on
// every backend and get vjp, jvp and vmap from the ops they are made of.
#include <cmath>
#include <numbers>
#include <numeric>
#include <string>

#include "core/array_desc.h"
#include "core/ops_util.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

Dtype at_least_float(Dtype t) { return is_floating_point(t) ? t : float32; }

// MLX's window functions: float32, [1] for M == 1, empty for M < 1.
template <typename Body>
array window(int M, StreamOrDevice s, Body body) {
  Stream st = to_stream(s);
  if (M < 1) return zeros({0}, float32, st);
  if (M == 1) return ones({1}, float32, st);
  return body(arange(0.0, static_cast<double>(M), float32, st), static_cast<double>(M - 1), st);
}

// depends: the first n inputs pass through (their buffers are shared, no
// copy); the others are computed first and then dropped. Gradients flow to
// the passed-through inputs only.
class Depends : public Primitive {
 public:
  Depends(Stream s, int n) : Primitive(s), n_(n) {}
  const char* name() const override { return "Depends"; }
  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override { forward(inputs, outputs); }
  void eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) override { forward(inputs, outputs); }
  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                         const std::vector<int>& argnums, const std::vector<array>&) override {
    std::vector<array> out;
    for (int a : argnums) out.push_back(a < n_ ? cotangents[a] : zeros_like(primals[a]));
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& primals, const std::vector<array>& tangents,
                         const std::vector<int>& argnums) override {
    std::vector<array> out;
    for (int i = 0; i < n_; ++i) out.push_back(zeros_like(primals[i]));
    for (size_t k = 0; k < argnums.size(); ++k) {
      if (argnums[k] < n_) out[argnums[k]] = tangents[k];
    }
    return out;
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& inputs,
                                                       const std::vector<int>& axes) override {
    // Outputs are always batched: an unbatched pass-through input gets the
    // batch size of a batched input as a leading broadcast axis.
    int size = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (axes[i] >= 0) size = inputs[i].shape(axes[i]);
    }
    std::vector<array> first, rest(inputs.begin() + n_, inputs.end());
    std::vector<int> out_axes;
    for (int i = 0; i < n_; ++i) {
      if (axes[i] >= 0) {
        first.push_back(inputs[i]);
        out_axes.push_back(axes[i]);
      } else {
        Shape shape = inputs[i].shape();
        shape.insert(shape.begin(), size);
        first.push_back(broadcast_to(inputs[i], shape, stream()));
        out_axes.push_back(0);
      }
    }
    return {depends(first, rest), out_axes};
  }
  std::vector<Shape> output_shapes(const std::vector<array>& inputs) override {
    std::vector<Shape> out;
    for (int i = 0; i < n_; ++i) out.push_back(inputs[i].shape());
    return out;
  }

 private:
  void forward(const std::vector<array>& inputs, std::vector<array>& outputs) {
    for (int i = 0; i < n_; ++i) {
      detail::share_buffer(outputs[i], inputs[i], inputs[i].desc()->strides, inputs[i].desc()->offset);
    }
  }
  int n_;
};

}  // namespace

std::vector<array> depends(const std::vector<array>& inputs, const std::vector<array>& dependencies) {
  if (inputs.empty()) throw Error("[depends] needs at least one input");
  std::vector<array> all = inputs;
  all.insert(all.end(), dependencies.begin(), dependencies.end());
  std::vector<Shape> shapes;
  std::vector<Dtype> dtypes;
  for (const auto& in : inputs) {
    shapes.push_back(in.shape());
    dtypes.push_back(in.dtype());
  }
  Stream st = inputs[0].has_primitive() ? inputs[0].primitive()->stream() : to_stream({});
  return array::make_arrays(std::move(shapes), dtypes, std::make_shared<Depends>(st, static_cast<int>(inputs.size())),
                            all);
}

array hanning(int M, StreamOrDevice s) {
  return window(M, s, [](const array& n, double m1, Stream st) {
    return square(sin(multiply(array(static_cast<float>(std::numbers::pi / m1)), n, st), st), st);
  });
}

array hamming(int M, StreamOrDevice s) {
  return window(M, s, [](const array& n, double m1, Stream st) {
    array c = cos(multiply(array(static_cast<float>(2.0 * std::numbers::pi / m1)), n, st), st);
    return subtract(array(0.54f), multiply(array(0.46f), c, st), st);
  });
}

array bartlett(int M, StreamOrDevice s) {
  return window(M, s, [](const array& n, double m1, Stream st) {
    array t = subtract(multiply(array(static_cast<float>(2.0 / m1)), n, st), array(1.0f), st);
    return subtract(array(1.0f), abs(t, st), st);
  });
}

array blackman(int M, StreamOrDevice s) {
  return window(M, s, [](const array& n, double m1, Stream st) {
    array c = cos(multiply(array(static_cast<float>(2.0 * std::numbers::pi / m1)), n, st), st);
    // 0.42 - 0.5 cos(x) + 0.08 cos(2x), with cos(2x) = 2 cos^2(x) - 1 (MLX's form).
    return add(subtract(array(0.34f), multiply(array(0.5f), c, st), st), multiply(array(0.16f), square(c, st), st), st);
  });
}

array diff(const array& a, int n, int axis, StreamOrDevice s) {
  const int nd = a.ndim();
  if (nd == 0) fail("diff", "needs an array with at least one dimension", {&a});
  const int ax = normalize_axis(axis, nd, "diff", a);
  if (n < 0) fail("diff", "the order n must be non-negative, got " + std::to_string(n), {&a});
  Stream st = to_stream(s);
  array x = a;
  for (int i = 0; i < n && x.shape(ax) > 0; ++i) {
    Shape hi_start(nd, 0), lo_stop = x.shape();
    hi_start[ax] = 1;
    lo_stop[ax] = x.shape(ax) - 1;
    array upper = slice(x, hi_start, x.shape(), st);
    array lower = slice(x, Shape(nd, 0), lo_stop, st);
    // numpy: booleans differ by not_equal (subtract is undefined on bool).
    x = x.dtype() == bool_ ? not_equal(upper, lower, st) : subtract(upper, lower, st);
  }
  return x;
}

array median(const array& a, const std::vector<int>& axes_in, bool keepdims, StreamOrDevice s) {
  std::vector<int> axes = normalize_axes(axes_in, a.ndim(), "median", a);
  Stream st = to_stream(s);
  // The reduced axes go last and are flattened into one, which is sorted.
  std::vector<int> perm;
  for (int i = 0; i < a.ndim(); ++i) {
    if (std::find(axes.begin(), axes.end(), i) == axes.end()) perm.push_back(i);
  }
  const int kept = static_cast<int>(perm.size());
  perm.insert(perm.end(), axes.begin(), axes.end());
  array flat = transpose(a, perm, st);
  flat = axes.empty() ? expand_dims(flat, -1, st) : flatten(flat, kept, a.ndim() - 1, st);
  const int n = flat.shape(-1);
  if (n == 0) fail("median", "cannot take the median over an empty axis", {&a});
  const Dtype dt = at_least_float(a.dtype());
  array sorted = sort(flat, -1, st);
  Shape start(sorted.ndim(), 0), stop = sorted.shape();
  start.back() = n / 2;
  stop.back() = n / 2 + 1;
  array mid = astype(slice(sorted, start, stop, st), dt, st);
  if (n % 2 == 0) {
    start.back() = n / 2 - 1;
    stop.back() = n / 2;
    mid = multiply(add(mid, astype(slice(sorted, start, stop, st), dt, st), st), array(0.5, dt), st);
  }
  // Sorting puts NaN last, where the midpoint never looks: propagate it as
  // max, min and mean do.
  if (is_floating_point(a.dtype())) {
    mid = where(any(isnan(flat, st), -1, true, st), array(NAN, dt), mid, st);
  }
  mid = squeeze(mid, -1, st);
  if (keepdims) mid = expand_dims(mid, axes, st);
  return mid;
}
array median(const array& a, int axis, bool keepdims, StreamOrDevice s) {
  return median(a, std::vector<int>{axis}, keepdims, s);
}
array median(const array& a, bool keepdims, StreamOrDevice s) {
  std::vector<int> axes(a.ndim());
  std::iota(axes.begin(), axes.end(), 0);
  return median(a, axes, keepdims, s);
}
array median(const array& a, StreamOrDevice s) { return median(a, false, s); }

array count_nonzero(const array& a, const std::vector<int>& axes, bool keepdims, StreamOrDevice s) {
  Stream st = to_stream(s);
  return sum(astype(not_equal(a, array(0, a.dtype()), st), int32, st), axes, keepdims, st);
}
array count_nonzero(const array& a, int axis, bool keepdims, StreamOrDevice s) {
  return count_nonzero(a, std::vector<int>{axis}, keepdims, s);
}
array count_nonzero(const array& a, bool keepdims, StreamOrDevice s) {
  std::vector<int> axes(a.ndim());
  std::iota(axes.begin(), axes.end(), 0);
  return count_nonzero(a, axes, keepdims, s);
}

array vecdot(const array& a, const array& b, int axis, StreamOrDevice s) {
  if (a.ndim() == 0 || b.ndim() == 0) fail("vecdot", "inputs must be at least 1-D", {&a, &b});
  // MLX's rule: the axis is normalized against a, and must name the same
  // dimension of b (so a negative axis needs equal ranks).
  const int ax = axis < 0 ? axis + a.ndim() : axis;
  const bool b_ok = axis < 0 ? axis + b.ndim() == ax : axis < b.ndim();
  if (ax < 0 || ax >= a.ndim() || !b_ok) {
    fail("vecdot", "axis " + std::to_string(axis) + " is out of bounds", {&a, &b});
  }
  if (a.shape(ax) != b.shape(ax)) fail("vecdot", "a and b must have the same size along the axis", {&a, &b});
  Stream st = to_stream(s);
  const array lhs = a.dtype() == complex64 ? conjugate(a, st) : a;
  return sum(multiply(lhs, b, st), ax, false, st);
}

array trunc(const array& a, StreamOrDevice s) {
  if (is_integral(a.dtype())) return a;
  Stream st = to_stream(s);
  return where(less(a, array(0, a.dtype()), st), ceil(a, st), floor(a, st), st);
}

array reciprocal(const array& a, StreamOrDevice s) {
  return divide(array(1.0, at_least_float(a.dtype())), a, to_stream(s));
}

array positive(const array& a, StreamOrDevice) { return a; }

array logical_xor(const array& a, const array& b, StreamOrDevice s) {
  Stream st = to_stream(s);
  return not_equal(astype(a, bool_, st), astype(b, bool_, st), st);
}

array number_of_elements(const array& a, std::vector<int> axes, bool inverted, Dtype dtype, StreamOrDevice) {
  double n = 1;
  for (int ax : axes) n *= a.shape(normalize_axis(ax, a.ndim(), "number_of_elements", a));
  return array(inverted ? 1.0 / n : n, dtype);
}

}  // namespace kiln
