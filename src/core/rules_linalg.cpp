// Transformation rules of the linalg primitives: the standard results of
// matrix calculus, written with ordinary ops (and the linalg ops, so that
// higher derivatives work). Notation: mT = transpose of the last two axes,
// F_ij = 1 / (w_j - w_i) off the diagonal and 0 on it.
//
// Cholesky and Eigh read the lower triangle of their input only. Their
// tangent input is the symmetric matrix that triangle defines,
//   sym_lower(dA) = tril(dA) + mT(tril(dA, -1)),
// and the cotangent of a symmetric-matrix formula S becomes the gradient
// with respect to the entries actually read, tril(S + mT(S), -1) + diag(S).
//
// vmap: every primitive batches over leading axes, so the batch axis moves
// to the front and the op runs once.
#include <algorithm>
#include <string>

#include "core/ops_util.h"
#include "core/primitives_linalg.h"
#include "core/transform_util.h"
#include "kiln/linalg.h"
#include "kiln/ops.h"

namespace kiln {

namespace {

array mT(const array& a) { return swapaxes(a, -1, -2); }
array eye_as(const array& a) { return eye(a.shape(-1), a.dtype()); }
// The diagonal of the last two axes as a vector, and back.
array diag_part(const array& a) { return diagonal(a, 0, -2, -1); }
array diag_matrix(const array& v) { return multiply(expand_dims(v, -1), eye(v.shape(-1), v.dtype())); }

array sym_lower(const array& d) { return add(tril(d), mT(tril(d, -1))); }
array lower_gradient(const array& s) {
  return add(tril(add(s, mT(s)), -1), multiply(s, eye_as(s)));
}

// F_ij = 1 / (w_j - w_i), i != j; 0 on the diagonal.
array gap_inverse(const array& w) {
  array i = eye(w.shape(-1), w.dtype());
  array gap = subtract(expand_dims(w, -2), expand_dims(w, -1));
  return divide(subtract(array(1.0, w.dtype()), i), add(gap, i));
}

[[noreturn]] void rule_fails(const char* op, const std::string& why, const array& a) {
  fail(op, why, {&a});
}

std::pair<std::vector<array>, std::vector<int>> leading(std::vector<array> outs) {
  return {outs, std::vector<int>(outs.size(), 0)};
}

}  // namespace

// ---- QRF (rows >= columns) ----
namespace {
void check_qr_rule(const array& a) {
  if (a.shape(-2) < a.shape(-1)) {
    rule_fails("linalg::qr", "derivatives need at least as many rows as columns", a);
  }
}
}  // namespace

std::vector<array> QRF::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                            const std::vector<int>&, const std::vector<array>& outputs) {
  detail::RuleStreamScope scope(stream());
  check_qr_rule(primals[0]);
  const array &q = outputs[0], &r = outputs[1];
  array m = subtract(matmul(r, mT(cot[1])), matmul(mT(cot[0]), q));
  array copyltu = add(tril(m), mT(tril(m, -1)));
  return {matmul(add(cot[0], matmul(q, copyltu)), mT(linalg::tri_inv(r, true)))};
}
std::vector<array> QRF::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                            const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  check_qr_rule(primals[0]);
  auto [q, r] = linalg::qr(primals[0]);
  array r_inv = linalg::tri_inv(r, true);
  array c = matmul(matmul(mT(q), tan[0]), r_inv);
  array omega = subtract(tril(c, -1), mT(tril(c, -1)));
  array dr = matmul(subtract(c, omega), r);
  array dq = subtract(matmul(tan[0], r_inv), matmul(q, subtract(c, omega)));
  return {dq, dr};
}
std::pair<std::vector<array>, std::vector<int>> QRF::vmap(const std::vector<array>& inputs,
                                                          const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  auto [q, r] = linalg::qr(detail::batch_first(inputs[0], axes[0]));
  return leading({q, r});
}
std::vector<Shape> QRF::output_shapes(const std::vector<array>& inputs) {
  Shape q = inputs[0].shape(), r = inputs[0].shape();
  int k = std::min(q[q.size() - 2], q.back());
  q.back() = k;
  r[r.size() - 2] = k;
  return {q, r};
}

// ---- SVD (with U and Vt: square matrices) ----
namespace {
// U[..., :k], Vt[..., :k, :] of the full factors.
std::pair<array, array> thin(const array& u, const array& vt, int k) {
  Shape su = u.shape(), sv = vt.shape();
  su.back() = k;
  sv[sv.size() - 2] = k;
  return {slice(u, Shape(u.ndim(), 0), su), slice(vt, Shape(vt.ndim(), 0), sv)};
}
void check_svd_rule(const array& a, bool uv) {
  if (uv && a.shape(-1) != a.shape(-2)) {
    rule_fails("linalg::svd", "derivatives of U and Vt need square matrices (compute_uv false has them for all)", a);
  }
}
}  // namespace

std::vector<array> SVD::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                            const std::vector<int>&, const std::vector<array>& outputs) {
  detail::RuleStreamScope scope(stream());
  const array& a = primals[0];
  check_svd_rule(a, compute_uv_);
  int k = std::min(a.shape(-2), a.shape(-1));
  if (!compute_uv_) {
    auto usv = linalg::svd(a, true, {});
    auto [u, vt] = thin(usv[0], usv[2], k);
    return {matmul(multiply(u, expand_dims(cot[0], -2)), vt)};
  }
  const array &u = outputs[0], &s = outputs[1], &vt = outputs[2];
  array f = gap_inverse(square(s));
  array j = multiply(f, matmul(mT(u), cot[0]));
  array kk = multiply(f, matmul(vt, mT(cot[2])));
  array sm = diag_matrix(s);
  array inner = add(add(diag_matrix(cot[1]), matmul(add(j, mT(j)), sm)), matmul(sm, add(kk, mT(kk))));
  return {matmul(matmul(u, inner), vt)};
}
std::vector<array> SVD::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                            const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  const array& a = primals[0];
  check_svd_rule(a, compute_uv_);
  int k = std::min(a.shape(-2), a.shape(-1));
  auto usv = linalg::svd(a, true, {});
  auto [u, vt] = thin(usv[0], usv[2], k);
  array dp = matmul(matmul(mT(u), tan[0]), mT(vt));
  array ds = diag_part(dp);
  if (!compute_uv_) return {ds};
  const array& s = usv[1];
  array f = gap_inverse(square(s));
  array sm = diag_matrix(s);
  array du = matmul(u, multiply(f, add(matmul(dp, sm), matmul(sm, mT(dp)))));
  array dv = matmul(mT(vt), multiply(f, add(matmul(sm, dp), matmul(mT(dp), sm))));
  return {du, ds, mT(dv)};
}
std::pair<std::vector<array>, std::vector<int>> SVD::vmap(const std::vector<array>& inputs,
                                                          const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  return leading(linalg::svd(detail::batch_first(inputs[0], axes[0]), compute_uv_, {}));
}
std::vector<Shape> SVD::output_shapes(const std::vector<array>& inputs) {
  const Shape& a = inputs[0].shape();
  int m = a[a.size() - 2], n = a.back();
  Shape sv(a.begin(), a.end() - 1);
  sv.back() = std::min(m, n);
  if (!compute_uv_) return {sv};
  Shape u = a, vt = a;
  u.back() = m;
  vt[vt.size() - 2] = n;
  return {u, sv, vt};
}

// ---- Inverse (general, or of the lower triangle) ----
std::vector<array> Inverse::vjp(const std::vector<array>&, const std::vector<array>& cot,
                                const std::vector<int>&, const std::vector<array>& outputs) {
  detail::RuleStreamScope scope(stream());
  array yt = mT(outputs[0]);
  array g = negative(matmul(matmul(yt, cot[0]), yt));
  return {tri_ ? tril(g) : g};
}
std::vector<array> Inverse::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                                const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  array y = tri_ ? linalg::tri_inv(primals[0]) : linalg::inv(primals[0]);
  return {negative(matmul(matmul(y, tri_ ? tril(tan[0]) : tan[0]), y))};
}
std::pair<std::vector<array>, std::vector<int>> Inverse::vmap(const std::vector<array>& inputs,
                                                              const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  array a = detail::batch_first(inputs[0], axes[0]);
  return leading({tri_ ? linalg::tri_inv(a) : linalg::inv(a)});
}
std::vector<Shape> Inverse::output_shapes(const std::vector<array>& inputs) { return {inputs[0].shape()}; }

// ---- Cholesky (lower) ----
namespace {
// Phi(X): the lower triangle with half the diagonal.
array phi(const array& x) { return subtract(tril(x), multiply(x, multiply(eye_as(x), array(0.5, x.dtype())))); }
}  // namespace

std::vector<array> Cholesky::vjp(const std::vector<array>&, const std::vector<array>& cot,
                                 const std::vector<int>&, const std::vector<array>& outputs) {
  detail::RuleStreamScope scope(stream());
  const array& l = outputs[0];
  array l_inv = linalg::tri_inv(l);
  array s = matmul(matmul(mT(l_inv), phi(matmul(mT(l), cot[0]))), l_inv);
  return {lower_gradient(s)};
}
std::vector<array> Cholesky::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                                 const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  array l = linalg::cholesky(primals[0]);
  array l_inv = linalg::tri_inv(l);
  return {matmul(l, phi(matmul(matmul(l_inv, sym_lower(tan[0])), mT(l_inv))))};
}
std::pair<std::vector<array>, std::vector<int>> Cholesky::vmap(const std::vector<array>& inputs,
                                                               const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  return leading({linalg::cholesky(detail::batch_first(inputs[0], axes[0]))});
}
std::vector<Shape> Cholesky::output_shapes(const std::vector<array>& inputs) { return {inputs[0].shape()}; }

// ---- Eigh (lower) ----
std::vector<array> Eigh::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                             const std::vector<int>&, const std::vector<array>& outputs) {
  detail::RuleStreamScope scope(stream());
  array w = outputs[0];
  array v = vectors_ ? outputs[1] : linalg::eigh(primals[0]).second;
  array inner = diag_matrix(cot[0]);
  if (vectors_) inner = add(inner, multiply(gap_inverse(w), matmul(mT(v), cot[1])));
  return {lower_gradient(matmul(matmul(v, inner), mT(v)))};
}
std::vector<array> Eigh::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                             const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  auto [w, v] = linalg::eigh(primals[0]);
  array m = matmul(matmul(mT(v), sym_lower(tan[0])), v);
  if (!vectors_) return {diag_part(m)};
  return {diag_part(m), matmul(v, multiply(gap_inverse(w), m))};
}
std::pair<std::vector<array>, std::vector<int>> Eigh::vmap(const std::vector<array>& inputs,
                                                           const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  array a = detail::batch_first(inputs[0], axes[0]);
  if (!vectors_) return leading({linalg::eigvalsh(a)});
  auto [w, v] = linalg::eigh(a);
  return leading({w, v});
}
std::vector<Shape> Eigh::output_shapes(const std::vector<array>& inputs) {
  Shape w(inputs[0].shape().begin(), inputs[0].shape().end() - 1);
  if (!vectors_) return {w};
  return {w, inputs[0].shape()};
}

// ---- LUF (square): a = (L U)[rows], so L U = a[argsort(rows)] ----
namespace {
void check_lu_rule(const array& a) {
  if (a.shape(-1) != a.shape(-2)) rule_fails("linalg::lu_factor", "derivatives need square matrices", a);
}
struct Factors {
  array l, l_inv, u_inv, u;
};
Factors factors(const array& lu) {
  array l = add(tril(lu, -1), eye_as(lu));
  array u = triu(lu);
  return {l, linalg::tri_inv(l), linalg::tri_inv(u, true), u};
}
array take_rows(const array& a, const array& rows) { return take_along_axis(a, expand_dims(rows, -1), -2); }
}  // namespace

std::vector<array> LUF::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                            const std::vector<int>&, const std::vector<array>& outputs) {
  detail::RuleStreamScope scope(stream());
  check_lu_rule(primals[0]);
  Factors f = factors(outputs[0]);
  array xbar = add(tril(matmul(mT(f.l), tril(cot[0], -1)), -1), triu(matmul(triu(cot[0]), mT(f.u))));
  array grad_factored = matmul(matmul(mT(f.l_inv), xbar), mT(f.u_inv));
  return {take_rows(grad_factored, stop_gradient(outputs[2]))};
}
std::vector<array> LUF::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                            const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  check_lu_rule(primals[0]);
  auto out = linalg::detail::lu_factor_all(primals[0], stream());
  Factors f = factors(out[0]);
  array da = take_rows(tan[0], stop_gradient(argsort(out[2], -1)));
  array x = matmul(matmul(f.l_inv, da), f.u_inv);
  array dlu = add(matmul(f.l, tril(x, -1)), matmul(triu(x), f.u));
  return {dlu, zeros(out[1].shape(), uint32), zeros(out[2].shape(), uint32)};
}
std::pair<std::vector<array>, std::vector<int>> LUF::vmap(const std::vector<array>& inputs,
                                                          const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  return leading(linalg::detail::lu_factor_all(detail::batch_first(inputs[0], axes[0]), stream()));
}
std::vector<Shape> LUF::output_shapes(const std::vector<array>& inputs) {
  const Shape& a = inputs[0].shape();
  Shape piv(a.begin(), a.end() - 1), rows(a.begin(), a.end() - 1);
  piv.back() = std::min(a[a.size() - 2], a.back());
  return {a, piv, rows};
}

// ---- Eig: batched over the leading axes; no derivatives yet ----
std::vector<array> Eig::vjp(const std::vector<array>& primals, const std::vector<array>&, const std::vector<int>&,
                            const std::vector<array>&) {
  rule_fails(vectors_ ? "linalg::eig" : "linalg::eigvals", "has no vjp rule yet", primals[0]);
}
std::vector<array> Eig::jvp(const std::vector<array>& primals, const std::vector<array>&, const std::vector<int>&) {
  rule_fails(vectors_ ? "linalg::eig" : "linalg::eigvals", "has no jvp rule yet", primals[0]);
}
std::pair<std::vector<array>, std::vector<int>> Eig::vmap(const std::vector<array>& inputs,
                                                          const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  array a = detail::batch_first(inputs[0], axes[0]);
  if (!vectors_) return leading({linalg::eigvals(a)});
  auto [w, v] = linalg::eig(a);
  return leading({w, v});
}
std::vector<Shape> Eig::output_shapes(const std::vector<array>& inputs) {
  Shape w(inputs[0].shape().begin(), inputs[0].shape().end() - 1);
  if (!vectors_) return {w};
  return {w, inputs[0].shape()};
}

}  // namespace kiln
