// kiln::linalg ops (include/kiln/linalg.h): argument checks and the node
// of each decomposition; norms, solves, pinv, det, cross as compositions of
// ordinary ops and the decompositions, so their derivatives and batching
// come from those.
#include "kiln/linalg.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string>

#include "core/ops_util.h"
#include "core/primitives_linalg.h"
#include "kiln/ops.h"

namespace kiln::linalg {

namespace {

// GPU streams take the cuSOLVER path (src/backend/cuda/linalg.cu);
// KILN_GPU_LINALG=0 makes them refuse instead, as MLX's do (a way out
// should a cuSOLVER routine misbehave on some machine).
bool gpu_linalg_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_GPU_LINALG");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

void check_cpu(const char* op, Stream st) {
  if (st.device.type == Device::gpu && !gpu_linalg_enabled()) {
    throw Error(std::string("[") + op +
                "] runs on CPU streams only with KILN_GPU_LINALG=0; pass a CPU stream (e.g. Device::cpu) to run it");
  }
}

void check_float(const char* op, const array& a) {
  if (a.dtype() != float32 && a.dtype() != float64) {
    fail(op, std::string("needs float32 or float64 (Kiln also takes float64), got ") + dtype_name(a.dtype()), {&a});
  }
}

void check_matrix(const char* op, const array& a, bool square) {
  if (a.ndim() < 2) {
    fail(op, "needs an array of at least 2 dimensions, got " + std::to_string(a.ndim()), {&a});
  }
  if (square && a.shape(-1) != a.shape(-2)) {
    fail(op, "needs square matrices in the last two axes, got " + format_shape(a.shape()), {&a});
  }
}

// The usual checks of a decomposition; returns the stream.
Stream checked(const char* op, const array& a, bool square, StreamOrDevice s) {
  Stream st = to_stream(s);
  check_cpu(op, st);
  check_float(op, a);
  check_matrix(op, a, square);
  return st;
}

array mT(const array& a, Stream s) { return swapaxes(a, -1, -2, s); }

Dtype at_least_float(Dtype t) { return is_floating_point(t) ? t : promote_types(t, float32); }

double eps_of(Dtype t) {
  return t == float64 ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon();
}

array l2_norm(const array& a, const std::vector<int>& axes, bool keepdims, Stream s) {
  return sqrt(sum(square(astype(a, at_least_float(a.dtype()), s), s), axes, keepdims, s), s);
}

array vector_norm(const array& a, double ord, const std::vector<int>& axes, bool keepdims, Stream s) {
  Dtype t = at_least_float(a.dtype());
  const double inf = std::numeric_limits<double>::infinity();
  if (ord == 0.0) return astype(sum(not_equal(a, array(0), s), axes, keepdims, s), t, s);
  if (ord == 1.0) return astype(sum(abs(a, s), axes, keepdims, s), t, s);
  if (ord == 2.0) return l2_norm(a, axes, keepdims, s);
  if (ord == inf) return astype(max(abs(a, s), axes, keepdims, s), t, s);
  if (ord == -inf) return astype(min(abs(a, s), axes, keepdims, s), t, s);
  array p = power(abs(astype(a, t, s), s), array(ord, t), s);
  return power(sum(p, axes, keepdims, s), array(1.0 / ord, t), s);
}

// The matrices of (row, col) moved last, row axis second to last.
array matrices_last(const array& a, int row, int col, Stream s) {
  return row > col ? moveaxis(moveaxis(a, row, -1, s), col, -1, s) : moveaxis(moveaxis(a, col, -1, s), row, -2, s);
}

array singular_value_norm(const array& a, int row, int col, bool keepdims, bool largest, bool nuclear, Stream s) {
  array m = matrices_last(a, row, col, s);
  array sv = svd(m, false, s).at(0);
  array out = nuclear ? sum(sv, -1, false, s) : largest ? max(sv, -1, false, s) : min(sv, -1, false, s);
  if (keepdims) out = expand_dims(out, {std::min(row, col), std::max(row, col)}, s);
  return out;
}

std::pair<int, int> matrix_axes(const array& a, const std::vector<int>& axes) {
  int row = normalize_axis(axes[0], a.ndim(), "linalg::norm", a);
  int col = normalize_axis(axes[1], a.ndim(), "linalg::norm", a);
  if (row == col) fail("linalg::norm", "the two axes of a matrix norm must differ", {&a});
  return {row, col};
}

array matrix_norm(const array& a, double ord, const std::vector<int>& axes, bool keepdims, Stream s) {
  Dtype t = at_least_float(a.dtype());
  auto [row, col] = matrix_axes(a, axes);
  const double inf = std::numeric_limits<double>::infinity();
  // 1 / -1: max / min over columns of the column sums; inf / -inf: the same over rows.
  if (ord == 1.0 || ord == -1.0) {
    int c = col - (!keepdims && col > row);
    array sums = sum(abs(a, s), row, keepdims, s);
    return astype(ord > 0 ? max(sums, c, keepdims, s) : min(sums, c, keepdims, s), t, s);
  }
  if (ord == inf || ord == -inf) {
    int r = row - (!keepdims && row > col);
    array sums = sum(abs(a, s), col, keepdims, s);
    return astype(ord > 0 ? max(sums, r, keepdims, s) : min(sums, r, keepdims, s), t, s);
  }
  if (ord == 2.0 || ord == -2.0) {
    return singular_value_norm(astype(a, t, s), row, col, keepdims, ord > 0, false, s);
  }
  fail("linalg::norm", "invalid ord " + std::to_string(ord) + " for a matrix norm (1, -1, 2, -2, inf, -inf)", {&a});
}

std::vector<int> all_axes(const array& a) {
  std::vector<int> ax(a.ndim());
  std::iota(ax.begin(), ax.end(), 0);
  return ax;
}

}  // namespace

array norm(const array& a, const std::optional<std::vector<int>>& axis, bool keepdims, StreamOrDevice s) {
  Stream st = to_stream(s);
  if (!axis) {
    array out = l2_norm(flatten(a, st), {0}, keepdims, st);
    return keepdims ? reshape(out, Shape(a.ndim(), 1), st) : out;
  }
  if (axis->size() > 2) fail("linalg::norm", "takes at most 2 axes, got " + std::to_string(axis->size()), {&a});
  if (axis->size() == 2) matrix_axes(a, *axis);
  return l2_norm(a, *axis, keepdims, st);
}

array norm(const array& a, double ord, const std::optional<std::vector<int>>& axis, bool keepdims, StreamOrDevice s) {
  Stream st = to_stream(s);
  std::vector<int> ax = axis ? *axis : all_axes(a);
  if (ax.size() == 1) {
    normalize_axis(ax[0], a.ndim(), "linalg::norm", a);
    return vector_norm(a, ord, ax, keepdims, st);
  }
  if (ax.size() == 2) return matrix_norm(a, ord, ax, keepdims, st);
  fail("linalg::norm", "an order needs 1 axis (vector norm) or 2 (matrix norm), got " + std::to_string(ax.size()),
       {&a});
}

array norm(const array& a, const std::string& ord, const std::optional<std::vector<int>>& axis, bool keepdims,
           StreamOrDevice s) {
  Stream st = to_stream(s);
  std::vector<int> ax = axis ? *axis : all_axes(a);
  if (ax.size() != 2) {
    fail("linalg::norm", "norm '" + ord + "' is a matrix norm (2 axes), got " + std::to_string(ax.size()) + " axes",
         {&a});
  }
  if (ord == "f" || ord == "fro") {
    matrix_axes(a, ax);
    return l2_norm(a, ax, keepdims, st);
  }
  if (ord == "nuc") {
    auto [row, col] = matrix_axes(a, ax);
    return singular_value_norm(astype(a, at_least_float(a.dtype()), st), row, col, keepdims, true, true, st);
  }
  fail("linalg::norm", "invalid ord '" + ord + "' for a matrix norm (\"fro\", \"f\", \"nuc\")", {&a});
}

std::pair<array, array> qr(const array& a, StreamOrDevice s) {
  Stream st = checked("linalg::qr", a, false, s);
  int k = std::min(a.shape(-2), a.shape(-1));
  Shape q = a.shape(), r = a.shape();
  q.back() = k;
  r[r.size() - 2] = k;
  auto out = array::make_arrays({q, r}, {a.dtype(), a.dtype()}, std::make_shared<QRF>(st), {a});
  return {out[0], out[1]};
}

std::vector<array> svd(const array& a, bool compute_uv, StreamOrDevice s) {
  Stream st = checked("linalg::svd", a, false, s);
  int m = a.shape(-2), n = a.shape(-1);
  Shape sv(a.shape().begin(), a.shape().end() - 1);
  sv.back() = std::min(m, n);
  auto p = std::make_shared<SVD>(st, compute_uv);
  if (!compute_uv) return array::make_arrays({sv}, {a.dtype()}, p, {a});
  Shape u = a.shape(), vt = a.shape();
  u.back() = m;
  vt[vt.size() - 2] = n;
  return array::make_arrays({u, sv, vt}, {a.dtype(), a.dtype(), a.dtype()}, p, {a});
}

array inv(const array& a, StreamOrDevice s) {
  Stream st = checked("linalg::inv", a, true, s);
  return array::make_arrays({a.shape()}, {a.dtype()}, std::make_shared<Inverse>(st, false), {a})[0];
}

array tri_inv(const array& a, bool upper, StreamOrDevice s) {
  Stream st = checked("linalg::tri_inv", a, true, s);
  auto lower = [&](const array& x) {
    return array::make_arrays({x.shape()}, {x.dtype()}, std::make_shared<Inverse>(st, true), {x})[0];
  };
  return upper ? mT(lower(mT(a, st)), st) : lower(a);
}

array cholesky(const array& a, bool upper, StreamOrDevice s) {
  Stream st = checked("linalg::cholesky", a, true, s);
  auto lower = [&](const array& x) {
    return array::make_arrays({x.shape()}, {x.dtype()}, std::make_shared<Cholesky>(st), {x})[0];
  };
  return upper ? mT(lower(mT(a, st)), st) : lower(a);
}

array pinv(const array& a, StreamOrDevice s) {
  Stream st = checked("linalg::pinv", a, false, s);
  int m = a.shape(-2), n = a.shape(-1), k = std::min(m, n);
  if (a.size() == 0) {
    Shape out = a.shape();
    std::swap(out[out.size() - 1], out[out.size() - 2]);
    return zeros(out, a.dtype(), st);
  }
  auto usv = svd(a, true, st);
  Shape start(a.ndim(), 0), stop = a.shape();
  stop[a.ndim() - 2] = m;
  stop[a.ndim() - 1] = k;
  array ut = mT(slice(usv[0], start, stop, st), st);  // [..., k, m]
  stop[a.ndim() - 2] = k;
  stop[a.ndim() - 1] = n;
  array v = mT(slice(usv[2], start, stop, st), st);  // [..., n, k]
  array sv = expand_dims(usv[1], -2, st);
  array cutoff = multiply(array(10.0 * std::max(m, n) * eps_of(a.dtype()), a.dtype()), max(sv, -1, true, st), st);
  array rs = where(greater(sv, cutoff, st), divide(array(1.0, a.dtype()), sv, st), array(0.0, a.dtype()), st);
  return matmul(multiply(v, rs, st), ut, st);
}

array cholesky_inv(const array& a, bool upper, StreamOrDevice s) {
  Stream st = checked("linalg::cholesky_inv", a, true, s);
  array li = tri_inv(a, upper, st);
  return upper ? matmul(li, mT(li, st), st) : matmul(mT(li, st), li, st);
}

namespace detail {
std::vector<array> lu_factor_all(const array& a, Stream s) {
  int m = a.shape(-2), n = a.shape(-1);
  Shape piv(a.shape().begin(), a.shape().end() - 1);
  piv.back() = std::min(m, n);
  Shape rows(a.shape().begin(), a.shape().end() - 1);
  return array::make_arrays({a.shape(), piv, rows}, {a.dtype(), uint32, uint32}, std::make_shared<LUF>(s), {a});
}
}  // namespace detail

std::vector<array> lu(const array& a, StreamOrDevice s) {
  Stream st = checked("linalg::lu", a, false, s);
  auto f = detail::lu_factor_all(a, st);
  int m = a.shape(-2), n = a.shape(-1), k = std::min(m, n);
  array l = tril(f[0], -1, st), u = triu(f[0], 0, st);
  if (n != k) {
    Shape stop = l.shape();
    stop.back() = k;
    l = slice(l, Shape(l.ndim(), 0), stop, st);
  } else if (m != k) {
    Shape stop = u.shape();
    stop[u.ndim() - 2] = k;
    u = slice(u, Shape(u.ndim(), 0), stop, st);
  }
  return {f[2], add(l, eye(m, k, 0, a.dtype(), st), st), u};
}

std::pair<array, array> lu_factor(const array& a, StreamOrDevice s) {
  Stream st = checked("linalg::lu_factor", a, false, s);
  auto f = detail::lu_factor_all(a, st);
  return {f[0], f[1]};
}

namespace {
// The checks of solve and solve_triangular; returns the common dtype.
Dtype check_solve(const char* op, const array& a, const array& b, Stream st) {
  check_cpu(op, st);
  if (a.ndim() < 2) fail(op, "the first input needs at least 2 dimensions", {&a, &b});
  if (b.ndim() < 1) fail(op, "the second input needs at least 1 dimension", {&a, &b});
  if (a.shape(-1) != a.shape(-2)) fail(op, "the first input must be square matrices", {&a, &b});
  int rows = b.ndim() > 1 ? b.shape(-2) : b.shape(-1);
  if (a.shape(-1) != rows) {
    fail(op, "the matrices have " + std::to_string(a.shape(-1)) + " columns but the right-hand side has " +
                 std::to_string(rows) + " rows",
         {&a, &b});
  }
  Dtype t = promote_types(a.dtype(), b.dtype());
  if (t != float32 && t != float64) {
    fail(op, std::string("the inputs must promote to float32 or float64, got ") + dtype_name(t), {&a, &b});
  }
  return t;
}

// a's inverse applied to b (a vector b as one column).
array apply(const array& a_inv, const array& b, Stream st) {
  if (b.ndim() > 1) return matmul(a_inv, b, st);
  return squeeze(matmul(a_inv, expand_dims(b, -1, st), st), -1, st);
}
}  // namespace

array solve(const array& a, const array& b, StreamOrDevice s) {
  Stream st = to_stream(s);
  Dtype t = check_solve("linalg::solve", a, b, st);
  array at = astype(a, t, st), bt = astype(b, t, st);
  auto f = detail::lu_factor_all(at, st);
  int n = a.shape(-1);
  // a = (L U)[rows]: x = U^-1 L^-1 Pt b with Pt[j, i] = (rows[i] == j).
  array pt = astype(equal(expand_dims(f[2], -2, st), reshape(arange(0, n, uint32, st), {n, 1}, st), st), t, st);
  array l = add(tril(f[0], -1, st), eye(n, t, st), st);
  array u = triu(f[0], 0, st);
  array inverse = matmul(tri_inv(u, true, st), matmul(tri_inv(l, false, st), pt, st), st);
  return apply(inverse, bt, st);
}

array solve_triangular(const array& a, const array& b, bool upper, StreamOrDevice s) {
  Stream st = to_stream(s);
  Dtype t = check_solve("linalg::solve_triangular", a, b, st);
  return apply(tri_inv(astype(a, t, st), upper, st), astype(b, t, st), st);
}

array cross(const array& a, const array& b, int axis, StreamOrDevice s) {
  Stream st = to_stream(s);
  for (const array* x : {&a, &b}) {
    int ax = normalize_axis(axis, x->ndim(), "linalg::cross", *x);
    if (x->shape(ax) != 2 && x->shape(ax) != 3) {
      fail("linalg::cross", "the axis must have size 2 or 3 in both inputs", {&a, &b});
    }
  }
  int na = a.shape(axis < 0 ? axis + a.ndim() : axis), nb = b.shape(axis < 0 ? axis + b.ndim() : axis);
  Dtype t = promote_types(a.dtype(), b.dtype());
  Shape sa = a.shape(), sb = b.shape();
  sa[axis < 0 ? axis + a.ndim() : axis] = 3;
  sb[axis < 0 ? axis + b.ndim() : axis] = 3;
  Shape out = broadcast_shapes(sa, sb, "linalg::cross", {&a, &b});
  int ax = axis < 0 ? axis + static_cast<int>(out.size()) : axis;
  auto parts = [&](const array& x, int size) {
    Shape shape = out;
    shape[ax] = size;
    auto p = split(broadcast_to(astype(x, t, st), shape, st), size, ax, st);
    if (size == 2) p.push_back(zeros_like(p[0], st));
    return p;
  };
  auto pa = parts(a, na), pb = parts(b, nb);
  auto term = [&](int i, int j) { return subtract(multiply(pa[i], pb[j], st), multiply(pa[j], pb[i], st), st); };
  return concatenate({term(1, 2), term(2, 0), term(0, 1)}, ax, st);
}

namespace {
Stream check_eig(const char* op, const array& a, StreamOrDevice s) { return checked(op, a, true, s); }
}  // namespace

std::pair<array, array> eig(const array& a, StreamOrDevice s) {
  Stream st = check_eig("linalg::eig", a, s);
  Shape w(a.shape().begin(), a.shape().end() - 1);
  auto out = array::make_arrays({w, a.shape()}, {complex64, complex64}, std::make_shared<Eig>(st, true), {a});
  return {out[0], out[1]};
}

array eigvals(const array& a, StreamOrDevice s) {
  Stream st = check_eig("linalg::eigvals", a, s);
  Shape w(a.shape().begin(), a.shape().end() - 1);
  return array::make_arrays({w}, {complex64}, std::make_shared<Eig>(st, false), {a})[0];
}

namespace {
array lower_of(const array& a, const std::string& uplo, const char* op, Stream st) {
  if (uplo != "L" && uplo != "U") fail(op, "UPLO must be \"L\" or \"U\", got \"" + uplo + "\"", {&a});
  return uplo == "U" ? mT(a, st) : a;
}
}  // namespace

array eigvalsh(const array& a, std::string UPLO, StreamOrDevice s) {
  Stream st = check_eig("linalg::eigvalsh", a, s);
  array x = lower_of(a, UPLO, "linalg::eigvalsh", st);
  Shape w(a.shape().begin(), a.shape().end() - 1);
  return array::make_arrays({w}, {a.dtype()}, std::make_shared<Eigh>(st, false), {x})[0];
}

std::pair<array, array> eigh(const array& a, std::string UPLO, StreamOrDevice s) {
  Stream st = check_eig("linalg::eigh", a, s);
  array x = lower_of(a, UPLO, "linalg::eigh", st);
  Shape w(a.shape().begin(), a.shape().end() - 1);
  auto out = array::make_arrays({w, a.shape()}, {a.dtype(), a.dtype()}, std::make_shared<Eigh>(st, true), {x});
  return {out[0], out[1]};
}

namespace {
Stream check_det(const char* op, const array& a, StreamOrDevice s) {
  Stream st = to_stream(s);
  check_cpu(op, st);
  check_matrix(op, a, true);
  return st;
}

// a[..., i, j] for the closed forms of small determinants.
array entry(const array& a, int i, int j, Stream st) {
  Shape start(a.ndim(), 0), stop = a.shape();
  start[a.ndim() - 2] = i;
  stop[a.ndim() - 2] = i + 1;
  start[a.ndim() - 1] = j;
  stop[a.ndim() - 1] = j + 1;
  return squeeze(slice(a, start, stop, st), {-2, -1}, st);
}

// Determinants of 0x0 to 3x3 matrices by their closed forms.
array small_det(const array& a, Stream st) {
  int n = a.shape(-1);
  if (n == 0) return broadcast_to(array(1.0, a.dtype()), Shape(a.shape().begin(), a.shape().end() - 2), st);
  auto e = [&](int i, int j) { return entry(a, i, j, st); };
  auto cofactor = [&](int r0, int r1, int c0, int c1) {
    return subtract(multiply(e(r0, c0), e(r1, c1), st), multiply(e(r0, c1), e(r1, c0), st), st);
  };
  if (n == 1) return e(0, 0);
  if (n == 2) return cofactor(0, 1, 0, 1);
  return add(subtract(multiply(e(0, 0), cofactor(1, 2, 1, 2), st), multiply(e(0, 1), cofactor(1, 2, 0, 2), st), st),
             multiply(e(0, 2), cofactor(1, 2, 0, 1), st), st);
}

std::pair<array, array> lu_slogdet(const array& a, Stream st) {
  Dtype t = a.dtype();
  int n = a.shape(-1);
  auto f = detail::lu_factor_all(a, st);
  array d = diagonal(f[0], 0, -2, -1, st);
  // Each pivot that swapped two rows flips the sign, and so does each negative diagonal entry.
  array swaps = sum(not_equal(f[1], arange(0, n, uint32, st), st), -1, false, st);
  array negatives = sum(less(d, array(0.0, t), st), -1, false, st);
  array odd = equal(remainder(add(astype(swaps, int32, st), astype(negatives, int32, st), st), array(2), st),
                    array(1), st);
  array sgn = where(odd, array(-1.0, t), array(1.0, t), st);
  array logabs = sum(log(abs(d, st), st), -1, false, st);
  array singular = any(equal(d, array(0.0, t), st), -1, false, st);
  return {where(singular, array(0.0, t), sgn, st),
          where(singular, array(-std::numeric_limits<double>::infinity(), t), logabs, st)};
}
}  // namespace

std::pair<array, array> slogdet(const array& a, StreamOrDevice s) {
  Stream st = check_det("linalg::slogdet", a, s);
  array x = astype(a, at_least_float(a.dtype()), st);
  if (x.shape(-1) <= 3) {
    array d = small_det(x, st);
    return {sign(d, st), log(abs(d, st), st)};
  }
  check_float("linalg::slogdet", x);
  return lu_slogdet(x, st);
}

array det(const array& a, StreamOrDevice s) {
  Stream st = check_det("linalg::det", a, s);
  array x = astype(a, at_least_float(a.dtype()), st);
  if (x.shape(-1) <= 3) return small_det(x, st);
  check_float("linalg::det", x);
  auto [sgn, logabs] = lu_slogdet(x, st);
  return multiply(sgn, exp(logabs, st), st);
}

}  // namespace kiln::linalg
