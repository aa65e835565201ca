// Transformation rules of Reduce, ArgReduce, Softmax and Matmul.
#include "core/ops_util.h"
#include "core/primitives.h"
#include "core/transform_util.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

std::vector<int> shift(const std::vector<int>& axes) {
  std::vector<int> out;
  for (int a : axes) out.push_back(a + 1);
  return out;
}

Shape kept(const Shape& in, const std::vector<int>& axes) {
  Shape s = in;
  for (int a : axes) s[a] = 1;
  return s;
}

// Where x attains the reduced extreme y (kept dims), as weights that sum
// to one over each reduced group (ties share).
array extreme_weights(const array& x, const array& y, const std::vector<int>& axes) {
  array mask = astype(x == y, x.dtype());
  return mask / sum(mask, axes, true);
}

}  // namespace

// ---- Reduce (kept dims) ----
std::vector<array> Reduce::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                               const std::vector<int>&, const std::vector<array>& outputs) {
  detail::RuleStreamScope scope(stream());
  const array& x = primals[0];
  const array& g = cot[0];
  switch (op_) {
    case ReduceOp::sum: return {broadcast_to(g, x.shape())};
    case ReduceOp::prod: {
      // d prod / dx_i = prod of the others: y / x_i where x_i != 0; where
      // x_i == 0, the product of the others computed without it.
      array y = outputs[0];
      array zero = zeros_like(x);
      array is_zero = x == zero;
      array safe = where(is_zero, ones_like(x), x);
      array others_nz = prod(safe, axes_, true);  // product of the non-zeros
      array zeros_in_group = sum(astype(is_zero, int32), axes_, true);
      array one_zero = zeros_in_group == as_weak_scalar(1, zeros_in_group);
      array d = where(is_zero, where(one_zero, others_nz, zeros_like(others_nz)), y / safe);
      return {g * conjugate(d)};  // complex64: the conjugate partial (rules_elementwise.cpp)
    }
    case ReduceOp::max:
    case ReduceOp::min: return {g * extreme_weights(x, outputs[0], axes_)};
    case ReduceOp::all:
    case ReduceOp::any: return {zeros_like(x)};
  }
  return {zeros_like(x)};
}
std::vector<array> Reduce::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                               const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  const array& x = primals[0];
  const array& t = tan[0];
  switch (op_) {
    case ReduceOp::sum: return {sum(t, axes_, true)};
    case ReduceOp::prod: {
      array y = prod(x, axes_, true);
      auto vj = vjp(primals, {ones_like(y)}, {0}, {y});
      return {sum(conjugate(vj[0]) * t, axes_, true)};
    }
    case ReduceOp::max:
    case ReduceOp::min: {
      array y = op_ == ReduceOp::max ? max(x, axes_, true) : min(x, axes_, true);
      return {sum(t * extreme_weights(x, y, axes_), axes_, true)};
    }
    case ReduceOp::all:
    case ReduceOp::any: return {zeros(kept(x.shape(), axes_), bool_)};
  }
  return {};
}
std::pair<std::vector<array>, std::vector<int>> Reduce::vmap(const std::vector<array>& inputs,
                                                             const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  array x = detail::move_axis(inputs[0], axes[0], 0);
  std::vector<int> ax = shift(axes_);
  switch (op_) {
    case ReduceOp::sum: return {{sum(x, ax, true)}, {0}};
    case ReduceOp::prod: return {{prod(x, ax, true)}, {0}};
    case ReduceOp::max: return {{max(x, ax, true)}, {0}};
    case ReduceOp::min: return {{min(x, ax, true)}, {0}};
    case ReduceOp::all: return {{all(x, ax, true)}, {0}};
    case ReduceOp::any: return {{any(x, ax, true)}, {0}};
  }
  return {};
}
std::vector<Shape> Reduce::output_shapes(const std::vector<array>& inputs) {
  return {kept(inputs[0].shape(), axes_)};
}

// ---- ArgReduce: piecewise constant ----
std::vector<array> ArgReduce::vjp(const std::vector<array>& primals, const std::vector<array>&,
                                  const std::vector<int>&, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  return {zeros_like(primals[0])};
}
std::vector<array> ArgReduce::jvp(const std::vector<array>& primals, const std::vector<array>&,
                                  const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  return {zeros(kept(primals[0].shape(), {axis_}), uint32)};
}
std::pair<std::vector<array>, std::vector<int>> ArgReduce::vmap(const std::vector<array>& inputs,
                                                                const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  array x = detail::move_axis(inputs[0], axes[0], 0);
  return {{array(kept(x.shape(), {axis_ + 1}), uint32, std::make_shared<ArgReduce>(stream(), is_max_, axis_ + 1),
                 {x})},
          {0}};
}
std::vector<Shape> ArgReduce::output_shapes(const std::vector<array>& inputs) {
  return {kept(inputs[0].shape(), {axis_})};
}

// ---- Softmax over the last axis ----
std::vector<array> Softmax::vjp(const std::vector<array>&, const std::vector<array>& cot, const std::vector<int>&,
                                const std::vector<array>& outputs) {
  detail::RuleStreamScope scope(stream());
  const array& y = outputs[0];
  return {y * (cot[0] - sum(cot[0] * y, -1, true))};
}
std::vector<array> Softmax::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                                const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  array y = make_node<Softmax>(primals[0].shape(), primals[0].dtype(), {primals[0]}, stream());
  return {y * (tan[0] - sum(tan[0] * y, -1, true))};
}
std::pair<std::vector<array>, std::vector<int>> Softmax::vmap(const std::vector<array>& inputs,
                                                              const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  int last = inputs[0].ndim() - 1;
  // Any batch axis but the last one is untouched by a last-axis softmax.
  array x = axes[0] == last ? detail::move_axis(inputs[0], last, 0) : inputs[0];
  int ax = axes[0] == last ? 0 : axes[0];
  return {{make_node<Softmax>(x.shape(), x.dtype(), {x}, stream())}, {ax}};
}
std::vector<Shape> Softmax::output_shapes(const std::vector<array>& inputs) { return {inputs[0].shape()}; }

// ---- Matmul: [..., M, K] x [..., K, N], batch dims already broadcast ----
std::vector<array> Matmul::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                               const std::vector<int>& argnums, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  std::vector<array> out;
  for (int k : argnums) {
    // complex64: the conjugate transposes (conjugate is the identity on real arrays).
    out.push_back(k == 0 ? matmul(cot[0], conjugate(swapaxes(primals[1], -1, -2)))
                         : matmul(conjugate(swapaxes(primals[0], -1, -2)), cot[0]));
  }
  return out;
}
std::vector<array> Matmul::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                               const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  std::optional<array> out;
  for (size_t k = 0; k < argnums.size(); ++k) {
    array term = argnums[k] == 0 ? matmul(tan[k], primals[1]) : matmul(primals[0], tan[k]);
    out = out ? *out + term : term;
  }
  return {*out};
}
std::pair<std::vector<array>, std::vector<int>> Matmul::vmap(const std::vector<array>& inputs,
                                                             const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  detail::batch_size(inputs, axes);  // checks the mapped sizes agree
  // matmul broadcasts batch axes (right-aligned): an unbatched operand
  // needs no copy, the batched one leads with the mapped axis.
  array a = axes[0] >= 0 ? detail::move_axis(inputs[0], axes[0], 0) : inputs[0];
  array b = axes[1] >= 0 ? detail::move_axis(inputs[1], axes[1], 0) : inputs[1];
  return {{matmul(a, b)}, {0}};
}
std::vector<Shape> Matmul::output_shapes(const std::vector<array>& inputs) {
  Shape s = inputs[0].shape();
  s.back() = inputs[1].shape().back();
  return {s};
}

}  // namespace kiln
