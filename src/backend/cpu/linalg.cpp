// CPU linear algebra: QRF, SVD, Inverse, Cholesky, Eigh, LUF, Eig through
// LAPACK (LAPACKE over OpenBLAS).
//
// Why it is shaped so: these factorizations are O(n^3) with a data-
// dependent order of work (pivoting, iterations to convergence); LAPACK is
// the reference implementation of each and OpenBLAS threads its inner
// BLAS-3 calls, so Kiln only moves data. Each matrix of the batch is copied
// into a row-major scratch buffer (the input may be a strided view and
// LAPACK overwrites its argument), factored with LAPACKE's row-major
// interface, and the factors are written into the row-major outputs. The
// batch is walked in order: OpenBLAS already spreads one matrix over the
// cores.
#include <lapacke.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/copy.h"
#include "core/array_desc.h"
#include "core/ops_util.h"
#include "core/primitives_linalg.h"
#include "kiln/error.h"

namespace kiln {
namespace {

// The LAPACK routines of one precision.
template <typename T>
struct Lapack;

template <>
struct Lapack<float> {
  static lapack_int geqrf(lapack_int m, lapack_int n, float* a, float* tau) {
    return LAPACKE_sgeqrf(LAPACK_ROW_MAJOR, m, n, a, n, tau);
  }
  static lapack_int orgqr(lapack_int m, lapack_int k, lapack_int lda, float* a, const float* tau) {
    return LAPACKE_sorgqr(LAPACK_ROW_MAJOR, m, k, k, a, lda, tau);
  }
  static lapack_int gesdd(char jobz, lapack_int m, lapack_int n, float* a, float* s, float* u, float* vt) {
    return LAPACKE_sgesdd(LAPACK_ROW_MAJOR, jobz, m, n, a, n, s, u, m, vt, n);
  }
  static lapack_int getrf(lapack_int m, lapack_int n, float* a, lapack_int* ipiv) {
    return LAPACKE_sgetrf(LAPACK_ROW_MAJOR, m, n, a, n, ipiv);
  }
  static lapack_int getri(lapack_int n, float* a, const lapack_int* ipiv) {
    return LAPACKE_sgetri(LAPACK_ROW_MAJOR, n, a, n, ipiv);
  }
  static lapack_int trtri(lapack_int n, float* a) { return LAPACKE_strtri(LAPACK_ROW_MAJOR, 'L', 'N', n, a, n); }
  static lapack_int potrf(lapack_int n, float* a) { return LAPACKE_spotrf(LAPACK_ROW_MAJOR, 'L', n, a, n); }
  static lapack_int geev(char jobvr, lapack_int n, float* a, float* wr, float* wi, float* vr) {
    return LAPACKE_sgeev(LAPACK_ROW_MAJOR, 'N', jobvr, n, a, n, wr, wi, nullptr, 1, vr, n);
  }
  static lapack_int syevd(char jobz, lapack_int n, float* a, float* w) {
    return LAPACKE_ssyevd(LAPACK_ROW_MAJOR, jobz, 'L', n, a, n, w);
  }
};

template <>
struct Lapack<double> {
  static lapack_int geqrf(lapack_int m, lapack_int n, double* a, double* tau) {
    return LAPACKE_dgeqrf(LAPACK_ROW_MAJOR, m, n, a, n, tau);
  }
  static lapack_int orgqr(lapack_int m, lapack_int k, lapack_int lda, double* a, const double* tau) {
    return LAPACKE_dorgqr(LAPACK_ROW_MAJOR, m, k, k, a, lda, tau);
  }
  static lapack_int gesdd(char jobz, lapack_int m, lapack_int n, double* a, double* s, double* u, double* vt) {
    return LAPACKE_dgesdd(LAPACK_ROW_MAJOR, jobz, m, n, a, n, s, u, m, vt, n);
  }
  static lapack_int getrf(lapack_int m, lapack_int n, double* a, lapack_int* ipiv) {
    return LAPACKE_dgetrf(LAPACK_ROW_MAJOR, m, n, a, n, ipiv);
  }
  static lapack_int getri(lapack_int n, double* a, const lapack_int* ipiv) {
    return LAPACKE_dgetri(LAPACK_ROW_MAJOR, n, a, n, ipiv);
  }
  static lapack_int trtri(lapack_int n, double* a) { return LAPACKE_dtrtri(LAPACK_ROW_MAJOR, 'L', 'N', n, a, n); }
  static lapack_int potrf(lapack_int n, double* a) { return LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', n, a, n); }
  static lapack_int geev(char jobvr, lapack_int n, double* a, double* wr, double* wi, double* vr) {
    return LAPACKE_dgeev(LAPACK_ROW_MAJOR, 'N', jobvr, n, a, n, wr, wi, nullptr, 1, vr, n);
  }
  static lapack_int syevd(char jobz, lapack_int n, double* a, double* w) {
    return LAPACKE_dsyevd(LAPACK_ROW_MAJOR, jobz, 'L', n, a, n, w);
  }
};

// The input as row-major matrices: batch, rows M, columns N.
template <typename T>
struct Matrices {
  std::vector<T> data;
  int64_t batch = 0;
  int M = 0, N = 0;
  T* matrix(int64_t b) { return data.data() + b * M * N; }
};

template <typename T>
Matrices<T> row_major(const array& a) {
  Matrices<T> m;
  m.M = a.shape(-2);
  m.N = a.shape(-1);
  m.batch = 1;
  for (int i = 0; i + 2 < a.ndim(); ++i) m.batch *= a.shape(i);
  m.data.resize(a.size());
  if (a.size()) {
    cpu::copy_strided(detail::data_ptr(a), a.dtype(), a.shape(), a.strides(), m.data.data(), a.dtype(),
                      row_major_strides(a.shape()));
  }
  return m;
}

template <typename T>
T* out_ptr(array& out) {
  return reinterpret_cast<T*>(detail::data_ptr(out));
}

[[noreturn]] void lapack_failed(const char* op, const std::string& why, lapack_int info, const array& a) {
  fail(op, why + " (LAPACK info " + std::to_string(info) + ")", {&a});
}

// Calls fn.template operator()<T>() for the float32 / float64 input.
template <typename F>
void float_dispatch(const array& a, const char* op, F&& fn) {
  if (a.dtype() == float32) {
    fn(float{});
  } else if (a.dtype() == float64) {
    fn(double{});
  } else {
    fail(op, std::string("needs float32 or float64, got ") + dtype_name(a.dtype()), {&a});
  }
}

void allocate_all(std::vector<array>& outputs, const char* op) {
  for (auto& o : outputs) detail::allocate(o, op);
}

}  // namespace

void QRF::eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  allocate_all(outputs, "linalg::qr");
  float_dispatch(inputs[0], "linalg::qr", [&](auto tag) {
    using T = decltype(tag);
    Matrices<T> a = row_major<T>(inputs[0]);
    const int M = a.M, N = a.N, K = std::min(M, N);
    T* q = out_ptr<T>(outputs[0]);
    T* r = out_ptr<T>(outputs[1]);
    if (K == 0) return;
    std::vector<T> tau(K);
    for (int64_t b = 0; b < a.batch; ++b) {
      T* m = a.matrix(b);
      if (lapack_int info = Lapack<T>::geqrf(M, N, m, tau.data())) {
        lapack_failed("linalg::qr", "geqrf failed", info, inputs[0]);
      }
      T* rb = r + b * K * N;
      for (int i = 0; i < K; ++i) {
        for (int j = 0; j < N; ++j) rb[i * N + j] = j >= i ? m[i * N + j] : T(0);
      }
      if (lapack_int info = Lapack<T>::orgqr(M, K, N, m, tau.data())) {
        lapack_failed("linalg::qr", "orgqr failed", info, inputs[0]);
      }
      T* qb = q + b * M * K;
      for (int i = 0; i < M; ++i) std::memcpy(qb + i * K, m + i * N, sizeof(T) * K);
    }
  });
}

void SVD::eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  allocate_all(outputs, "linalg::svd");
  float_dispatch(inputs[0], "linalg::svd", [&](auto tag) {
    using T = decltype(tag);
    Matrices<T> a = row_major<T>(inputs[0]);
    const int M = inputs[0].shape(-2), N = inputs[0].shape(-1), K = std::min(M, N);
    T* s = out_ptr<T>(outputs[compute_uv_ ? 1 : 0]);
    T* u = compute_uv_ ? out_ptr<T>(outputs[0]) : nullptr;
    T* vt = compute_uv_ ? out_ptr<T>(outputs[2]) : nullptr;
    if (K == 0) {
      // No singular values; U and Vt are identities (numpy's result).
      for (int64_t b = 0; compute_uv_ && b < a.batch; ++b) {
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < M; ++j) u[b * M * M + i * M + j] = T(i == j);
        for (int i = 0; i < N; ++i)
          for (int j = 0; j < N; ++j) vt[b * N * N + i * N + j] = T(i == j);
      }
      return;
    }
    T dummy[1];
    for (int64_t b = 0; b < a.batch; ++b) {
      lapack_int info = Lapack<T>::gesdd(compute_uv_ ? 'A' : 'N', M, N, a.matrix(b), s + b * K,
                                         compute_uv_ ? u + b * M * M : dummy, compute_uv_ ? vt + b * N * N : dummy);
      if (info) lapack_failed("linalg::svd", "the SVD did not converge", info, inputs[0]);
    }
  });
}

void Inverse::eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  const char* op = tri_ ? "linalg::tri_inv" : "linalg::inv";
  allocate_all(outputs, op);
  float_dispatch(inputs[0], op, [&](auto tag) {
    using T = decltype(tag);
    Matrices<T> a = row_major<T>(inputs[0]);
    const int n = a.N;
    if (n == 0) return;
    std::vector<lapack_int> ipiv(n);
    for (int64_t b = 0; b < a.batch; ++b) {
      T* m = a.matrix(b);
      lapack_int info = 0;
      if (tri_) {
        info = Lapack<T>::trtri(n, m);
        for (int i = 0; i < n; ++i)
          for (int j = i + 1; j < n; ++j) m[i * n + j] = T(0);
      } else {
        info = Lapack<T>::getrf(n, n, m, ipiv.data());
        if (info == 0) info = Lapack<T>::getri(n, m, ipiv.data());
      }
      if (info > 0) lapack_failed(op, "the matrix is singular", info, inputs[0]);
      if (info < 0) lapack_failed(op, "LAPACK rejected an argument", info, inputs[0]);
    }
    if (!a.data.empty()) std::memcpy(out_ptr<T>(outputs[0]), a.data.data(), sizeof(T) * a.data.size());
  });
}

void Cholesky::eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  allocate_all(outputs, "linalg::cholesky");
  float_dispatch(inputs[0], "linalg::cholesky", [&](auto tag) {
    using T = decltype(tag);
    Matrices<T> a = row_major<T>(inputs[0]);
    const int n = a.N;
    if (n == 0) return;
    for (int64_t b = 0; b < a.batch; ++b) {
      T* m = a.matrix(b);
      lapack_int info = Lapack<T>::potrf(n, m);
      if (info > 0) lapack_failed("linalg::cholesky", "the matrix is not positive definite", info, inputs[0]);
      if (info < 0) lapack_failed("linalg::cholesky", "LAPACK rejected an argument", info, inputs[0]);
      for (int i = 0; i < n; ++i)
        for (int j = i + 1; j < n; ++j) m[i * n + j] = T(0);
    }
    if (!a.data.empty()) std::memcpy(out_ptr<T>(outputs[0]), a.data.data(), sizeof(T) * a.data.size());
  });
}

void Eigh::eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  const char* op = vectors_ ? "linalg::eigh" : "linalg::eigvalsh";
  allocate_all(outputs, op);
  float_dispatch(inputs[0], op, [&](auto tag) {
    using T = decltype(tag);
    Matrices<T> a = row_major<T>(inputs[0]);
    const int n = a.N;
    if (n == 0) return;
    T* w = out_ptr<T>(outputs[0]);
    for (int64_t b = 0; b < a.batch; ++b) {
      lapack_int info = Lapack<T>::syevd(vectors_ ? 'V' : 'N', n, a.matrix(b), w + b * n);
      if (info) lapack_failed(op, "the eigenvalue iteration did not converge", info, inputs[0]);
    }
    if (vectors_ && !a.data.empty()) {
      std::memcpy(out_ptr<T>(outputs[1]), a.data.data(), sizeof(T) * a.data.size());
    }
  });
}

// geev's real form: a complex pair (wi[j] > 0) stores its eigenvector's
// real part in column j and imaginary part in column j + 1, the second
// vector of the pair being the conjugate of the first.
void Eig::eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  const char* op = vectors_ ? "linalg::eig" : "linalg::eigvals";
  allocate_all(outputs, op);
  float_dispatch(inputs[0], op, [&](auto tag) {
    using T = decltype(tag);
    Matrices<T> a = row_major<T>(inputs[0]);
    const int n = a.N;
    if (n == 0) return;
    auto* w = reinterpret_cast<complex64_t*>(detail::data_ptr(outputs[0]));
    auto* v = vectors_ ? reinterpret_cast<complex64_t*>(detail::data_ptr(outputs[1])) : nullptr;
    std::vector<T> wr(n), wi(n), vr(vectors_ ? static_cast<size_t>(n) * n : 1);
    for (int64_t b = 0; b < a.batch; ++b) {
      lapack_int info = Lapack<T>::geev(vectors_ ? 'V' : 'N', n, a.matrix(b), wr.data(), wi.data(), vr.data());
      if (info) lapack_failed(op, "the QR algorithm did not converge", info, inputs[0]);
      for (int j = 0; j < n; ++j) w[b * n + j] = complex64_t(static_cast<float>(wr[j]), static_cast<float>(wi[j]));
      if (!vectors_) continue;
      complex64_t* vb = v + b * n * n;
      for (int j = 0; j < n; ++j) {
        bool pair = wi[j] > 0 && j + 1 < n;
        for (int i = 0; i < n; ++i) {
          float re = static_cast<float>(vr[i * n + j]);
          float im = pair ? static_cast<float>(vr[i * n + j + 1]) : 0.0f;
          vb[i * n + j] = complex64_t(re, im);
          if (pair) vb[i * n + j + 1] = complex64_t(re, -im);
        }
        if (pair) ++j;
      }
    }
  });
}

void LUF::eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  allocate_all(outputs, "linalg::lu_factor");
  float_dispatch(inputs[0], "linalg::lu_factor", [&](auto tag) {
    using T = decltype(tag);
    Matrices<T> a = row_major<T>(inputs[0]);
    const int M = a.M, N = a.N, K = std::min(M, N);
    auto* pivots = reinterpret_cast<uint32_t*>(detail::data_ptr(outputs[1]));
    auto* rows = reinterpret_cast<uint32_t*>(detail::data_ptr(outputs[2]));
    std::vector<lapack_int> ipiv(K);
    for (int64_t b = 0; b < a.batch; ++b) {
      // info > 0 (an exact zero pivot) still completes the factorization.
      lapack_int info = K ? Lapack<T>::getrf(M, N, a.matrix(b), ipiv.data()) : 0;
      if (info < 0) {
        lapack_failed("linalg::lu_factor", "LAPACK rejected an argument", info, inputs[0]);
      }
      uint32_t* p = pivots + b * K;
      uint32_t* r = rows + b * M;
      for (int i = 0; i < K; ++i) p[i] = static_cast<uint32_t>(ipiv[i] - 1);
      for (int i = 0; i < M; ++i) r[i] = static_cast<uint32_t>(i);
      // Undoing the swaps last to first gives, for each row of a, the row
      // of L U that holds it.
      for (int i = K - 1; i >= 0; --i) std::swap(r[i], r[p[i]]);
    }
    if (!a.data.empty()) std::memcpy(out_ptr<T>(outputs[0]), a.data.data(), sizeof(T) * a.data.size());
  });
}

}  // namespace kiln
