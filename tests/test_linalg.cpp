// kiln::linalg and einsum beyond the op harness: the defining identities of
// each decomposition on larger and batched inputs, numpy's conventions
// (orders of values, pivots, the permutation of lu), eval-time failures on
// singular / indefinite matrices, argument errors, einsum's parsing and
// path, and the moments of multivariate_normal.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "test_util.h"

namespace kiln {
namespace {

using test::random_array;
using test::to_double;

array mT(const array& a) { return swapaxes(a, -1, -2); }

// max |a - b| over the elements.
double max_diff(const array& a, const array& b) {
  auto x = to_double(a), y = to_double(broadcast_to(b, a.shape()));
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

array eye_batch(const Shape& batch, int n, Dtype t) {
  Shape s = batch;
  s.push_back(n);
  s.push_back(n);
  return broadcast_to(eye(n, t), s);
}

TEST(Linalg, QrIdentities) {
  for (Dtype t : {float32, float64}) {
    array a = random_array({3, 7, 5}, t);
    auto [q, r] = linalg::qr(a);
    double tol = t == float32 ? 1e-5 : 1e-12;
    EXPECT_EQ(q.shape(), (Shape{3, 7, 5}));
    EXPECT_EQ(r.shape(), (Shape{3, 5, 5}));
    EXPECT_LT(max_diff(matmul(q, r), a), tol * 10);
    EXPECT_LT(max_diff(matmul(mT(q), q), eye_batch({3}, 5, t)), tol * 10);
    EXPECT_LT(max_diff(tril(r, -1), zeros_like(r)), 1e-30);
  }
}

TEST(Linalg, SvdIdentitiesAndOrder) {
  array a = random_array({2, 4, 6}, float64);
  auto usv = linalg::svd(a);
  EXPECT_EQ(usv[0].shape(), (Shape{2, 4, 4}));
  EXPECT_EQ(usv[1].shape(), (Shape{2, 4}));
  EXPECT_EQ(usv[2].shape(), (Shape{2, 6, 6}));
  array vt4 = slice(usv[2], {0, 0, 0}, {2, 4, 6});
  EXPECT_LT(max_diff(matmul(multiply(usv[0], expand_dims(usv[1], -2)), vt4), a), 1e-12);
  EXPECT_LT(max_diff(matmul(usv[2], mT(usv[2])), eye_batch({2}, 6, float64)), 1e-12);
  auto s = to_double(usv[1]);
  for (int b = 0; b < 2; ++b) {
    for (int i = 0; i < 3; ++i) EXPECT_GE(s[b * 4 + i], s[b * 4 + i + 1]);
    EXPECT_GE(s[b * 4 + 3], 0.0);
  }
  auto only = linalg::svd(a, false, {});
  ASSERT_EQ(only.size(), 1u);
  EXPECT_LT(max_diff(only[0], usv[1]), 1e-12);
}

TEST(Linalg, InverseCholeskyEigh) {
  array x = random_array({2, 6, 6}, float64);
  array a = add(matmul(x, mT(x)), multiply(eye(6, float64), array(0.5)));
  EXPECT_LT(max_diff(matmul(a, linalg::inv(a)), eye_batch({2}, 6, float64)), 1e-10);
  array l = linalg::cholesky(a);
  EXPECT_LT(max_diff(matmul(l, mT(l)), a), 1e-10);
  array u = linalg::cholesky(a, true);
  EXPECT_LT(max_diff(u, mT(l)), 1e-12);
  EXPECT_LT(max_diff(linalg::cholesky_inv(l), linalg::inv(a)), 1e-8);
  EXPECT_LT(max_diff(linalg::tri_inv(l), linalg::inv(l)), 1e-10);
  EXPECT_LT(max_diff(linalg::tri_inv(u, true), linalg::inv(u)), 1e-10);
  auto [w, v] = linalg::eigh(a);
  EXPECT_LT(max_diff(matmul(multiply(v, expand_dims(w, -2)), mT(v)), a), 1e-10);
  auto wv = to_double(w);
  for (int i = 0; i < 5; ++i) EXPECT_LE(wv[i], wv[i + 1]);
  EXPECT_LT(max_diff(linalg::eigvalsh(a), w), 1e-10);
}

TEST(Linalg, TriangleReadersIgnoreTheOtherTriangle) {
  array x = random_array({4, 4}, float64);
  array a = add(matmul(x, mT(x)), eye(4, float64));
  array noisy_upper = add(a, triu(random_array({4, 4}, float64), 1));
  EXPECT_LT(max_diff(linalg::cholesky(noisy_upper), linalg::cholesky(a)), 1e-12);
  EXPECT_LT(max_diff(linalg::eigvalsh(noisy_upper), linalg::eigvalsh(a)), 1e-12);
  array noisy_lower = add(a, tril(random_array({4, 4}, float64), -1));
  EXPECT_LT(max_diff(linalg::eigvalsh(noisy_lower, "U"), linalg::eigvalsh(a)), 1e-12);
}

TEST(Linalg, LuPermutationAndSolve) {
  array a = random_array({3, 5, 5}, float64);
  auto plu = linalg::lu(a);
  array lp = take_along_axis(plu[1], expand_dims(plu[0], -1), -2);
  EXPECT_LT(max_diff(matmul(lp, plu[2]), a), 1e-12);
  // numpy/scipy convention: a = P L U with P[p[i], i] = 1, i.e. a = L[p] U.
  auto [lu, piv] = linalg::lu_factor(a);
  EXPECT_EQ(piv.dtype(), uint32);
  EXPECT_EQ(piv.shape(), (Shape{3, 5}));
  array b = random_array({5, 2}, float64);
  array xs = linalg::solve(a, b);
  EXPECT_LT(max_diff(matmul(a, xs), broadcast_to(b, {3, 5, 2})), 1e-10);
  array bv = random_array({5}, float64);
  array xv = linalg::solve(a, bv);
  EXPECT_EQ(xv.shape(), (Shape{3, 5}));
  EXPECT_LT(max_diff(squeeze(matmul(a, expand_dims(xv, -1)), -1), broadcast_to(bv, {3, 5})), 1e-10);
  array l = tril(a);
  EXPECT_LT(max_diff(matmul(l, linalg::solve_triangular(l, b)), broadcast_to(b, {3, 5, 2})), 1e-10);
}

TEST(Linalg, DetAndSlogdet) {
  array a = astype(array({2.0f, 1.0f, 0.0f, 0.0f, 1.0f, 3.0f, 0.0f, 0.0f, 0.0f, 0.0f, 4.0f, 1.0f,
                          0.0f, 0.0f, 2.0f, 1.0f},
                         {4, 4}),
                   float64);
  // Block diagonal: (2*3 - 1) * (4*1 - 2) = 10.
  EXPECT_NEAR(linalg::det(a).item<double>(), 10.0, 1e-12);
  array swapped = take(a, array({1, 0, 2, 3}), 0);
  auto [sgn, logabs] = linalg::slogdet(swapped);
  EXPECT_EQ(sgn.item<double>(), -1.0);
  EXPECT_NEAR(logabs.item<double>(), std::log(10.0), 1e-12);
  array singular = zeros({5, 5}, float64);
  auto [s0, l0] = linalg::slogdet(singular);
  EXPECT_EQ(s0.item<double>(), 0.0);
  EXPECT_EQ(l0.item<double>(), -std::numeric_limits<double>::infinity());
  EXPECT_NEAR(linalg::det(array({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2})).item<float>(), -2.0f, 1e-6);
}

TEST(Linalg, Norms) {
  array a = array({3.0f, -4.0f, 0.0f, 12.0f}, {2, 2});
  EXPECT_NEAR(linalg::norm(a).item<float>(), 13.0f, 1e-5);
  EXPECT_NEAR(linalg::norm(a, "fro").item<float>(), 13.0f, 1e-5);
  EXPECT_NEAR(linalg::norm(a, 1.0).item<float>(), 16.0f, 1e-5);                   // max column sum
  EXPECT_NEAR(linalg::norm(a, INFINITY).item<float>(), 12.0f, 1e-5);              // max row sum
  EXPECT_NEAR(linalg::norm(a, -INFINITY).item<float>(), 7.0f, 1e-5);
  EXPECT_NEAR(linalg::norm(flatten(a), 0.0).item<float>(), 3.0f, 1e-6);
  EXPECT_NEAR(linalg::norm(flatten(a), INFINITY).item<float>(), 12.0f, 1e-6);
  auto s = to_double(linalg::svd(a, false, {})[0]);
  EXPECT_NEAR(linalg::norm(a, 2.0).item<float>(), s[0], 1e-4);
  EXPECT_NEAR(linalg::norm(a, -2.0).item<float>(), s[1], 1e-4);
  EXPECT_NEAR(linalg::norm(a, "nuc").item<float>(), s[0] + s[1], 1e-4);
  EXPECT_EQ(linalg::norm(a, std::nullopt, true).shape(), (Shape{1, 1}));
  EXPECT_EQ(linalg::norm(random_array({2, 3, 4}), 2.0, {{0, 2}}, true).shape(), (Shape{1, 3, 1}));
  EXPECT_EQ(linalg::norm(array({1, 2, 2}, int32)).dtype(), float32);
}

TEST(Linalg, Cross) {
  array c = linalg::cross(array({1.0f, 0.0f, 0.0f}), array({0.0f, 1.0f, 0.0f}));
  EXPECT_EQ(to_double(c), (std::vector<double>{0, 0, 1}));
  array d = linalg::cross(array({1.0f, 2.0f}), array({3.0f, 4.0f, 5.0f}));
  EXPECT_EQ(to_double(d), (std::vector<double>{10, -5, -2}));
}

TEST(Linalg, FailuresAtEval) {
  array singular = array({1.0f, 2.0f, 2.0f, 4.0f}, {2, 2});
  EXPECT_THROW(linalg::inv(singular).eval(), Error);
  EXPECT_THROW(linalg::tri_inv(array({0.0f, 0.0f, 1.0f, 1.0f}, {2, 2})).eval(), Error);
  EXPECT_THROW(linalg::cholesky(array({1.0f, 2.0f, 2.0f, 1.0f}, {2, 2})).eval(), Error);
  // LU of a singular matrix completes.
  EXPECT_NO_THROW(linalg::lu_factor(singular).first.eval());
}

// A rotation by 90 degrees has eigenvalues +-i; a general matrix's pairs
// satisfy A v = w v (LAPACK's geev, complex64 results).
TEST(Linalg, EigOfGeneralMatrices) {
  array rot = array({0.0f, -1.0f, 1.0f, 0.0f}, {2, 2});
  array w = linalg::eigvals(rot);
  ASSERT_EQ(w.dtype(), complex64);
  EXPECT_TRUE(test::all_close(real(w), {0, 0}, 0, 1e-6));
  EXPECT_TRUE(test::all_close(imag(w), {1, -1}, 1e-6));
  for (Dtype t : {float32, float64}) {
    array a = test::random_array({3, 5, 5}, t);
    auto [vals, vecs] = linalg::eig(a);
    EXPECT_EQ(vals.shape(), (Shape{3, 5}));
    EXPECT_EQ(vecs.shape(), (Shape{3, 5, 5}));
    array r = abs(matmul(astype(a, complex64), vecs) - vecs * expand_dims(vals, -2));
    EXPECT_TRUE(test::all_close(r, std::vector<double>(75, 0.0), 0, 1e-4)) << dtype_name(t);
    EXPECT_TRUE(test::all_close(sum(square(abs(vecs)), -2), std::vector<double>(15, 1.0), 1e-5));
  }
  EXPECT_THROW(linalg::eig(eye(3), Device::gpu), Error);
}

TEST(Linalg, ArgumentErrors) {
  auto message = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { linalg::inv(zeros({3, 4})); }).find("linalg::inv"), std::string::npos);
  EXPECT_NE(message([] { linalg::qr(zeros({3})); }).find("(3) float32"), std::string::npos);
  EXPECT_NE(message([] { linalg::cholesky(zeros({3, 3}, int32)); }).find("int32"), std::string::npos);
  EXPECT_NE(message([] { linalg::eig(zeros({3, 4})); }).find("linalg::eig"), std::string::npos);
  EXPECT_NE(message([] { linalg::eigvals(zeros({3, 3}, int32)); }).find("int32"), std::string::npos);
  EXPECT_NE(message([] { linalg::eigh(zeros({3, 3}), "X"); }).find("UPLO"), std::string::npos);
  EXPECT_NE(message([] { linalg::solve(zeros({3, 3}), zeros({4})); }).find("linalg::solve"), std::string::npos);
  EXPECT_NE(message([] { linalg::norm(zeros({3, 3}), "nuc", {{0}}); }).find("linalg::norm"), std::string::npos);
  EXPECT_NE(message([] { linalg::norm(zeros({3, 3}), 3.0, {{0, 1}}); }).find("invalid ord"), std::string::npos);
  EXPECT_NE(message([] { linalg::cross(zeros({4}), zeros({3})); }).find("linalg::cross"), std::string::npos);
  EXPECT_NE(message([] { random::multivariate_normal(zeros({3}), zeros({2, 2}), {}, float32); })
                .find("multivariate_normal"),
            std::string::npos);
}

TEST(Linalg, GradOfSolveAndInv) {
  // d/db sum(solve(A, b)) = A^-T 1.
  array a = add(random_array({4, 4}, float64), multiply(eye(4, float64), array(6.0)));
  array b = random_array({4}, float64);
  array g = grad([&](const array& v) { return sum(linalg::solve(a, v)); })(b);
  array want = squeeze(matmul(mT(linalg::inv(a)), ones({4, 1}, float64)), -1);
  EXPECT_LT(max_diff(g, want), 1e-10);
  // vmap of inv over the last axis of a stack.
  array stack3 = random_array({4, 4, 3}, float64) + multiply(expand_dims(eye(4, float64), -1), array(6.0));
  array mapped = vmap([](const array& m) { return linalg::inv(m); }, 2)(stack3);
  for (int k = 0; k < 3; ++k) {
    array m = squeeze(slice(stack3, {0, 0, k}, {4, 4, k + 1}), -1);
    EXPECT_LT(max_diff(take(mapped, array(k), 0), linalg::inv(m)), 1e-12);
  }
}

TEST(Einsum, ParsingAndResults) {
  array a = random_array({3, 4}, float64), b = random_array({4, 5}, float64);
  EXPECT_LT(max_diff(einsum("ij,jk->ik", {a, b}), matmul(a, b)), 1e-12);
  EXPECT_LT(max_diff(einsum("ij,jk", {a, b}), matmul(a, b)), 1e-12);
  EXPECT_LT(max_diff(einsum("ij -> ji", {a}), mT(a)), 0.0 + 1e-300);
  array sq = random_array({4, 4}, float64);
  EXPECT_NEAR(einsum("ii", {sq}).item<double>(), trace(sq).item<double>(), 1e-12);
  EXPECT_LT(max_diff(einsum("ii->i", {sq}), diagonal(sq)), 1e-300);
  array batch = random_array({2, 3, 4}, float64);
  EXPECT_LT(max_diff(einsum("...ij,jk->...ik", {batch, b}), matmul(batch, b)), 1e-12);
  // Implicit output: "ba" is in alphabetical order, so transposed.
  EXPECT_LT(max_diff(einsum("ba", {a}), mT(a)), 1e-300);
  array c = random_array({5, 2}, float64);
  EXPECT_LT(max_diff(einsum("ij,jk,kl->il", {a, b, c}), matmul(matmul(a, b), c)), 1e-12);
}

TEST(Einsum, PathAndErrors) {
  array a = random_array({2, 30}), b = random_array({30, 30}), c = random_array({30, 2});
  auto [path, report] = einsum_path("ij,jk,kl->il", {a, b, c});
  // Greedy: a x b first (its result is smaller than b x c's), then with c.
  ASSERT_EQ(path.size(), 2u);
  EXPECT_EQ(path[0], (std::vector<int>{0, 1}));
  EXPECT_EQ(path[1], (std::vector<int>{0, 1}));
  EXPECT_NE(report.find("Complete contraction"), std::string::npos);
  EXPECT_THROW(einsum("ij,jk->ik", {a}), Error);
  EXPECT_THROW(einsum("ij->ii", {a}), Error);
  EXPECT_THROW(einsum("i1->i", {a}), Error);
  EXPECT_THROW(einsum("ij,jk->ik", {a, a}), Error);  // j: 30 vs 2
  EXPECT_THROW(einsum("ijk->i", {a}), Error);
  EXPECT_THROW(einsum("ij->iz", {a}), Error);
}

TEST(RandomMvn, Moments) {
  array mu = array({1.0f, -2.0f});
  array cov = array({2.0f, 0.6f, 0.6f, 1.0f}, {2, 2});
  const int n = 20000;
  array x = random::multivariate_normal(mu, cov, {n}, float32, random::key(3));
  ASSERT_EQ(x.shape(), (Shape{n, 2}));
  array m = mean(x, 0);
  EXPECT_LT(max_diff(m, mu), 0.05);
  array centered = subtract(x, m);
  array c = divide(matmul(mT(centered), centered), array(static_cast<float>(n)));
  EXPECT_LT(max_diff(c, cov), 0.06);
  // Batched: a mean per row of a (3, 2) mean, one covariance.
  array many = random::multivariate_normal(zeros({3, 2}), cov, {5, 3}, float64, random::key(4));
  EXPECT_EQ(many.shape(), (Shape{5, 3, 2}));
  EXPECT_EQ(many.dtype(), float64);
}

}  // namespace
}  // namespace kiln
