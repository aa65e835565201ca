// Sorting, selection and scan ops (MLX's sort, argsort, partition,
// argpartition, topk, searchsorted, cumsum, cumprod, cummax, cummin,
// logcumsumexp). The flattened forms reshape to 1-d first, as MLX does.
#include <string>

#include "core/ops_util.h"
#include "core/primitives_sort.h"
#include "kiln/ops.h"

namespace kiln {

namespace {
array flat(const array& a, StreamOrDevice s) { return reshape(a, {static_cast<int>(a.size())}, s); }

// Complex numbers are not ordered (MLX's sort orders them
// lexicographically: a difference, documented in ops.h).
void check_real(const char* op, const array& a) {
  if (is_complex(a.dtype())) fail(op, "is not supported for complex64", {&a});
}

int checked_kth(const char* op, const array& a, int kth, int ax) {
  int n = a.shape(ax);
  int k = kth < 0 ? kth + n : kth;
  if (k < 0 || k >= n) {
    fail(op, "kth " + std::to_string(kth) + " is out of range for axis " + std::to_string(ax) + " of size " +
                 std::to_string(n),
         {&a});
  }
  return k;
}
}  // namespace

array sort(const array& a, int axis, StreamOrDevice s) {
  check_real("sort", a);
  int ax = normalize_axis(axis, a.ndim(), "sort", a);
  return make_node<Sort>(a.shape(), a.dtype(), {a}, to_stream(s), ax);
}
array sort(const array& a, StreamOrDevice s) { return sort(flat(a, s), 0, s); }

array argsort(const array& a, int axis, StreamOrDevice s) {
  check_real("argsort", a);
  int ax = normalize_axis(axis, a.ndim(), "argsort", a);
  return make_node<ArgSort>(a.shape(), uint32, {a}, to_stream(s), ax);
}
array argsort(const array& a, StreamOrDevice s) { return argsort(flat(a, s), 0, s); }

array partition(const array& a, int kth, int axis, StreamOrDevice s) {
  check_real("partition", a);
  int ax = normalize_axis(axis, a.ndim(), "partition", a);
  int k = checked_kth("partition", a, kth, ax);
  return make_node<Partition>(a.shape(), a.dtype(), {a}, to_stream(s), k, ax);
}
array partition(const array& a, int kth, StreamOrDevice s) { return partition(flat(a, s), kth, 0, s); }

array argpartition(const array& a, int kth, int axis, StreamOrDevice s) {
  check_real("argpartition", a);
  int ax = normalize_axis(axis, a.ndim(), "argpartition", a);
  int k = checked_kth("argpartition", a, kth, ax);
  return make_node<ArgPartition>(a.shape(), uint32, {a}, to_stream(s), k, ax);
}
array argpartition(const array& a, int kth, StreamOrDevice s) { return argpartition(flat(a, s), kth, 0, s); }

array topk(const array& a, int k, int axis, StreamOrDevice s) {
  check_real("topk", a);
  int ax = normalize_axis(axis, a.ndim(), "topk", a);
  int n = a.shape(ax);
  if (k < 0 || k > n) {
    fail("topk", "k " + std::to_string(k) + " is out of range for axis " + std::to_string(ax) + " of size " +
                     std::to_string(n),
         {&a});
  }
  if (k == n) return a;
  Stream st = to_stream(s);
  array part = partition(a, -k, ax, st);
  Shape start(a.ndim(), 0);
  start[ax] = n - k;
  return slice(part, start, a.shape(), st);
}
array topk(const array& a, int k, StreamOrDevice s) { return topk(flat(a, s), k, 0, s); }

array searchsorted(const array& sorted_sequence, const array& values, const std::string& side, StreamOrDevice s) {
  if (side != "left" && side != "right") {
    fail("searchsorted", "side must be \"left\" or \"right\", got \"" + side + "\"", {&sorted_sequence, &values});
  }
  if (sorted_sequence.ndim() != 1) {
    fail("searchsorted", "the sorted sequence must be 1-d, got " + std::to_string(sorted_sequence.ndim()) +
                             " dimensions",
         {&sorted_sequence, &values});
  }
  Stream st = to_stream(s);
  Dtype t = promote_types(sorted_sequence.dtype(), values.dtype());
  if (is_complex(t)) fail("searchsorted", "is not supported for complex64", {&sorted_sequence, &values});
  return make_node<SearchSorted>(values.shape(), uint32, {astype(sorted_sequence, t, st), astype(values, t, st)}, st,
                                 side == "right");
}

namespace {
array scan(ScanOp op, const array& a, int axis, bool reverse, bool inclusive, StreamOrDevice s) {
  const char* name = scan_op_name(op);
  int ax = normalize_axis(axis, a.ndim(), name, a);
  check_real(name, a);
  if (op == ScanOp::logaddexp && !is_floating_point(a.dtype())) {
    fail(name, std::string("needs a floating dtype, got ") + dtype_name(a.dtype()), {&a});
  }
  Dtype out = op == ScanOp::sum && a.dtype() == bool_ ? int32 : a.dtype();
  return make_node<Scan>(a.shape(), out, {a}, to_stream(s), op, ax, reverse, inclusive);
}
array cast_for(const array& a, std::optional<Dtype> dtype, StreamOrDevice s) {
  return dtype && *dtype != a.dtype() ? astype(a, *dtype, s) : a;
}
}  // namespace

array cumsum(const array& a, int axis, bool reverse, bool inclusive, std::optional<Dtype> dtype, StreamOrDevice s) {
  return scan(ScanOp::sum, cast_for(a, dtype, s), axis, reverse, inclusive, s);
}
array cumsum(const array& a, bool reverse, bool inclusive, std::optional<Dtype> dtype, StreamOrDevice s) {
  return cumsum(flat(a, s), 0, reverse, inclusive, dtype, s);
}
array cumprod(const array& a, int axis, bool reverse, bool inclusive, std::optional<Dtype> dtype, StreamOrDevice s) {
  return scan(ScanOp::prod, cast_for(a, dtype, s), axis, reverse, inclusive, s);
}
array cumprod(const array& a, bool reverse, bool inclusive, std::optional<Dtype> dtype, StreamOrDevice s) {
  return cumprod(flat(a, s), 0, reverse, inclusive, dtype, s);
}
array cummax(const array& a, int axis, bool reverse, bool inclusive, StreamOrDevice s) {
  return scan(ScanOp::max, a, axis, reverse, inclusive, s);
}
array cummax(const array& a, bool reverse, bool inclusive, StreamOrDevice s) {
  return cummax(flat(a, s), 0, reverse, inclusive, s);
}
array cummin(const array& a, int axis, bool reverse, bool inclusive, StreamOrDevice s) {
  return scan(ScanOp::min, a, axis, reverse, inclusive, s);
}
array cummin(const array& a, bool reverse, bool inclusive, StreamOrDevice s) {
  return cummin(flat(a, s), 0, reverse, inclusive, s);
}
array logcumsumexp(const array& a, int axis, bool reverse, bool inclusive, StreamOrDevice s) {
  return scan(ScanOp::logaddexp, a, axis, reverse, inclusive, s);
}
array logcumsumexp(const array& a, bool reverse, bool inclusive, StreamOrDevice s) {
  return logcumsumexp(flat(a, s), 0, reverse, inclusive, s);
}

}  // namespace kiln
