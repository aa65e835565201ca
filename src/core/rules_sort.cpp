// Transformation rules of Sort, ArgSort, Partition, ArgPartition,
// SearchSorted and Scan. Sorts and partitions apply a permutation that is
// locally constant in the input: their derivatives move the cotangent
// (tangent) through the permutation, which is cut from the graph with
// stop_gradient so that higher derivatives stay correct.
#include <limits>

#include "core/ops_util.h"
#include "core/primitives_sort.h"
#include "core/transform_util.h"
#include "kiln/ops.h"
#include "kiln/transforms.h"

namespace kiln {

const char* scan_op_name(ScanOp op) {
  switch (op) {
    case ScanOp::sum: return "cumsum";
    case ScanOp::prod: return "cumprod";
    case ScanOp::max: return "cummax";
    case ScanOp::min: return "cummin";
    case ScanOp::logaddexp: return "logcumsumexp";
  }
  return "scan";
}

namespace {
array scatter_back(const array& x, const array& perm, const array& g, int axis) {
  return put_along_axis(zeros_like(x), stop_gradient(perm), g, axis);
}
}  // namespace

// ---- Sort ----
std::vector<array> Sort::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                             const std::vector<int>&, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  return {scatter_back(primals[0], argsort(primals[0], axis_), cot[0], axis_)};
}
std::vector<array> Sort::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                             const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  return {take_along_axis(tan[0], stop_gradient(argsort(primals[0], axis_)), axis_)};
}
std::pair<std::vector<array>, std::vector<int>> Sort::vmap(const std::vector<array>& inputs,
                                                           const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  return {{sort(detail::batch_first(inputs[0], axes[0]), axis_ + 1)}, {0}};
}
std::vector<Shape> Sort::output_shapes(const std::vector<array>& inputs) { return {inputs[0].shape()}; }
bool Sort::is_equivalent(const Primitive& o) const {
  auto* p = dynamic_cast<const Sort*>(&o);
  return p && p->axis_ == axis_;
}

// ---- ArgSort: piecewise constant ----
std::vector<array> ArgSort::vjp(const std::vector<array>& primals, const std::vector<array>&,
                                const std::vector<int>&, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  return {zeros_like(primals[0])};
}
std::vector<array> ArgSort::jvp(const std::vector<array>& primals, const std::vector<array>&,
                                const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  return {zeros(primals[0].shape(), uint32)};
}
std::pair<std::vector<array>, std::vector<int>> ArgSort::vmap(const std::vector<array>& inputs,
                                                              const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  return {{argsort(detail::batch_first(inputs[0], axes[0]), axis_ + 1)}, {0}};
}
std::vector<Shape> ArgSort::output_shapes(const std::vector<array>& inputs) { return {inputs[0].shape()}; }
bool ArgSort::is_equivalent(const Primitive& o) const {
  auto* p = dynamic_cast<const ArgSort*>(&o);
  return p && p->axis_ == axis_;
}

// ---- Partition: the permutation of argpartition (same kernel order) ----
std::vector<array> Partition::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                                  const std::vector<int>&, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  return {scatter_back(primals[0], argpartition(primals[0], kth_, axis_), cot[0], axis_)};
}
std::vector<array> Partition::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                                  const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  return {take_along_axis(tan[0], stop_gradient(argpartition(primals[0], kth_, axis_)), axis_)};
}
std::pair<std::vector<array>, std::vector<int>> Partition::vmap(const std::vector<array>& inputs,
                                                                const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  return {{partition(detail::batch_first(inputs[0], axes[0]), kth_, axis_ + 1)}, {0}};
}
std::vector<Shape> Partition::output_shapes(const std::vector<array>& inputs) { return {inputs[0].shape()}; }
bool Partition::is_equivalent(const Primitive& o) const {
  auto* p = dynamic_cast<const Partition*>(&o);
  return p && p->axis_ == axis_ && p->kth_ == kth_;
}

// ---- ArgPartition: piecewise constant ----
std::vector<array> ArgPartition::vjp(const std::vector<array>& primals, const std::vector<array>&,
                                     const std::vector<int>&, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  return {zeros_like(primals[0])};
}
std::vector<array> ArgPartition::jvp(const std::vector<array>& primals, const std::vector<array>&,
                                     const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  return {zeros(primals[0].shape(), uint32)};
}
std::pair<std::vector<array>, std::vector<int>> ArgPartition::vmap(const std::vector<array>& inputs,
                                                                   const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  return {{argpartition(detail::batch_first(inputs[0], axes[0]), kth_, axis_ + 1)}, {0}};
}
std::vector<Shape> ArgPartition::output_shapes(const std::vector<array>& inputs) { return {inputs[0].shape()}; }
bool ArgPartition::is_equivalent(const Primitive& o) const {
  auto* p = dynamic_cast<const ArgPartition*>(&o);
  return p && p->axis_ == axis_ && p->kth_ == kth_;
}

// ---- SearchSorted: piecewise constant ----
std::vector<array> SearchSorted::vjp(const std::vector<array>& primals, const std::vector<array>&,
                                     const std::vector<int>& argnums, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  std::vector<array> out;
  for (int k : argnums) out.push_back(zeros_like(primals[k]));
  return out;
}
std::vector<array> SearchSorted::jvp(const std::vector<array>& primals, const std::vector<array>&,
                                     const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  return {zeros(primals[1].shape(), uint32)};
}
std::pair<std::vector<array>, std::vector<int>> SearchSorted::vmap(const std::vector<array>& inputs,
                                                                   const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  if (axes[0] >= 0) {
    fail("searchsorted", "cannot vmap over the sorted sequence, only over the values", inputs);
  }
  // The output has the values' shape, so their batch axis carries over.
  return {{make_node<SearchSorted>(inputs[1].shape(), uint32, inputs, stream(), right_)}, {axes[1]}};
}
std::vector<Shape> SearchSorted::output_shapes(const std::vector<array>& inputs) { return {inputs[1].shape()}; }
bool SearchSorted::is_equivalent(const Primitive& o) const {
  auto* p = dynamic_cast<const SearchSorted*>(&o);
  return p && p->right_ == right_;
}

// ---- Scan ----
namespace {

array scan_like(ScanOp op, const array& x, int axis, bool reverse, bool inclusive) {
  switch (op) {
    case ScanOp::sum: return cumsum(x, axis, reverse, inclusive);
    case ScanOp::prod: return cumprod(x, axis, reverse, inclusive);
    case ScanOp::max: return cummax(x, axis, reverse, inclusive);
    case ScanOp::min: return cummin(x, axis, reverse, inclusive);
    case ScanOp::logaddexp: return logcumsumexp(x, axis, reverse, inclusive);
  }
  return x;
}

array slice_axis(const array& a, int axis, int begin, int end) {
  Shape start(a.ndim(), 0), stop = a.shape();
  start[axis] = begin;
  stop[axis] = end;
  return slice(a, start, stop);
}

// For an inclusive cummax / cummin, the index of the element that holds
// the running extreme at each position (the latest of tied elements, in
// scan order), as uint32 and cut from the graph.
array extreme_owner(ScanOp op, const array& x, int axis, bool reverse) {
  int n = x.shape(axis);
  array run = scan_like(op, x, axis, reverse, true);
  Shape ishape(x.ndim(), 1);
  ishape[axis] = n;
  array iota = reshape(arange(0, n), ishape);
  array masked = where(x == run, iota, array(reverse ? n : -1, int32));
  array owner = reverse ? cummin(masked, axis, true, true) : cummax(masked, axis, false, true);
  return stop_gradient(astype(owner, uint32));
}

// Log of the positive (negative) part of g, so that a signed sum can run
// through logcumsumexp without overflow. Where the part is zero it is
// e^-80 instead of 0 (-inf): the two parts get it at complementary places,
// so it cancels in their difference up to n * e^-80, and the rule stays
// finite and smooth enough to be differentiated again (grad of grad).
array log_part(const array& g, bool positive) {
  array zero = zeros_like(g);
  array sel = positive ? g > zero : g < zero;
  return where(sel, log(abs(where(sel, g, ones_like(g)))), full_like(g, -80.0));
}

// The scan's output with the -inf of an empty exclusive prefix replaced by
// 0: those entries are never summed by the transposed scan, and a finite
// value keeps inf - inf out of the derivatives.
array finite_output(const array& y) { return where(isneginf(y), zeros_like(y), y); }

}  // namespace

std::vector<array> Scan::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                             const std::vector<int>&, const std::vector<array>& outputs) {
  detail::RuleStreamScope scope(stream());
  const array& x = primals[0];
  const array& g = cot[0];
  int n = x.shape(axis_);
  switch (op_) {
    case ScanOp::sum: return {cumsum(g, axis_, !reverse_, inclusive_)};
    case ScanOp::logaddexp: {
      // d out_i / d x_j = exp(x_j - out_i) for every j the scan at i covers:
      // the transposed scan of g_i * exp(-out_i), split by sign.
      array y = finite_output(outputs[0]);
      array pos = exp(logcumsumexp(log_part(g, true) - y, axis_, !reverse_, inclusive_) + x);
      array neg = exp(logcumsumexp(log_part(g, false) - y, axis_, !reverse_, inclusive_) + x);
      return {pos - neg};
    }
    case ScanOp::prod: {
      // Before the first zero of a row, d out_i / d x_j = out_i / x_j. The
      // first zero itself gets the derivative computed with it replaced by
      // one; everything after it has a zero derivative.
      array incl = inclusive_ ? outputs[0] : cumprod(x, axis_, reverse_, true);
      array excl = inclusive_ ? cumprod(x, axis_, reverse_, false) : outputs[0];
      array zero = zeros_like(x);
      array inc_zero = incl == zero;
      array first_zero = logical_and(inc_zero, excl != zero);
      auto transposed = [&](const array& prods) { return cumsum(prods * g, axis_, !reverse_, inclusive_); };
      array with_one = cumprod(where(first_zero, ones_like(x), x), axis_, reverse_, inclusive_);
      // x is zero only where incl is (masked below); dividing by one there
      // keeps NaN out of the derivative of this rule (its transpose is the jvp).
      array regular = transposed(outputs[0]) / where(x == zero, ones_like(x), x);
      return {where(first_zero, transposed(with_one), where(inc_zero, zero, regular))};
    }
    case ScanOp::max:
    case ScanOp::min: {
      if (n == 0) return {zeros_like(x)};
      array owner = extreme_owner(op_, x, axis_, reverse_);
      if (inclusive_) return {scatter_add_axis(zeros_like(x), owner, g, axis_)};
      // Exclusive: position i holds the inclusive extreme of its neighbour
      // in scan order; the identity at the first position has no owner.
      array own = reverse_ ? slice_axis(owner, axis_, 1, n) : slice_axis(owner, axis_, 0, n - 1);
      array gg = reverse_ ? slice_axis(g, axis_, 0, n - 1) : slice_axis(g, axis_, 1, n);
      return {scatter_add_axis(zeros_like(x), own, gg, axis_)};
    }
  }
  return {zeros_like(x)};
}

std::vector<array> Scan::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                             const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  const array& x = primals[0];
  const array& t = tan[0];
  int n = x.shape(axis_);
  switch (op_) {
    case ScanOp::sum: return {cumsum(t, axis_, reverse_, inclusive_)};
    case ScanOp::logaddexp: {
      // t_out_i = sum_j exp(x_j - out_i) t_j over the covered j, split by
      // sign; positions covering nothing (-inf) have a zero tangent.
      array y = logcumsumexp(x, axis_, reverse_, inclusive_);
      array pos = exp(logcumsumexp(x + log_part(t, true), axis_, reverse_, inclusive_) - y);
      array neg = exp(logcumsumexp(x + log_part(t, false), axis_, reverse_, inclusive_) - y);
      array ninf = full_like(y, -std::numeric_limits<double>::infinity());
      return {where(y == ninf, zeros_like(y), pos - neg)};
    }
    case ScanOp::prod: {
      // The vjp is linear in the cotangent: its transpose (the vjp of the
      // vjp) applied to t is the jvp, exact at zeros too.
      array y = cumprod(x, axis_, reverse_, inclusive_);
      auto back = [&](const std::vector<array>& u) { return vjp(primals, u, {0}, {y}); };
      return kiln::vjp(back, {zeros_like(y)}, {t}).second;
    }
    case ScanOp::max:
    case ScanOp::min: {
      if (n == 0) return {t};
      array owner = extreme_owner(op_, x, axis_, reverse_);
      array moved = take_along_axis(t, owner, axis_);
      if (inclusive_) return {moved};
      array zero = zeros_like(slice_axis(t, axis_, 0, 1));
      return {reverse_ ? concatenate({slice_axis(moved, axis_, 1, n), zero}, axis_)
                       : concatenate({zero, slice_axis(moved, axis_, 0, n - 1)}, axis_)};
    }
  }
  return {t};
}

std::pair<std::vector<array>, std::vector<int>> Scan::vmap(const std::vector<array>& inputs,
                                                           const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  array x = detail::batch_first(inputs[0], axes[0]);
  return {{scan_like(op_, x, axis_ + 1, reverse_, inclusive_)}, {0}};
}
std::vector<Shape> Scan::output_shapes(const std::vector<array>& inputs) { return {inputs[0].shape()}; }
bool Scan::is_equivalent(const Primitive& o) const {
  auto* p = dynamic_cast<const Scan*>(&o);
  return p && p->op_ == op_ && p->axis_ == axis_ && p->reverse_ == reverse_ && p->inclusive_ == inclusive_;
}
std::string Scan::describe() const {
  return std::string(scan_op_name(op_)) + "(axis " + std::to_string(axis_) + (reverse_ ? ", reverse" : "") +
         (inclusive_ ? "" : ", exclusive") + ")";
}

}  // namespace kiln
