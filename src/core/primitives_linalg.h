#pragma once
// Primitives of kiln::linalg (include/kiln/linalg.h). Each works on the
// last two axes of a float32 / float64 input, batched over the leading ones.
// The triangle-reading ones (Inverse with tri, Cholesky, Eigh) read the
// lower triangle only: the ops handle "upper" by transposing, so every rule
// is written once. They all use the vector form of eval and are listed in
// KILN_FOR_EACH_LINALG_PRIMITIVE below (read by the GPU stub and the op
// harness' coverage), not in core/primitives.h, so that adding them touched
// no widely included header.
#include "core/primitives.h"

namespace kiln {

#define KILN_LINALG_BODY(NAME)                                                                \
  using Primitive::eval_cpu;                                                                  \
  using Primitive::eval_gpu;                                                                  \
  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override;    \
  void eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) override;    \
  const char* name() const override { return #NAME; }                                         \
  KILN_TRANSFORM_RULES                                                                        \
  bool is_equivalent(const Primitive& o) const override {                                     \
    return dynamic_cast<const NAME*>(&o) != nullptr && same_params(static_cast<const NAME&>(o)); \
  }

// a [..., M, N] -> Q [..., M, K], R [..., K, N] (K = min(M, N)).
class QRF : public Primitive {
 public:
  using Primitive::Primitive;
  KILN_LINALG_BODY(QRF)
  bool same_params(const QRF&) const { return true; }
};

// a [..., M, N] -> U [..., M, M], S [..., K], Vt [..., N, N]; S only
// without compute_uv.
class SVD : public Primitive {
 public:
  SVD(Stream s, bool compute_uv) : Primitive(s), compute_uv_(compute_uv) {}
  KILN_LINALG_BODY(SVD)
  bool same_params(const SVD& o) const { return o.compute_uv_ == compute_uv_; }
  bool compute_uv() const { return compute_uv_; }

 private:
  bool compute_uv_;
};

// inv(a); with tri, the inverse of a's lower triangle. Throws at eval for
// a singular matrix.
class Inverse : public Primitive {
 public:
  Inverse(Stream s, bool tri) : Primitive(s), tri_(tri) {}
  KILN_LINALG_BODY(Inverse)
  bool same_params(const Inverse& o) const { return o.tri_ == tri_; }
  bool tri() const { return tri_; }

 private:
  bool tri_;
};

// L (lower, zeros above) with L L^T = the symmetric matrix of a's lower
// triangle. Throws at eval unless that matrix is positive definite.
class Cholesky : public Primitive {
 public:
  using Primitive::Primitive;
  KILN_LINALG_BODY(Cholesky)
  bool same_params(const Cholesky&) const { return true; }
};

// Eigenvalues [..., N] (ascending) and, with vectors, eigenvectors
// [..., N, N] (columns) of the symmetric matrix of a's lower triangle.
class Eigh : public Primitive {
 public:
  Eigh(Stream s, bool vectors) : Primitive(s), vectors_(vectors) {}
  KILN_LINALG_BODY(Eigh)
  bool same_params(const Eigh& o) const { return o.vectors_ == vectors_; }
  bool vectors() const { return vectors_; }

 private:
  bool vectors_;
};

// a [..., M, N] -> LU [..., M, N] (packed, unit-diagonal L), pivots
// [..., K] (LAPACK's ipiv, 0-based), rows [..., M] with a = (L U)[rows].
class LUF : public Primitive {
 public:
  using Primitive::Primitive;
  KILN_LINALG_BODY(LUF)
  bool same_params(const LUF&) const { return true; }
};

// Eigenvalues [..., N] and, with vectors, right eigenvectors [..., N, N]
// (columns) of a general square matrix, both complex64 (LAPACK's geev).
class Eig : public Primitive {
 public:
  Eig(Stream s, bool vectors) : Primitive(s), vectors_(vectors) {}
  KILN_LINALG_BODY(Eig)
  bool same_params(const Eig& o) const { return o.vectors_ == vectors_; }
  bool vectors() const { return vectors_; }

 private:
  bool vectors_;
};

#undef KILN_LINALG_BODY

#define KILN_FOR_EACH_LINALG_PRIMITIVE(X) X(QRF) X(SVD) X(Inverse) X(Cholesky) X(Eigh) X(LUF) X(Eig)

namespace linalg::detail {
// All three outputs of LUF: {LU, pivots, rows} (linalg::lu_factor returns two).
std::vector<array> lu_factor_all(const array& a, Stream s);
}  // namespace linalg::detail

}  // namespace kiln
