// Transformation rules of the elementwise primitives (Unary, Binary,
// Select, Copy) and of the ones without differentiable inputs (Arange,
// RandomBits, StopGradient). Each derivative is written once, as the
// partial derivative of the op, and serves both vjp (cotangent times the
// partial) and jvp (tangent times the partial). complex64 follows MLX: the
// cotangent of z = a + ib is dL/da + i dL/db, so vjp multiplies by the
// conjugate of the partial (conjugate is the identity on real arrays), and
// the conjugate op, which is not complex-differentiable, has its own rule.
#include <cmath>
#include <numbers>

#include "core/ops_util.h"
#include "core/primitives.h"
#include "core/transform_util.h"
#include "kiln/ops.h"
#include "kiln/random.h"

namespace kiln {
namespace {

array scalar(double v, const array& like) { return as_weak_scalar(v, like); }
// A constant partial: broadcasting does the rest.
array full_like_scalar(double v, const array& like) { return scalar(v, like); }
array reciprocal_of(const array& x) { return scalar(1.0, x) / x; }

// d op(x) / dx, given x and y = op(x); nullopt when it is zero everywhere.
std::optional<array> unary_partial(UnaryOp op, const array& x, const array& y) {
  switch (op) {
    // complex64: d|z| = Re(conj(z) dz) / |z|; the real part is what the
    // cast to float32 after the op keeps.
    case UnaryOp::abs: return is_complex(x.dtype()) ? conjugate(x) / abs(x) : sign(x);
    case UnaryOp::conjugate: return std::nullopt;  // handled by the rules (not a multiplication)
    case UnaryOp::negative: return full_like_scalar(-1.0, x);
    case UnaryOp::sign:
    case UnaryOp::floor:
    case UnaryOp::ceil:
    case UnaryOp::round:
    case UnaryOp::logical_not:
    case UnaryOp::bitwise_invert: return std::nullopt;
    case UnaryOp::exp: return y;
    case UnaryOp::expm1: return y + scalar(1.0, y);
    case UnaryOp::log: return reciprocal_of(x);
    case UnaryOp::log1p: return reciprocal_of(x + scalar(1.0, x));
    case UnaryOp::sqrt: return scalar(0.5, y) / y;
    case UnaryOp::rsqrt: return scalar(-0.5, y) * y / x;
    case UnaryOp::square: return scalar(2.0, x) * x;
    case UnaryOp::sin: return cos(x);
    case UnaryOp::cos: return negative(sin(x));
    case UnaryOp::tanh: return scalar(1.0, y) - square(y);
    case UnaryOp::sigmoid: return y * (scalar(1.0, y) - y);
    case UnaryOp::erf: return scalar(2.0 / std::sqrt(std::numbers::pi), x) * exp(negative(square(x)));
    case UnaryOp::erfinv: return scalar(std::sqrt(std::numbers::pi) / 2.0, y) * exp(square(y));
    case UnaryOp::relu: return astype(x > scalar(0.0, x), x.dtype());
    case UnaryOp::gelu: {
      // Phi(x) + x phi(x)
      array cdf = scalar(0.5, x) * (scalar(1.0, x) + erf(x * scalar(1.0 / std::numbers::sqrt2, x)));
      array pdf = exp(scalar(-0.5, x) * square(x)) * scalar(1.0 / std::sqrt(2.0 * std::numbers::pi), x);
      return cdf + x * pdf;
    }
    case UnaryOp::gelu_approx: {
      const double c = std::sqrt(2.0 / std::numbers::pi), k = 0.044715;
      array x2 = square(x);
      array t = tanh(scalar(c, x) * (x + scalar(k, x) * x2 * x));
      array one = scalar(1.0, x);
      return scalar(0.5, x) * (one + t) +
             scalar(0.5 * c, x) * x * (one - square(t)) * (one + scalar(3.0 * k, x) * x2);
    }
    case UnaryOp::tan: return scalar(1.0, y) + square(y);
    case UnaryOp::arcsin: return rsqrt(scalar(1.0, x) - square(x));
    case UnaryOp::arccos: return negative(rsqrt(scalar(1.0, x) - square(x)));
    case UnaryOp::arctan: return reciprocal_of(scalar(1.0, x) + square(x));
    case UnaryOp::sinh: return cosh(x);
    case UnaryOp::cosh: return sinh(x);
    case UnaryOp::arcsinh: return rsqrt(square(x) + scalar(1.0, x));
    case UnaryOp::arccosh:
      // complex64: 1 / (sqrt(z - 1) sqrt(z + 1)), the branch the op takes.
      if (is_complex(x.dtype())) return reciprocal_of(sqrt(x - scalar(1.0, x)) * sqrt(x + scalar(1.0, x)));
      return rsqrt(square(x) - scalar(1.0, x));
    case UnaryOp::arctanh: return reciprocal_of(scalar(1.0, x) - square(x));
    case UnaryOp::log2: return reciprocal_of(x * scalar(std::numbers::ln2, x));
    case UnaryOp::log10: return reciprocal_of(x * scalar(std::numbers::ln10, x));
    case UnaryOp::silu: {
      array s = sigmoid(x);
      return s * (scalar(1.0, x) + x * (scalar(1.0, x) - s));
    }
  }
  return std::nullopt;
}

// The partials of a binary op with respect to a and b (inputs of one shape
// and dtype); nullopt: zero.
std::pair<std::optional<array>, std::optional<array>> binary_partials(BinaryOp op, const array& a, const array& b,
                                                                       const array& y) {
  switch (op) {
    case BinaryOp::add: return {full_like_scalar(1.0, a), full_like_scalar(1.0, b)};
    case BinaryOp::subtract: return {full_like_scalar(1.0, a), full_like_scalar(-1.0, b)};
    case BinaryOp::multiply: return {b, a};
    case BinaryOp::divide: return {reciprocal_of(b), negative(y) / b};
    case BinaryOp::power: return {b * power(a, b - scalar(1.0, b)), y * log(a)};
    case BinaryOp::maximum:
    case BinaryOp::minimum: {
      // Ties share the derivative, as the two one-sided slopes average.
      array wins = op == BinaryOp::maximum ? astype(a > b, a.dtype()) : astype(a < b, a.dtype());
      array tie = astype(a == b, a.dtype()) * scalar(0.5, a);
      array pa = wins + tie;
      return {pa, scalar(1.0, a) - pa};
    }
    case BinaryOp::remainder: return {full_like_scalar(1.0, a), negative(floor(a / b))};
    case BinaryOp::arctan2: {
      array r2 = square(a) + square(b);
      return {b / r2, negative(a) / r2};
    }
    default: return {std::nullopt, std::nullopt};  // comparisons and logical ops
  }
}

// A node of the same primitive on new inputs (the batched rule of
// elementwise ops): every input moved to batch-first and broadcast.
std::pair<std::vector<array>, std::vector<int>> elementwise_vmap(const std::shared_ptr<Primitive>& p,
                                                                 const std::vector<array>& inputs,
                                                                 const std::vector<int>& axes, Dtype out_dtype) {
  // Every input of an elementwise node has the node's shape: batch-first,
  // each is [n, shape...] (an unbatched one broadcast along n).
  int n = detail::batch_size(inputs, axes);
  std::vector<array> xs;
  for (size_t i = 0; i < inputs.size(); ++i) xs.push_back(detail::batch_first(inputs[i], axes[i], n));
  Shape shape = xs[0].shape();
  return {{array(shape, out_dtype, p, xs)}, {0}};
}

std::vector<array> zero_cotangents(const std::vector<array>& primals, const std::vector<int>& argnums) {
  std::vector<array> out;
  for (int a : argnums) out.push_back(zeros_like(primals[a]));
  return out;
}

}  // namespace

// ---- Unary ----
std::vector<array> Unary::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                              const std::vector<int>& argnums, const std::vector<array>& outputs) {
  detail::RuleStreamScope scope(stream());
  if (op_ == UnaryOp::conjugate) return {conjugate(cot[0])};
  auto d = unary_partial(op_, primals[0], outputs[0]);
  return {d ? cot[0] * conjugate(*d) : zeros_like(primals[0])};
}
std::vector<array> Unary::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                              const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  if (op_ == UnaryOp::conjugate) return {conjugate(tan[0])};
  array y = make_node<Unary>(primals[0].shape(), primals[0].dtype(), {primals[0]}, stream(), op_);
  auto d = unary_partial(op_, primals[0], y);
  return {d ? tan[0] * *d : zeros_like(primals[0])};
}
std::pair<std::vector<array>, std::vector<int>> Unary::vmap(const std::vector<array>& inputs,
                                                            const std::vector<int>& axes) {
  return {{make_node<Unary>(inputs[0].shape(), inputs[0].dtype(), {inputs[0]}, stream(), op_)}, {axes[0]}};
}
std::vector<Shape> Unary::output_shapes(const std::vector<array>& inputs) { return {inputs[0].shape()}; }

// ---- Binary ----
std::vector<array> Binary::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                               const std::vector<int>& argnums, const std::vector<array>& outputs) {
  detail::RuleStreamScope scope(stream());
  auto [pa, pb] = binary_partials(op_, primals[0], primals[1], outputs[0]);
  std::vector<array> out;
  for (int a : argnums) {
    const auto& p = a == 0 ? pa : pb;
    if (!p) {
      out.push_back(zeros_like(primals[a]));
    } else if (op_ == BinaryOp::add || (op_ == BinaryOp::subtract && a == 0) ||
               (op_ == BinaryOp::remainder && a == 0)) {
      out.push_back(cot[0]);  // a partial of one
    } else {
      out.push_back(cot[0] * conjugate(*p));
    }
  }
  return out;
}
std::vector<array> Binary::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                               const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  array y = make_node<Binary>(primals[0].shape(), primals[0].dtype(), primals, stream(), op_);
  auto [pa, pb] = binary_partials(op_, primals[0], primals[1], y);
  std::optional<array> out;
  for (size_t k = 0; k < argnums.size(); ++k) {
    const auto& p = argnums[k] == 0 ? pa : pb;
    if (!p) continue;
    array term = tan[k] * *p;
    out = out ? *out + term : term;
  }
  Dtype t = is_comparison(op_) ? bool_ : primals[0].dtype();
  return {out ? *out : zeros(primals[0].shape(), t)};
}
std::pair<std::vector<array>, std::vector<int>> Binary::vmap(const std::vector<array>& inputs,
                                                             const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  Dtype t = is_comparison(op_) ? bool_ : inputs[0].dtype();
  return elementwise_vmap(std::make_shared<Binary>(stream(), op_), inputs, axes, t);
}
std::vector<Shape> Binary::output_shapes(const std::vector<array>& inputs) { return {inputs[0].shape()}; }

// ---- Select: where(condition, x, y) ----
std::vector<array> Select::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                               const std::vector<int>& argnums, const std::vector<array>& outputs) {
  detail::RuleStreamScope scope(stream());
  std::vector<array> out;
  for (int a : argnums) {
    if (a == 0) {
      out.push_back(zeros_like(primals[0]));
    } else {
      array z = zeros_like(cot[0]);
      out.push_back(a == 1 ? where(primals[0], cot[0], z) : where(primals[0], z, cot[0]));
    }
  }
  return out;
}
std::vector<array> Select::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                               const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  array tx = zeros_like(primals[1]), ty = zeros_like(primals[2]);
  for (size_t k = 0; k < argnums.size(); ++k) {
    if (argnums[k] == 1) tx = tan[k];
    if (argnums[k] == 2) ty = tan[k];
  }
  return {where(primals[0], tx, ty)};
}
std::pair<std::vector<array>, std::vector<int>> Select::vmap(const std::vector<array>& inputs,
                                                             const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  return elementwise_vmap(std::make_shared<Select>(stream()), inputs, axes, inputs[1].dtype());
}
std::vector<Shape> Select::output_shapes(const std::vector<array>& inputs) { return {inputs[1].shape()}; }

// ---- Copy (copy, contiguous, astype) ----
std::vector<array> Copy::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                             const std::vector<int>& argnums, const std::vector<array>& outputs) {
  detail::RuleStreamScope scope(stream());
  return {astype(cot[0], primals[0].dtype())};
}
std::vector<array> Copy::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                             const std::vector<int>& argnums) {
  // The output dtype is not stored on the primitive: the transformation
  // casts the tangent to the output's dtype.
  return {tan[0]};
}
std::pair<std::vector<array>, std::vector<int>> Copy::vmap(const std::vector<array>& inputs,
                                                           const std::vector<int>& axes) {
  // Same dtype as the input: the transformation casts each batched output
  // to the dtype of the output it replaces.
  return {{make_node<Copy>(inputs[0].shape(), inputs[0].dtype(), {inputs[0]}, stream(), view_if_contiguous_)},
          {axes[0]}};
}
std::vector<Shape> Copy::output_shapes(const std::vector<array>& inputs) { return {inputs[0].shape()}; }

// ---- StopGradient ----
std::vector<array> StopGradient::vjp(const std::vector<array>& primals, const std::vector<array>&,
                                     const std::vector<int>& argnums, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  return zero_cotangents(primals, argnums);
}
std::vector<array> StopGradient::jvp(const std::vector<array>& primals, const std::vector<array>&,
                                     const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  return {zeros_like(primals[0])};
}
std::pair<std::vector<array>, std::vector<int>> StopGradient::vmap(const std::vector<array>& inputs,
                                                                   const std::vector<int>& axes) {
  return {{stop_gradient(inputs[0], stream())}, {axes[0]}};
}
std::vector<Shape> StopGradient::output_shapes(const std::vector<array>& inputs) { return {inputs[0].shape()}; }
bool StopGradient::is_equivalent(const Primitive& o) const { return dynamic_cast<const StopGradient*>(&o); }

// ---- Arange: no inputs ----
std::vector<array> Arange::vjp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&,
                               const std::vector<array>&) {
  return {};
}
std::vector<array> Arange::jvp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&) {
  throw Error("[arange] has no inputs to differentiate");
}
std::pair<std::vector<array>, std::vector<int>> Arange::vmap(const std::vector<array>&, const std::vector<int>&) {
  throw Error("[arange] has no inputs to map over");
}
std::vector<Shape> Arange::output_shapes(const std::vector<array>&) { return {{num_}}; }

// ---- RandomBits: bits of a key; not differentiable in the key ----
std::vector<array> RandomBits::vjp(const std::vector<array>& primals, const std::vector<array>&,
                                   const std::vector<int>& argnums, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  return zero_cotangents(primals, argnums);
}
std::vector<array> RandomBits::jvp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  return {zeros(shape_, uint32)};
}
std::pair<std::vector<array>, std::vector<int>> RandomBits::vmap(const std::vector<array>& inputs,
                                                                 const std::vector<int>& axes) {
  // One draw per key: the keys are few, the draws are the work.
  detail::RuleStreamScope scope(stream());
  array keys = detail::move_axis(inputs[0], axes[0], 0);
  std::vector<array> draws;
  for (int i = 0; i < keys.shape(0); ++i) {
    array k = reshape(slice(keys, {i, 0}, {i + 1, 2}), {2});
    draws.push_back(make_node<RandomBits>(shape_, uint32, {k}, stream(), shape_));
  }
  return {{stack(draws, 0)}, {0}};
}
std::vector<Shape> RandomBits::output_shapes(const std::vector<array>&) { return {shape_}; }

}  // namespace kiln
