#pragma once
// kiln::linalg: MLX's linear algebra (mlx/linalg.h), with numpy's
// semantics. Every op works on the last two axes and is batched over the
// leading ones.
//
// Differences from MLX, on purpose:
//  - float64 is accepted wherever MLX takes float32 (MLX accepts float64
//    only in some ops); the result has the input's dtype.
//  - The decompositions run on GPU streams too (MLX's are CPU-only),
//    through cuSOLVER (src/backend/cuda/linalg.cu), matching LAPACK on the
//    CPU and failing with the same kiln::Error; such a node runs outside
//    CUDA graphs (it reads cuSOLVER's info words on the host). Setting
//    KILN_GPU_LINALG=0 makes GPU streams refuse, as MLX's do, with an
//    error naming the op and asking for a CPU stream.
//  - eig and eigvals (LAPACK's geev) have no vjp / jvp rules yet (a rule
//    throws kiln::Error naming the op).
//  - qr, svd, inv, tri_inv, cholesky, eigh, eigvalsh, lu_factor (and the
//    ops built on them: solve, solve_triangular, pinv, det, slogdet, norm)
//    have vjp and jvp rules (MLX has none). svd's rules with compute_uv
//    need square matrices, qr's need rows >= columns, lu_factor's square
//    matrices; elsewhere the rule throws kiln::Error.
//  - A singular matrix makes inv / tri_inv (and solve_triangular) fail at
//    eval with kiln::Error, as MLX does; cholesky of a matrix that is not
//    positive definite fails likewise. lu_factor and solve of a singular
//    matrix do not fail (LAPACK's getrf completes; solve gives inf/nan).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/array.h"
#include "kiln/device.h"

namespace kiln::linalg {

// Vector or matrix norms (numpy.linalg.norm):
//  - no axis and no ord: the 2-norm of the flattened array;
//  - no axis but ord: a must be 1-d (vector norm) or 2-d (matrix norm);
//  - axis of one entry: vector norm; of two entries: matrix norm.
// Vector orders: any p (0 counts non-zeros, inf / -inf: max / min of |x|);
// matrix orders: 1, -1, 2, -2, inf, -inf, "fro" ("f"), "nuc".
array norm(const array& a, double ord, const std::optional<std::vector<int>>& axis = std::nullopt,
           bool keepdims = false, StreamOrDevice s = {});
inline array norm(const array& a, double ord, int axis, bool keepdims = false, StreamOrDevice s = {}) {
  return norm(a, ord, std::vector<int>{axis}, keepdims, s);
}
array norm(const array& a, const std::string& ord, const std::optional<std::vector<int>>& axis = std::nullopt,
           bool keepdims = false, StreamOrDevice s = {});
inline array norm(const array& a, const std::string& ord, int axis, bool keepdims = false, StreamOrDevice s = {}) {
  return norm(a, ord, std::vector<int>{axis}, keepdims, s);
}
array norm(const array& a, const std::optional<std::vector<int>>& axis = std::nullopt, bool keepdims = false,
           StreamOrDevice s = {});
inline array norm(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {}) {
  return norm(a, std::vector<int>{axis}, keepdims, s);
}

// Reduced QR: a [..., M, N] -> Q [..., M, K], R [..., K, N], K = min(M, N)
// (LAPACK's Householder signs: R's diagonal may be negative).
std::pair<array, array> qr(const array& a, StreamOrDevice s = {});

// Full SVD: {U [..., M, M], S [..., K], Vt [..., N, N]} with a = U[:, :K]
// diag(S) Vt[:K]; compute_uv false: {S} only. S is descending.
std::vector<array> svd(const array& a, bool compute_uv, StreamOrDevice s /* = {} */);
inline std::vector<array> svd(const array& a, StreamOrDevice s = {}) { return svd(a, true, s); }

array inv(const array& a, StreamOrDevice s = {});
// Inverse of the lower (upper) triangle of a; the other triangle is not read.
array tri_inv(const array& a, bool upper = false, StreamOrDevice s = {});
// L with a = L L^T (upper: U with a = U^T U), from the lower (upper)
// triangle of a; the other triangle is not read.
array cholesky(const array& a, bool upper = false, StreamOrDevice s = {});
// Moore-Penrose pseudo-inverse through the SVD (singular values below
// 10 max(M, N) eps max(S) are dropped, as MLX does).
array pinv(const array& a, StreamOrDevice s = {});
// inv(L L^T) (upper: inv(U^T U)) from a Cholesky factor.
array cholesky_inv(const array& a, bool upper = false, StreamOrDevice s = {});

// {P [..., M] uint32, L [..., M, K], U [..., K, N]} with a = L[P, :] @ U.
std::vector<array> lu(const array& a, StreamOrDevice s = {});
// {LU [..., M, N] (L strictly below the diagonal, unit diagonal implied;
// U on and above), pivots [..., K] uint32}: row i was swapped with row
// pivots[i], in order (LAPACK's ipiv, 0-based).
std::pair<array, array> lu_factor(const array& a, StreamOrDevice s = {});

// x with a x = b; b is [..., N] (a vector) or [..., N, NRHS]; leading axes broadcast.
array solve(const array& a, const array& b, StreamOrDevice s = {});
// x with a x = b for triangular a (its other triangle is not read).
array solve_triangular(const array& a, const array& b, bool upper = false, StreamOrDevice s = {});

// Cross product along axis (size 2 or 3 in each input; size 2 means a zero
// third component); the other axes broadcast.
array cross(const array& a, const array& b, int axis = -1, StreamOrDevice s = {});

// Eigenvalues [..., N] and right eigenvectors [..., N, N] (columns of unit
// norm) of a general square float32 / float64 matrix, as complex64 (LAPACK's
// geev order: a complex conjugate pair is adjacent, positive imaginary part first).
std::pair<array, array> eig(const array& a, StreamOrDevice s = {});
array eigvals(const array& a, StreamOrDevice s = {});

// Eigenvalues (ascending) of the symmetric matrix given by the lower
// (UPLO "L") or upper ("U") triangle of a.
array eigvalsh(const array& a, std::string UPLO = "L", StreamOrDevice s = {});
// {eigenvalues [..., N] ascending, eigenvectors [..., N, N] as columns}.
std::pair<array, array> eigh(const array& a, std::string UPLO = "L", StreamOrDevice s = {});

// Determinant, and {sign, log |det|} (sign 0 and -inf for a singular matrix).
array det(const array& a, StreamOrDevice s = {});
std::pair<array, array> slogdet(const array& a, StreamOrDevice s = {});

}  // namespace kiln::linalg
