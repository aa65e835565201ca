// Matrix building and contraction ops (MLX's tri, tril, triu, diag,
// diagonal, trace, identity, tensordot, outer, inner, kron, addmm), composed
// from existing ops so they run on every backend and inherit every
// transformation rule of the ops they are built from.
#include <algorithm>
#include <numeric>

#include "core/ops_util.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

// The diagonal's length for a [n1, n2] plane and an offset.
int diagonal_size(int n1, int n2, int offset) {
  int off1 = std::max(-offset, 0), off2 = std::max(offset, 0);
  return std::max(0, std::min(n1 - off1, n2 - off2));
}

}  // namespace

array tri(int n, int m, int k, Dtype type, StreamOrDevice s) {
  if (n < 0 || m < 0) {
    throw Error("[tri] dimensions must be non-negative, got " + std::to_string(n) + " x " + std::to_string(m));
  }
  Stream st = to_stream(s);
  // Row i keeps the columns j <= i + k.
  array rows = reshape(arange(0, n, 1, st), {n, 1}, st);
  array cols = reshape(arange(0, m, 1, st), {1, m}, st);
  return astype(less_equal(cols, add(rows, array(k), st), st), type, st);
}
array tri(int n, Dtype type, StreamOrDevice s) { return tri(n, n, 0, type, s); }

array tril(array x, int k, StreamOrDevice s) {
  if (x.ndim() < 2) fail("tril", "needs an array of at least 2 dimensions", {&x});
  Stream st = to_stream(s);
  array mask = tri(x.shape(-2), x.shape(-1), k, bool_, st);
  return where(mask, x, array(0, x.dtype()), st);
}

array triu(array x, int k, StreamOrDevice s) {
  if (x.ndim() < 2) fail("triu", "needs an array of at least 2 dimensions", {&x});
  Stream st = to_stream(s);
  array mask = tri(x.shape(-2), x.shape(-1), k - 1, bool_, st);
  return where(mask, array(0, x.dtype()), x, st);
}

array identity(int n, Dtype dtype, StreamOrDevice s) { return eye(n, n, 0, dtype, s); }
array identity(int n, StreamOrDevice s) { return eye(n, n, 0, float32, s); }

array diagonal(const array& a, int offset, int axis1, int axis2, StreamOrDevice s) {
  if (a.ndim() < 2) fail("diagonal", "needs an array of at least 2 dimensions", {&a});
  int ax1 = normalize_axis(axis1, a.ndim(), "diagonal", a);
  int ax2 = normalize_axis(axis2, a.ndim(), "diagonal", a);
  if (ax1 == ax2) fail("diagonal", "axis1 and axis2 are the same axis " + std::to_string(ax1), {&a});
  Stream st = to_stream(s);
  int n1 = a.shape(ax1), n2 = a.shape(ax2);
  int size = diagonal_size(n1, n2, offset);
  // Move the two axes last, merge them, and take the elements i * (n2 + 1)
  // from the diagonal's first element: the other axes come first and the
  // diagonal last, as in numpy and MLX.
  std::vector<int> perm;
  for (int d = 0; d < a.ndim(); ++d) {
    if (d != ax1 && d != ax2) perm.push_back(d);
  }
  perm.push_back(ax1);
  perm.push_back(ax2);
  Shape merged;
  for (size_t i = 0; i + 2 < perm.size(); ++i) merged.push_back(a.shape(perm[i]));
  int64_t plane = static_cast<int64_t>(n1) * n2;
  if (plane > INT32_MAX) fail("diagonal", "the diagonal plane has more than 2^31-1 elements", {&a});
  merged.push_back(static_cast<int>(plane));
  array flat = reshape(transpose(a, perm, st), merged, st);
  int64_t first = static_cast<int64_t>(std::max(-offset, 0)) * n2 + std::max(offset, 0);
  array idx = add(multiply(arange(0, size, 1, st), array(n2 + 1), st), array(static_cast<int>(size ? first : 0)), st);
  return take(flat, idx, static_cast<int>(merged.size()) - 1, st);
}

array diag(const array& a, int k, StreamOrDevice s) {
  if (a.ndim() == 2) return diagonal(a, k, 0, 1, s);
  if (a.ndim() != 1) fail("diag", "needs a 1-d or 2-d array", {&a});
  Stream st = to_stream(s);
  int n = static_cast<int>(a.size()) + std::abs(k);
  // Row i holds v[i] on column i + k, where v is a padded with |k| zeros on
  // the side the diagonal leaves.
  std::pair<int, int> widths = k >= 0 ? std::pair{0, k} : std::pair{-k, 0};
  array v = reshape(pad(a, {widths}, array(0, a.dtype()), st), {n, 1}, st);
  return where(eye(n, n, k, bool_, st), v, array(0, a.dtype()), st);
}

array trace(const array& a, int offset, int axis1, int axis2, Dtype dtype, StreamOrDevice s) {
  if (a.ndim() < 2) fail("trace", "needs an array of at least 2 dimensions", {&a});
  int ax1 = normalize_axis(axis1, a.ndim(), "trace", a);
  int ax2 = normalize_axis(axis2, a.ndim(), "trace", a);
  if (ax1 == ax2) fail("trace", "axis1 and axis2 are the same axis " + std::to_string(ax1), {&a});
  Stream st = to_stream(s);
  return sum(astype(diagonal(a, offset, ax1, ax2, st), dtype, st), -1, false, st);
}
array trace(const array& a, int offset, int axis1, int axis2, StreamOrDevice s) {
  return trace(a, offset, axis1, axis2, a.dtype(), s);
}
array trace(const array& a, StreamOrDevice s) { return trace(a, 0, 0, 1, a.dtype(), s); }

array tensordot(const array& a, const array& b, const std::vector<int>& axes_a, const std::vector<int>& axes_b,
                StreamOrDevice s) {
  if (axes_a.size() != axes_b.size()) {
    fail("tensordot", "axes_a " + format_shape(axes_a) + " and axes_b " + format_shape(axes_b) +
                          " must have the same length", {&a, &b});
  }
  std::vector<int> ca, cb;
  std::vector<bool> contracted_a(a.ndim(), false), contracted_b(b.ndim(), false);
  int64_t csize = 1;
  for (size_t i = 0; i < axes_a.size(); ++i) {
    int x = normalize_axis(axes_a[i], a.ndim(), "tensordot", a);
    int y = normalize_axis(axes_b[i], b.ndim(), "tensordot", b);
    if (contracted_a[x] || contracted_b[y]) fail("tensordot", "an axis is contracted twice", {&a, &b});
    if (a.shape(x) != b.shape(y)) {
      fail("tensordot", "contracted axes " + std::to_string(x) + " of a and " + std::to_string(y) +
                            " of b differ in size", {&a, &b});
    }
    contracted_a[x] = contracted_b[y] = true;
    ca.push_back(x);
    cb.push_back(y);
    csize *= a.shape(x);
  }
  // a -> [free_a, contracted], b -> [contracted, free_b], one matmul.
  std::vector<int> perm_a, perm_b;
  Shape out_shape;
  int64_t size_a = 1, size_b = 1;
  for (int d = 0; d < a.ndim(); ++d) {
    if (contracted_a[d]) continue;
    perm_a.push_back(d);
    out_shape.push_back(a.shape(d));
    size_a *= a.shape(d);
  }
  perm_a.insert(perm_a.end(), ca.begin(), ca.end());
  perm_b = cb;
  for (int d = 0; d < b.ndim(); ++d) {
    if (contracted_b[d]) continue;
    perm_b.push_back(d);
    out_shape.push_back(b.shape(d));
    size_b *= b.shape(d);
  }
  if (size_a > INT32_MAX || size_b > INT32_MAX || csize > INT32_MAX) {
    fail("tensordot", "a flattened operand dimension exceeds 2^31-1", {&a, &b});
  }
  Stream st = to_stream(s);
  array x = reshape(transpose(a, perm_a, st), {static_cast<int>(size_a), static_cast<int>(csize)}, st);
  array y = reshape(transpose(b, perm_b, st), {static_cast<int>(csize), static_cast<int>(size_b)}, st);
  return reshape(matmul(x, y, st), out_shape, st);
}

array tensordot(const array& a, const array& b, const int axis, StreamOrDevice s) {
  if (axis < 0 || axis > std::min(a.ndim(), b.ndim())) {
    fail("tensordot", "axis " + std::to_string(axis) + " must be in [0, min(a.ndim, b.ndim)]", {&a, &b});
  }
  // The last `axis` axes of a against the first `axis` axes of b.
  std::vector<int> axes_a, axes_b;
  for (int i = 0; i < axis; ++i) {
    axes_a.push_back(a.ndim() - axis + i);
    axes_b.push_back(i);
  }
  return tensordot(a, b, axes_a, axes_b, s);
}

array outer(const array& a, const array& b, StreamOrDevice s) {
  Stream st = to_stream(s);
  return multiply(reshape(a, {-1, 1}, st), reshape(b, {-1}, st), st);
}

array inner(const array& a, const array& b, StreamOrDevice s) {
  if (a.ndim() == 0 || b.ndim() == 0) return multiply(a, b, s);
  if (a.shape(-1) != b.shape(-1)) fail("inner", "the last dimensions of a and b differ", {&a, &b});
  return tensordot(a, b, std::vector<int>{-1}, std::vector<int>{-1}, s);
}

array kron(const array& a, const array& b, StreamOrDevice s) {
  if (a.size() == 0 || b.size() == 0) fail("kron", "inputs cannot be empty", {&a, &b});
  // [.., a_i, 1, ..] * [.., 1, b_i, ..] -> merge each (a_i, b_i) pair.
  int nd = std::max(a.ndim(), b.ndim());
  Shape sa(2 * nd, 1), sb(2 * nd, 1), out(nd, 1);
  for (int i = nd - 1, j = a.ndim() - 1; j >= 0; --i, --j) sa[2 * i] = a.shape(j);
  for (int i = nd - 1, j = b.ndim() - 1; j >= 0; --i, --j) sb[2 * i + 1] = b.shape(j);
  for (int i = 0; i < nd; ++i) {
    int64_t d = static_cast<int64_t>(sa[2 * i]) * sb[2 * i + 1];
    if (d > INT32_MAX) fail("kron", "a result dimension exceeds 2^31-1", {&a, &b});
    out[i] = static_cast<int>(d);
  }
  Stream st = to_stream(s);
  return reshape(multiply(reshape(a, sa, st), reshape(b, sb, st), st), out, st);
}

array addmm(array c, array a, array b, const float& alpha, const float& beta, StreamOrDevice s) {
  if (a.ndim() == 0 || b.ndim() == 0) fail("addmm", "a and b must have at least one dimension", {&c, &a, &b});
  Dtype t = promote_types(promote_types(a.dtype(), b.dtype()), c.dtype());
  if (!is_floating_point(t)) fail("addmm", "needs floating inputs", {&c, &a, &b});
  int ka = a.shape(-1), kb = b.ndim() == 1 ? b.shape(0) : b.shape(-2);
  if (ka != kb) fail("addmm", "inner dimensions of a and b differ", {&c, &a, &b});
  Stream st = to_stream(s);
  array ab = matmul(astype(a, t, st), astype(b, t, st), st);
  Shape bs = broadcast_shapes(ab.shape(), c.shape(), "addmm", {&c, &a, &b});
  if (bs != ab.shape()) fail("addmm", "c does not broadcast to the shape of a @ b " + format_shape(ab.shape()), {&c, &a, &b});
  // alpha (a @ b) + beta c, each scaled in the result's dtype.
  array scaled = multiply(ab, array(alpha, t), st);
  return add(scaled, multiply(astype(c, t, st), array(beta, t), st), st);
}

}  // namespace kiln
