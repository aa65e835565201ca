// Cases of kiln::linalg, einsum and random::multivariate_normal.
//
// Decompositions are unique only up to signs (QR, SVD, eigenvectors), so
// the cases return what is unique: the factors LAPACK's algorithm fixes
// (Q and R of Householder QR), or gauge-invariant products (U f(S) Vt,
// V f(w) Vt). The reference is either an identity (Q R == A, Q^T Q == I,
// A inv(A) == I, ...) in float64, or the op itself on the float64 inputs.
// Matrices are made well conditioned inside fn (a multiple of the identity
// added, or x x^T + n I for positive definite ones) so that every layout,
// broadcast rows included, keeps them invertible; the derivative checks
// then see smooth functions.
#include <cmath>
#include <limits>

#include "harness.h"

namespace kiln::harness {

namespace {

const std::vector<Dtype> kF32F64 = {float32, float64};

array mT(const array& a) { return swapaxes(a, -1, -2); }
// x + 2n I: diagonally dominant for entries in [-2, 2).
array well(const array& x) {
  int m = x.shape(-2), n = x.shape(-1);
  return add(x, multiply(eye(m, n, 0, x.dtype()), array(2.0 * std::max(m, n), x.dtype())));
}
array spd(const array& x) {
  int n = x.shape(-1);
  return add(matmul(x, mT(x)), multiply(eye(n, x.dtype()), array(static_cast<double>(n), x.dtype())));
}
array diag_matrix(const array& v) { return multiply(expand_dims(v, -1), eye(v.shape(-1), v.dtype())); }
// U[..., :k] and Vt[..., :k, :].
array first_columns(const array& a, int k) {
  Shape stop = a.shape();
  stop.back() = k;
  return slice(a, Shape(a.ndim(), 0), stop);
}
array first_rows(const array& a, int k) {
  Shape stop = a.shape();
  stop[stop.size() - 2] = k;
  return slice(a, Shape(a.ndim(), 0), stop);
}

// Row-major values of the identity batch of x's shape [..., n, n].
std::vector<double> identities(const Shape& shape) {
  int n = shape.back();
  size_t total = 1;
  for (int d : shape) total *= d;
  std::vector<double> out(total, 0.0);
  for (size_t i = 0; i < total; ++i) out[i] = (i % (n * n)) / n == (i % (n * n)) % n ? 1.0 : 0.0;
  return out;
}

}  // namespace

void register_linalg() {
  auto la = [](std::string op, std::string prim, std::string name, OpFn fn, std::vector<Input> inputs,
               std::vector<int> diff, RefFn ref = {}) {
    return add({.op = std::move(op),
                .primitive = std::move(prim),
                .name = std::move(name),
                .fn = std::move(fn),
                .inputs = std::move(inputs),
                .dtypes = kF32F64,
                .ref = std::move(ref),
                .diff = std::move(diff),
                .fd_rtol = 1e-4,
                .rtol_scale = 20.0});
  };
  using linalg::norm;

  // QR: the factors themselves, and the identities.
  la("linalg::qr", "QRF", "(4,3) factors", [](const Arrays& x) {
    auto [q, r] = linalg::qr(well(x[0]));
    return Arrays{q, r};
  }, {in({4, 3})}, {0});
  la("linalg::qr", "QRF", "(2,3,5) wide: QR == A, QtQ == I", [](const Arrays& x) {
    auto [q, r] = linalg::qr(x[0]);
    return Arrays{matmul(q, r), matmul(mT(q), q)};
  }, {in({2, 3, 5})}, {}, [](const Arrays& x) {
    return std::vector<std::vector<double>>{values(x[0]), identities({2, 3, 3})};
  });

  // SVD.
  la("linalg::svd", "SVD", "(4,4) S and U S^2 Vt", [](const Arrays& x) {
    auto usv = linalg::svd(x[0]);
    return Arrays{usv[1], matmul(matmul(usv[0], diag_matrix(square(usv[1]))), usv[2])};
  }, {in({4, 4})}, {0});
  la("linalg::svd", "SVD", "(2,5,3) U S Vt == A, UtU == I, VtV == I", [](const Arrays& x) {
    auto usv = linalg::svd(x[0]);
    array us = multiply(first_columns(usv[0], 3), expand_dims(usv[1], -2));
    return Arrays{matmul(us, first_rows(usv[2], 3)), matmul(mT(usv[0]), usv[0]), matmul(usv[2], mT(usv[2]))};
  }, {in({2, 5, 3})}, {}, [](const Arrays& x) {
    return std::vector<std::vector<double>>{values(x[0]), identities({2, 5, 5}), identities({2, 3, 3})};
  });
  la("linalg::svd", "SVD", "(5,3) values only", [](const Arrays& x) { return linalg::svd(x[0], false, {}); },
     {in({5, 3})}, {0});

  // Inverses.
  la("linalg::inv", "Inverse", "(2,4,4)", [](const Arrays& x) { return Arrays{linalg::inv(well(x[0]))}; },
     {in({2, 4, 4})}, {0});
  la("linalg::inv", "Inverse", "(3,3) A inv(A) == I",
     [](const Arrays& x) { return Arrays{matmul(well(x[0]), linalg::inv(well(x[0])))}; }, {in({3, 3})}, {},
     [](const Arrays&) { return std::vector<std::vector<double>>{identities({3, 3})}; });
  la("linalg::tri_inv", "Inverse", "(4,4) lower", [](const Arrays& x) { return Arrays{linalg::tri_inv(well(x[0]))}; },
     {in({4, 4})}, {0});
  la("linalg::tri_inv", "Inverse", "(2,3,3) upper",
     [](const Arrays& x) { return Arrays{linalg::tri_inv(well(x[0]), true)}; }, {in({2, 3, 3})}, {0});

  // Cholesky.
  la("linalg::cholesky", "Cholesky", "(4,4) lower", [](const Arrays& x) { return Arrays{linalg::cholesky(spd(x[0]))}; },
     {in({4, 4})}, {0});
  la("linalg::cholesky", "Cholesky", "(2,3,3) upper: UtU == A", [](const Arrays& x) {
    array u = linalg::cholesky(spd(x[0]), true);
    return Arrays{u, matmul(mT(u), u)};
  }, {in({2, 3, 3})}, {0});
  la("linalg::cholesky_inv", "Inverse", "(3,3)", [](const Arrays& x) {
    return Arrays{linalg::cholesky_inv(linalg::cholesky(spd(x[0])))};
  }, {in({3, 3})}, {0});
  la("linalg::cholesky_inv", "Inverse", "(3,3) upper", [](const Arrays& x) {
    return Arrays{linalg::cholesky_inv(linalg::cholesky(spd(x[0]), true), true)};
  }, {in({3, 3})}, {0});

  // Pseudo-inverse, LU, solves.
  la("linalg::pinv", "SVD", "(3,3)", [](const Arrays& x) { return Arrays{linalg::pinv(well(x[0]))}; },
     {in({3, 3})}, {0});
  la("linalg::pinv", "SVD", "(4,2) A pinv(A) A == A", [](const Arrays& x) {
    array a = well(x[0]);
    return Arrays{matmul(matmul(a, linalg::pinv(a)), a)};
  }, {in({4, 2})}, {});
  la("linalg::lu", "LUF", "(4,4) L U", [](const Arrays& x) {
    auto plu = linalg::lu(x[0]);
    return Arrays{plu[1], plu[2]};
  }, {in({4, 4})}, {0});
  // Equal rows (the broadcast layout) tie the pivots: float32 and float64
  // may then choose differently, so these return what does not depend on it.
  la("linalg::lu", "LUF", "(2,4,3) L[P] U == A", [](const Arrays& x) {
    auto plu = linalg::lu(x[0]);
    array lp = take_along_axis(plu[1], expand_dims(plu[0], -1), -2);
    return Arrays{matmul(lp, plu[2])};
  }, {in({2, 4, 3})}, {}, [](const Arrays& x) { return std::vector<std::vector<double>>{values(x[0])}; });
  la("linalg::lu_factor", "LUF", "(3,3)", [](const Arrays& x) { return Arrays{linalg::lu_factor(well(x[0])).first}; },
     {in({3, 3})}, {0});
  la("linalg::lu_factor", "LUF", "(3,5) pivots", [](const Arrays& x) {
    auto [lu, piv] = linalg::lu_factor(x[0]);
    return Arrays{lu, piv};
  }, {in({3, 5})}, {});
  la("linalg::solve", "LUF", "(4,4) x (4)", [](const Arrays& x) { return Arrays{linalg::solve(well(x[0]), x[1])}; },
     {in({4, 4}), in({4})}, {0, 1});
  la("linalg::solve", "LUF", "(2,3,3) x (3,2) A x == b", [](const Arrays& x) {
    return Arrays{matmul(well(x[0]), linalg::solve(well(x[0]), x[1]))};
  }, {in({2, 3, 3}), in({3, 2})}, {0, 1}, [](const Arrays& x) {
    auto b = values(x[1]);
    b.insert(b.end(), b.begin(), b.end());
    return std::vector<std::vector<double>>{b};
  });
  la("linalg::solve_triangular", "Inverse", "(4,4) x (4,2) lower",
     [](const Arrays& x) { return Arrays{linalg::solve_triangular(well(x[0]), x[1])}; }, {in({4, 4}), in({4, 2})},
     {0, 1});
  la("linalg::solve_triangular", "Inverse", "(3,3) x (3) upper",
     [](const Arrays& x) { return Arrays{linalg::solve_triangular(well(x[0]), x[1], true)}; }, {in({3, 3}), in({3})},
     {0, 1});

  // Symmetric eigenproblems (the lower or upper triangle of x).
  la("linalg::eigh", "Eigh", "(4,4) L", [](const Arrays& x) {
    auto [w, v] = linalg::eigh(x[0]);
    return Arrays{w, matmul(matmul(v, diag_matrix(power(w, array(3.0, w.dtype())))), mT(v))};
  }, {in({4, 4})}, {0});
  la("linalg::eigh", "Eigh", "(2,3,3) U: V diag(w) Vt == A", [](const Arrays& x) {
    auto [w, v] = linalg::eigh(x[0], "U");
    return Arrays{matmul(matmul(v, diag_matrix(w)), mT(v)), matmul(mT(v), v)};
  }, {in({2, 3, 3})}, {0}, [](const Arrays& x) {
    auto a = values(x[0]);
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < i; ++j) a[b * 9 + i * 3 + j] = a[b * 9 + j * 3 + i];
    return std::vector<std::vector<double>>{a, identities({2, 3, 3})};
  });
  la("linalg::eigvalsh", "Eigh", "(5,5)", [](const Arrays& x) { return Arrays{linalg::eigvalsh(x[0])}; },
     {in({5, 5})}, {0});
  la("linalg::eigvalsh", "Eigh", "(2,3,3) U", [](const Arrays& x) { return Arrays{linalg::eigvalsh(x[0], "U")}; },
     {in({2, 3, 3})}, {0});

  // Determinants: closed forms up to 3x3, LU beyond.
  la("linalg::det", "composite", "(2,3,3)", [](const Arrays& x) { return Arrays{linalg::det(x[0])}; },
     {in({2, 3, 3})}, {0});
  la("linalg::det", "LUF", "(5,5)", [](const Arrays& x) { return Arrays{linalg::det(well(x[0]))}; }, {in({5, 5})},
     {0});
  // A broadcast layout is singular (equal rows or columns), where the sign is
  // 0 or +-1 by rounding alone: a diagonal of mixed signs keeps every layout
  // regular and the sign negative or positive by the pivots.
  la("linalg::slogdet", "LUF", "(2,4,4)", [](const Arrays& x) {
    array d(std::vector<double>{8.0, 8.0, 8.0, -8.0}, {4}, x[0].dtype());
    auto [s, l] = linalg::slogdet(add(x[0], diag_matrix(d)));
    return Arrays{s, l};
  }, {in({2, 4, 4})}, {0});
  la("linalg::slogdet", "composite", "(2,2)", [](const Arrays& x) {
    auto [s, l] = linalg::slogdet(x[0]);
    return Arrays{s, l};
  }, {in({2, 2})}, {0});

  la("linalg::cross", "composite", "(4,3) x (3)", [](const Arrays& x) { return Arrays{linalg::cross(x[0], x[1])}; },
     {in({4, 3}), in({3})}, {0, 1});
  la("linalg::cross", "composite", "(2,5) x (3,5) axis 0",
     [](const Arrays& x) { return Arrays{linalg::cross(x[0], x[1], 0)}; }, {in({2, 5}), in({3, 5})}, {0, 1});

  // Norms.
  la("linalg::norm", "composite", "(3,4) flattened 2-norm", [](const Arrays& x) { return Arrays{norm(x[0])}; },
     {in({3, 4})}, {0});
  la("linalg::norm", "composite", "(3,4) axis 1 keepdims", [](const Arrays& x) { return Arrays{norm(x[0], 1, true)}; },
     {in({3, 4})}, {0});
  const double inf = std::numeric_limits<double>::infinity();
  for (double ord : {1.0, 3.0, 0.5, inf, -inf}) {
    la("linalg::norm", "composite", "(3,5) vector ord " + std::to_string(ord),
       [ord](const Arrays& x) { return Arrays{norm(x[0], ord, -1)}; }, {in({3, 5}, 0.2, 2.0)}, {0});
  }
  la("linalg::norm", "composite", "(6) ord 0", [](const Arrays& x) { return Arrays{norm(floor(x[0]), 0.0)}; },
     {in({6})}, {});
  for (double ord : {1.0, -1.0, inf, -inf}) {
    la("linalg::norm", "composite", "(2,3,4) matrix ord " + std::to_string(ord) + " axes 2,1",
       [ord](const Arrays& x) { return Arrays{norm(x[0], ord, std::vector<int>{2, 1})}; }, {in({2, 3, 4})}, {0});
  }
  la("linalg::norm", "SVD", "(3,4) ord 2 keepdims",
     [](const Arrays& x) { return Arrays{norm(x[0], 2.0, std::nullopt, true)}; }, {in({3, 4})}, {0});
  la("linalg::norm", "SVD", "(2,4,3) ord -2", [](const Arrays& x) { return Arrays{norm(x[0], -2.0, {{1, 2}})}; },
     {in({2, 4, 3})}, {0});
  la("linalg::norm", "composite", "(3,4) fro", [](const Arrays& x) { return Arrays{norm(x[0], "fro")}; },
     {in({3, 4})}, {0});
  la("linalg::norm", "SVD", "(4,2,3) nuc axes 0,2",
     [](const Arrays& x) { return Arrays{norm(x[0], "nuc", {{0, 2}})}; }, {in({4, 2, 3})}, {0});

  // einsum: a composite of matmul, transpose, diagonal and sum.
  auto es = [&](const std::string& sub, std::vector<Input> inputs, std::vector<int> diff) {
    la("einsum", "composite", sub, [sub](const Arrays& x) { return Arrays{einsum(sub, x)}; }, std::move(inputs),
       std::move(diff));
  };
  es("ij,jk->ik", {in({3, 4}), in({4, 5})}, {0, 1});
  es("ij,jk", {in({2, 3}), in({3, 2})}, {0, 1});
  es("ii->i", {in({4, 4})}, {0});
  es("ii", {in({3, 3})}, {0});
  es("ij->", {in({3, 4})}, {0});
  es("bij,bjk->bik", {in({2, 3, 4}), in({2, 4, 3})}, {0, 1});
  es("...ij,...jk->...ik", {in({2, 3, 4}), in({4, 2})}, {0, 1});
  es("i,j->ij", {in({3}), in({4})}, {0, 1});
  es("ij,jk,kl->il", {in({2, 5}), in({5, 3}), in({3, 4})}, {0, 1, 2});
  es("abc,cd,ba->d", {in({2, 3, 4}), in({4, 2}), in({3, 2})}, {0, 1, 2});
  es("iij,j->i", {in({3, 3, 2}), in({2})}, {0, 1});
  es("...i,...i", {in({1, 4}), in({3, 4})}, {0, 1});

  // multivariate_normal: the op itself on each key (batched by vmap), as the other random ops.
  add({.op = "random::multivariate_normal",
       .primitive = "RandomBits",
       .name = "(3) mean, (3,3) cov, shape (4)",
       .fn = [](const Arrays& x) {
         StreamContext cpu(Device::cpu);  // LAPACK and cuSOLVER may pick other signs in the SVD of cov
         array cov = array({2.0f, 0.5f, 0.1f, 0.5f, 1.0f, 0.2f, 0.1f, 0.2f, 0.5f}, {3, 3});
         return Arrays{random::multivariate_normal(array({1.0f, -1.0f, 0.0f}), cov, {4}, float32, x[0])};
       },
       .inputs = {Input{{2}, 0, 0, uint32, [] { return random::key(7); }}},
       .dtypes = {uint32},
       .layouts = false,
       .rtol_scale = 20.0});
}

}  // namespace kiln::harness
