// GPU side of kiln::linalg through cuSOLVER (the CUDA toolkit's dense
// LAPACK): QRF (geqrf + orgqr), SVD (gesvd), Inverse (getrf + getrs;
// trtri), Cholesky (potrf), Eigh (syevd), LUF (getrf), Eig (geev).
// The path of every GPU stream (KILN_GPU_LINALG=0 turns it off:
// src/core/linalg.cpp).
//
// Why it is shaped so: as on the CPU (backend/cpu/linalg.cpp) these are
// O(n^3) factorizations with a data-dependent order of work, and cuSOLVER
// is the toolkit's implementation of each, so Kiln only moves data.
// cuSOLVER is column-major and Kiln row-major. A row-major buffer read
// column-major is the transpose, which costs nothing where the problem
// allows it (symmetric inputs; inv(A^T) = inv(A)^T; a lower triangle is an
// upper one; the SVD of A^T when A is wide) and one strided copy otherwise
// (QR, LU, eig, the SVD of a tall A). The matrices of a batch are factored
// one after another on the node's stream.
//
// Errors: cuSOLVER reports a singular or indefinite matrix in an info word
// on the device, and the kiln::Error the CPU throws needs it on the host.
// So these nodes never run inside a CUDA graph: under capture eval_gpu
// throws, the encoder runs the batch eagerly, and there each node waits for
// its stream once to read its info words (and, for LU and eig, to finish
// the pivots and the complex eigenpairs on the host).
#include <cusolverDn.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/kernel_utils.cuh"
#include "core/ops_util.h"
#include "core/primitives_linalg.h"

namespace kiln {
namespace cuda {
namespace {

void check_status(cusolverStatus_t s, const char* op, const char* call) {
  if (s != CUSOLVER_STATUS_SUCCESS) {
    throw Error(std::string("[") + op + "] cuSOLVER error " + std::to_string(static_cast<int>(s)) + " in " + call);
  }
}
#define KILN_CUSOLVER(op, call) ::kiln::cuda::check_status((call), op, #call)

struct Solver {
  cusolverDnHandle_t handle = nullptr;
  cusolverDnParams_t params = nullptr;
};

// This worker thread's cuSOLVER handle on the node's stream; refuses a
// graph capture (see the top of the file).
Solver& solver(const char* op) {
  cudaStream_t st = current_stream();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  KILN_CUDA_CHECK(op, cudaStreamIsCapturing(st, &status));
  if (status != cudaStreamCaptureStatusNone) {
    throw Error(std::string("[") + op + "] cuSOLVER nodes run outside CUDA graphs");
  }
  thread_local Solver s;
  if (!s.handle) {
    KILN_CUSOLVER(op, cusolverDnCreate(&s.handle));
    KILN_CUSOLVER(op, cusolverDnCreateParams(&s.params));
  }
  KILN_CUSOLVER(op, cusolverDnSetStream(s.handle, st));
  return s;
}

cudaDataType cuda_real_type(const array& a, const char* op) {
  if (a.dtype() == float32) return CUDA_R_32F;
  if (a.dtype() == float64) return CUDA_R_64F;
  fail(op, std::string("needs float32 or float64, got ") + dtype_name(a.dtype()), {&a});
}

// Matrices of a [..., M, N] array.
struct Dims {
  int64_t count;
  int M, N;
  size_t item;
  size_t matrix_bytes() const { return static_cast<size_t>(M) * N * item; }
};
Dims dims_of(const array& a) {
  Dims d{1, a.shape(-2), a.shape(-1), size_of(a.dtype())};
  for (int i = 0; i + 2 < a.ndim(); ++i) d.count *= a.shape(i);
  return d;
}

// Element strides of count column-major [rows, cols] matrices with leading
// dimension ld, `batch` elements apart, for the logical shape `shape`.
Strides col_major(const Shape& shape, int64_t ld, int64_t batch) {
  Strides s(shape.size());
  int64_t step = batch;
  for (int i = static_cast<int>(shape.size()) - 3; i >= 0; --i) {
    s[i] = step;
    step *= shape[i];
  }
  s[shape.size() - 2] = 1;
  s[shape.size() - 1] = ld;
  return s;
}

// a as row-major (the column-major transpose) or column-major matrices.
void copy_in(const array& a, char* dst, bool column_major, const char* op) {
  const auto& d = *a.desc();
  Strides to = column_major ? col_major(d.shape, a.shape(-2), static_cast<int64_t>(a.shape(-2)) * a.shape(-1))
                            : row_major_strides(d.shape);
  copy_strided(in_ptr(a), d.dtype, d.shape, d.strides, dst, d.dtype, to, op);
}

// Column-major matrices (leading dimension ld, batch apart) into the
// row-major `out` of logical shape `shape`.
void copy_out(const char* src, Dtype t, const Shape& shape, int64_t ld, int64_t batch, char* out, const char* op) {
  copy_strided(src, t, shape, col_major(shape, ld, batch), out, t, row_major_strides(shape), op);
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>(std::clamp<int64_t>((n + 255) / 256, 1, 4096)); }

// Zeroes the strictly upper (above) or strictly lower part of count
// row-major [rows, cols] matrices.
template <typename T>
__global__ void zero_triangle_kernel(T* a, int64_t total, int rows, int cols, bool above) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t e = k % (static_cast<int64_t>(rows) * cols);
    int64_t i = e / cols, j = e % cols;
    if (above ? j > i : j < i) a[k] = T(0);
  }
}
template <typename T>
__global__ void identity_kernel(T* a, int64_t total, int n) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t e = k % (static_cast<int64_t>(n) * n);
    a[k] = T(e / n == e % n);
  }
}

void zero_triangle(char* a, Dtype t, int64_t count, int rows, int cols, bool above, const char* op) {
  int64_t total = count * rows * cols;
  if (total == 0) return;
  if (t == float64) {
    zero_triangle_kernel<<<blocks_for(total), 256, 0, current_stream()>>>(reinterpret_cast<double*>(a), total, rows,
                                                                            cols, above);
  } else {
    zero_triangle_kernel<<<blocks_for(total), 256, 0, current_stream()>>>(reinterpret_cast<float*>(a), total, rows,
                                                                            cols, above);
  }
  KILN_CUDA_CHECK_LAUNCH(op);
}
void identities(char* a, Dtype t, int64_t count, int n, const char* op) {
  int64_t total = count * n * n;
  if (total == 0) return;
  if (t == float64) {
    identity_kernel<<<blocks_for(total), 256, 0, current_stream()>>>(reinterpret_cast<double*>(a), total, n);
  } else {
    identity_kernel<<<blocks_for(total), 256, 0, current_stream()>>>(reinterpret_cast<float*>(a), total, n);
  }
  KILN_CUDA_CHECK_LAUNCH(op);
}

// Device and host work areas of one size query.
struct Work {
  void* device = nullptr;
  size_t device_bytes = 0;
  std::vector<char> host;
  Work(size_t d, size_t h, const char* op) : device(scratch(std::max<size_t>(d, 16), op)), device_bytes(d), host(h) {}
  void* host_ptr() { return host.empty() ? nullptr : host.data(); }
};

// Waits for the stream and reads the info words of the batch: a negative
// one is a rejected argument; a positive one is `why` (null: allowed).
void check_infos(const int* info, int64_t count, const char* op, const array& a, const char* why) {
  std::vector<int> h(count);
  KILN_CUDA_CHECK(op, cudaMemcpyAsync(h.data(), info, count * sizeof(int), cudaMemcpyDeviceToHost, current_stream()));
  KILN_CUDA_CHECK(op, cudaStreamSynchronize(current_stream()));
  for (int v : h) {
    if (v < 0) fail(op, "cuSOLVER rejected an argument (info " + std::to_string(v) + ")", {&a});
    if (v > 0 && why) fail(op, std::string(why) + " (cuSOLVER info " + std::to_string(v) + ")", {&a});
  }
}

int* info_words(int64_t count, const char* op) { return static_cast<int*>(scratch(count * sizeof(int), op)); }

void allocate_all(std::vector<array>& outputs, const char* op) {
  for (auto& o : outputs) allocate(o, op);
}

// Q of geqrf's reflectors: orgqr has no 64-bit generic form.
void orgqr(Solver& s, cudaDataType t, int M, int K, char* a, int lda, char* tau, int64_t count, size_t a_step,
           size_t tau_step, int* info, const char* op) {
  int lwork = 0;
  if (t == CUDA_R_64F) {
    KILN_CUSOLVER(op, cusolverDnDorgqr_bufferSize(s.handle, M, K, K, reinterpret_cast<double*>(a), lda,
                                                   reinterpret_cast<double*>(tau), &lwork));
  } else {
    KILN_CUSOLVER(op, cusolverDnSorgqr_bufferSize(s.handle, M, K, K, reinterpret_cast<float*>(a), lda,
                                                   reinterpret_cast<float*>(tau), &lwork));
  }
  const size_t item = t == CUDA_R_64F ? 8 : 4;
  char* work = static_cast<char*>(scratch(std::max<size_t>(static_cast<size_t>(lwork) * item, 16), op));
  for (int64_t b = 0; b < count; ++b) {
    if (t == CUDA_R_64F) {
      KILN_CUSOLVER(op, cusolverDnDorgqr(s.handle, M, K, K, reinterpret_cast<double*>(a + b * a_step), lda,
                                          reinterpret_cast<double*>(tau + b * tau_step),
                                          reinterpret_cast<double*>(work), lwork, info + b));
    } else {
      KILN_CUSOLVER(op, cusolverDnSorgqr(s.handle, M, K, K, reinterpret_cast<float*>(a + b * a_step), lda,
                                          reinterpret_cast<float*>(tau + b * tau_step),
                                          reinterpret_cast<float*>(work), lwork, info + b));
    }
  }
}

}  // namespace
}  // namespace cuda

using cuda::Dims;
using cuda::Solver;

void QRF::eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  const char* op = "linalg::qr";
  const array& a = inputs[0];
  Solver& s = cuda::solver(op);
  cudaDataType t = cuda::cuda_real_type(a, op);
  cuda::allocate_all(outputs, op);
  Dims d = cuda::dims_of(a);
  const int M = d.M, N = d.N, K = std::min(M, N);
  if (K == 0 || d.count == 0) return;
  char* q = cuda::out_ptr(outputs[0]);
  char* r = cuda::out_ptr(outputs[1]);
  char* buf = static_cast<char*>(cuda::scratch(d.count * d.matrix_bytes(), op));
  char* tau = static_cast<char*>(cuda::scratch(d.count * K * d.item, op));
  cuda::copy_in(a, buf, true, op);
  size_t dev = 0, host = 0;
  KILN_CUSOLVER(op, cusolverDnXgeqrf_bufferSize(s.handle, s.params, M, N, t, buf, M, t, tau, t, &dev, &host));
  cuda::Work w(dev, host, op);
  int* info = cuda::info_words(2 * d.count, op);
  for (int64_t b = 0; b < d.count; ++b) {
    KILN_CUSOLVER(op, cusolverDnXgeqrf(s.handle, s.params, M, N, t, buf + b * d.matrix_bytes(), M, t,
                                        tau + b * K * d.item, t, w.device, w.device_bytes, w.host_ptr(), host,
                                        info + b));
  }
  // R: the first K rows of the factored matrix, upper triangle.
  Shape r_shape = outputs[1].shape();
  cuda::copy_out(buf, a.dtype(), r_shape, M, static_cast<int64_t>(M) * N, r, op);
  cuda::zero_triangle(r, a.dtype(), d.count, K, N, false, op);
  cuda::orgqr(s, t, M, K, buf, M, tau, d.count, d.matrix_bytes(), K * d.item, info + d.count, op);
  cuda::copy_out(buf, a.dtype(), outputs[0].shape(), M, static_cast<int64_t>(M) * N, q, op);
  cuda::check_infos(info, 2 * d.count, op, a, "the factorization failed");
}

// gesvd needs rows >= columns. A tall A is copied column-major; a wide A's
// row-major buffer is A^T column-major, whose SVD A^T = U' S V'^T gives
// A = V' S U'^T: gesvd's U' (column-major) read row-major is A's Vt, and
// its V'^T read row-major is A's U, so those are written straight into
// the outputs.
void SVD::eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  const char* op = "linalg::svd";
  const array& a = inputs[0];
  Solver& s = cuda::solver(op);
  cudaDataType t = cuda::cuda_real_type(a, op);
  cuda::allocate_all(outputs, op);
  Dims d = cuda::dims_of(a);
  const int M = d.M, N = d.N, K = std::min(M, N);
  if (d.count == 0) return;
  char* u = compute_uv_ ? cuda::out_ptr(outputs[0]) : nullptr;
  char* sv = cuda::out_ptr(outputs[compute_uv_ ? 1 : 0]);
  char* vt = compute_uv_ ? cuda::out_ptr(outputs[2]) : nullptr;
  if (K == 0) {  // numpy: no singular values, identity U and Vt
    if (compute_uv_) {
      cuda::identities(u, a.dtype(), d.count, M, op);
      cuda::identities(vt, a.dtype(), d.count, N, op);
    }
    return;
  }
  const bool tall = M >= N;
  const int m = tall ? M : N, n = tall ? N : M;  // the problem gesvd sees: m >= n
  char* buf = static_cast<char*>(cuda::scratch(d.count * d.matrix_bytes(), op));
  cuda::copy_in(a, buf, tall, op);
  // gesvd's U (m x m) and VT (n x n), column-major.
  char *gu = nullptr, *gvt = nullptr;
  if (compute_uv_) {
    gu = tall ? static_cast<char*>(cuda::scratch(d.count * m * m * d.item, op)) : vt;
    gvt = tall ? static_cast<char*>(cuda::scratch(d.count * n * n * d.item, op)) : u;
  }
  const signed char job = compute_uv_ ? 'A' : 'N';
  size_t dev = 0, host = 0;
  KILN_CUSOLVER(op, cusolverDnXgesvd_bufferSize(s.handle, s.params, job, job, m, n, t, buf, m, t, sv, t, gu, m, t, gvt,
                                                 n, t, &dev, &host));
  cuda::Work w(dev, host, op);
  int* info = cuda::info_words(d.count, op);
  for (int64_t b = 0; b < d.count; ++b) {
    char* ub = gu ? gu + b * m * m * d.item : nullptr;
    char* vb = gvt ? gvt + b * n * n * d.item : nullptr;
    KILN_CUSOLVER(op, cusolverDnXgesvd(s.handle, s.params, job, job, m, n, t, buf + b * d.matrix_bytes(), m, t,
                                        sv + b * K * d.item, t, ub, m, t, vb, n, t, w.device, w.device_bytes,
                                        w.host_ptr(), host, info + b));
  }
  if (compute_uv_ && tall) {
    cuda::copy_out(gu, a.dtype(), outputs[0].shape(), M, static_cast<int64_t>(M) * M, u, op);
    cuda::copy_out(gvt, a.dtype(), outputs[2].shape(), N, static_cast<int64_t>(N) * N, vt, op);
  }
  cuda::check_infos(info, d.count, op, a, "the SVD did not converge");
}

// inv: the row-major buffer is A^T column-major and inv(A^T) = inv(A)^T,
// so getrf + getrs against identities give inv(A) row-major as they are.
// tri_inv: A's lower triangle is the buffer's upper one (trtri reads only
// the triangle).
void Inverse::eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  const char* op = tri_ ? "linalg::tri_inv" : "linalg::inv";
  const array& a = inputs[0];
  Solver& s = cuda::solver(op);
  cudaDataType t = cuda::cuda_real_type(a, op);
  cuda::allocate_all(outputs, op);
  Dims d = cuda::dims_of(a);
  const int n = d.N;
  if (n == 0 || d.count == 0) return;
  char* out = cuda::out_ptr(outputs[0]);
  int* info = cuda::info_words(2 * d.count, op);
  size_t dev = 0, host = 0;
  if (tri_) {
    cuda::copy_in(a, out, false, op);
    KILN_CUSOLVER(op, cusolverDnXtrtri_bufferSize(s.handle, CUBLAS_FILL_MODE_UPPER, CUBLAS_DIAG_NON_UNIT, n, t, out, n,
                                                   &dev, &host));
    cuda::Work w(dev, host, op);
    for (int64_t b = 0; b < d.count; ++b) {
      KILN_CUSOLVER(op, cusolverDnXtrtri(s.handle, CUBLAS_FILL_MODE_UPPER, CUBLAS_DIAG_NON_UNIT, n, t,
                                          out + b * d.matrix_bytes(), n, w.device, w.device_bytes, w.host_ptr(), host,
                                          info + b));
    }
    cuda::zero_triangle(out, a.dtype(), d.count, n, n, true, op);
    KILN_CUDA_CHECK(op, cudaMemsetAsync(info + d.count, 0, d.count * sizeof(int), cuda::current_stream()));
  } else {
    char* lu = static_cast<char*>(cuda::scratch(d.count * d.matrix_bytes(), op));
    auto* ipiv = static_cast<int64_t*>(cuda::scratch(d.count * n * sizeof(int64_t), op));
    cuda::copy_in(a, lu, false, op);
    KILN_CUSOLVER(op, cusolverDnXgetrf_bufferSize(s.handle, s.params, n, n, t, lu, n, t, &dev, &host));
    cuda::Work w(dev, host, op);
    for (int64_t b = 0; b < d.count; ++b) {
      KILN_CUSOLVER(op, cusolverDnXgetrf(s.handle, s.params, n, n, t, lu + b * d.matrix_bytes(), n, ipiv + b * n, t,
                                          w.device, w.device_bytes, w.host_ptr(), host, info + b));
    }
    cuda::identities(out, a.dtype(), d.count, n, op);
    for (int64_t b = 0; b < d.count; ++b) {
      KILN_CUSOLVER(op, cusolverDnXgetrs(s.handle, s.params, CUBLAS_OP_N, n, n, t, lu + b * d.matrix_bytes(), n,
                                          ipiv + b * n, t, out + b * d.matrix_bytes(), n, info + d.count + b));
    }
  }
  cuda::check_infos(info, 2 * d.count, op, a, "the matrix is singular");
}

// Symmetric A: the buffer's upper triangle (column-major) is A's lower one,
// and potrf's U with A = U^T U, read row-major, is the lower L = U^T.
void Cholesky::eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  const char* op = "linalg::cholesky";
  const array& a = inputs[0];
  Solver& s = cuda::solver(op);
  cudaDataType t = cuda::cuda_real_type(a, op);
  cuda::allocate_all(outputs, op);
  Dims d = cuda::dims_of(a);
  const int n = d.N;
  if (n == 0 || d.count == 0) return;
  char* out = cuda::out_ptr(outputs[0]);
  cuda::copy_in(a, out, false, op);
  size_t dev = 0, host = 0;
  KILN_CUSOLVER(op, cusolverDnXpotrf_bufferSize(s.handle, s.params, CUBLAS_FILL_MODE_UPPER, n, t, out, n, t, &dev,
                                                 &host));
  cuda::Work w(dev, host, op);
  int* info = cuda::info_words(d.count, op);
  for (int64_t b = 0; b < d.count; ++b) {
    KILN_CUSOLVER(op, cusolverDnXpotrf(s.handle, s.params, CUBLAS_FILL_MODE_UPPER, n, t, out + b * d.matrix_bytes(),
                                        n, t, w.device, w.device_bytes, w.host_ptr(), host, info + b));
  }
  cuda::zero_triangle(out, a.dtype(), d.count, n, n, true, op);
  cuda::check_infos(info, d.count, op, a, "the matrix is not positive definite");
}

// As Cholesky, the buffer's upper triangle is A's lower one; syevd leaves
// the eigenvectors in the buffer's columns (column-major), copied out as
// the columns of V.
void Eigh::eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  const char* op = vectors_ ? "linalg::eigh" : "linalg::eigvalsh";
  const array& a = inputs[0];
  Solver& s = cuda::solver(op);
  cudaDataType t = cuda::cuda_real_type(a, op);
  cuda::allocate_all(outputs, op);
  Dims d = cuda::dims_of(a);
  const int n = d.N;
  if (n == 0 || d.count == 0) return;
  char* wv = cuda::out_ptr(outputs[0]);
  char* buf = static_cast<char*>(cuda::scratch(d.count * d.matrix_bytes(), op));
  cuda::copy_in(a, buf, false, op);
  const cusolverEigMode_t job = vectors_ ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
  size_t dev = 0, host = 0;
  KILN_CUSOLVER(op, cusolverDnXsyevd_bufferSize(s.handle, s.params, job, CUBLAS_FILL_MODE_UPPER, n, t, buf, n, t, wv,
                                                 t, &dev, &host));
  cuda::Work w(dev, host, op);
  int* info = cuda::info_words(d.count, op);
  for (int64_t b = 0; b < d.count; ++b) {
    KILN_CUSOLVER(op, cusolverDnXsyevd(s.handle, s.params, job, CUBLAS_FILL_MODE_UPPER, n, t,
                                        buf + b * d.matrix_bytes(), n, t, wv + b * n * d.item, t, w.device,
                                        w.device_bytes, w.host_ptr(), host, info + b));
  }
  if (vectors_) {
    cuda::copy_out(buf, a.dtype(), outputs[1].shape(), n, static_cast<int64_t>(n) * n, cuda::out_ptr(outputs[1]), op);
  }
  cuda::check_infos(info, d.count, op, a, "the eigenvalue iteration did not converge");
}

// Row pivoting needs A itself column-major. The pivots (0-based) and the
// row permutation are finished on the host, as the CPU does.
void LUF::eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  const char* op = "linalg::lu_factor";
  const array& a = inputs[0];
  Solver& s = cuda::solver(op);
  cudaDataType t = cuda::cuda_real_type(a, op);
  cuda::allocate_all(outputs, op);
  Dims d = cuda::dims_of(a);
  const int M = d.M, N = d.N, K = std::min(M, N);
  if (d.count == 0) return;
  char* lu = cuda::out_ptr(outputs[0]);
  char* pivots = cuda::out_ptr(outputs[1]);
  char* rows = cuda::out_ptr(outputs[2]);
  std::vector<int64_t> ipiv(d.count * K);
  int* info = cuda::info_words(d.count, op);
  KILN_CUDA_CHECK(op, cudaMemsetAsync(info, 0, d.count * sizeof(int), cuda::current_stream()));
  if (K > 0) {
    char* buf = static_cast<char*>(cuda::scratch(d.count * d.matrix_bytes(), op));
    auto* dpiv = static_cast<int64_t*>(cuda::scratch(d.count * K * sizeof(int64_t), op));
    cuda::copy_in(a, buf, true, op);
    size_t dev = 0, host = 0;
    KILN_CUSOLVER(op, cusolverDnXgetrf_bufferSize(s.handle, s.params, M, N, t, buf, M, t, &dev, &host));
    cuda::Work w(dev, host, op);
    for (int64_t b = 0; b < d.count; ++b) {
      KILN_CUSOLVER(op, cusolverDnXgetrf(s.handle, s.params, M, N, t, buf + b * d.matrix_bytes(), M, dpiv + b * K, t,
                                          w.device, w.device_bytes, w.host_ptr(), host, info + b));
    }
    cuda::copy_out(buf, a.dtype(), a.shape(), M, static_cast<int64_t>(M) * N, lu, op);
    KILN_CUDA_CHECK(op, cudaMemcpyAsync(ipiv.data(), dpiv, ipiv.size() * sizeof(int64_t), cudaMemcpyDeviceToHost,
                                        cuda::current_stream()));
  }
  // info > 0 (an exact zero pivot) still completes the factorization.
  cuda::check_infos(info, d.count, op, a, nullptr);
  std::vector<uint32_t> p(d.count * K), r(d.count * M);
  for (int64_t b = 0; b < d.count; ++b) {
    uint32_t* pb = p.data() + b * K;
    uint32_t* rb = r.data() + b * M;
    for (int i = 0; i < K; ++i) pb[i] = static_cast<uint32_t>(ipiv[b * K + i] - 1);
    for (int i = 0; i < M; ++i) rb[i] = static_cast<uint32_t>(i);
    for (int i = K - 1; i >= 0; --i) std::swap(rb[i], rb[pb[i]]);
  }
  cudaStream_t st = cuda::current_stream();
  if (!p.empty()) {
    KILN_CUDA_CHECK(op, cudaMemcpyAsync(pivots, p.data(), p.size() * sizeof(uint32_t), cudaMemcpyHostToDevice, st));
  }
  if (!r.empty()) {
    KILN_CUDA_CHECK(op, cudaMemcpyAsync(rows, r.data(), r.size() * sizeof(uint32_t), cudaMemcpyHostToDevice, st));
  }
  KILN_CUDA_CHECK(op, cudaStreamSynchronize(st));  // p and r are read by the copies
}

// geev in real arithmetic (W: n real parts, then n imaginary parts; VR in
// LAPACK's pair layout), the complex64 eigenpairs assembled on the host as
// the CPU does.
void Eig::eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  const char* op = vectors_ ? "linalg::eig" : "linalg::eigvals";
  const array& a = inputs[0];
  Solver& s = cuda::solver(op);
  cudaDataType t = cuda::cuda_real_type(a, op);
  cuda::allocate_all(outputs, op);
  Dims d = cuda::dims_of(a);
  const int n = d.N;
  if (n == 0 || d.count == 0) return;
  char* buf = static_cast<char*>(cuda::scratch(d.count * d.matrix_bytes(), op));
  char* dw = static_cast<char*>(cuda::scratch(d.count * 2 * n * d.item, op));
  char* dvr = vectors_ ? static_cast<char*>(cuda::scratch(d.count * d.matrix_bytes(), op)) : nullptr;
  cuda::copy_in(a, buf, true, op);
  const cusolverEigMode_t jobvr = vectors_ ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
  size_t dev = 0, host = 0;
  KILN_CUSOLVER(op, cusolverDnXgeev_bufferSize(s.handle, s.params, CUSOLVER_EIG_MODE_NOVECTOR, jobvr, n, t, buf, n, t,
                                                dw, t, nullptr, 1, t, dvr, n, t, &dev, &host));
  cuda::Work w(dev, host, op);
  int* info = cuda::info_words(d.count, op);
  for (int64_t b = 0; b < d.count; ++b) {
    KILN_CUSOLVER(op, cusolverDnXgeev(s.handle, s.params, CUSOLVER_EIG_MODE_NOVECTOR, jobvr, n, t,
                                       buf + b * d.matrix_bytes(), n, t, dw + b * 2 * n * d.item, t, nullptr, 1, t,
                                       dvr ? dvr + b * d.matrix_bytes() : nullptr, n, t, w.device, w.device_bytes,
                                       w.host_ptr(), host, info + b));
  }
  std::vector<double> hw(d.count * 2 * n), hv(vectors_ ? d.count * n * n : 0);
  auto fetch = [&](const char* src, std::vector<double>& dst) {
    std::vector<char> raw(dst.size() * d.item);
    KILN_CUDA_CHECK(op, cudaMemcpyAsync(raw.data(), src, raw.size(), cudaMemcpyDeviceToHost, cuda::current_stream()));
    KILN_CUDA_CHECK(op, cudaStreamSynchronize(cuda::current_stream()));
    for (size_t i = 0; i < dst.size(); ++i) {
      dst[i] = d.item == 8 ? reinterpret_cast<const double*>(raw.data())[i]
                           : reinterpret_cast<const float*>(raw.data())[i];
    }
  };
  cuda::check_infos(info, d.count, op, a, "the QR algorithm did not converge");
  fetch(dw, hw);
  if (vectors_) fetch(dvr, hv);
  std::vector<complex64_t> cw(d.count * n), cv(vectors_ ? d.count * n * n : 0);
  for (int64_t b = 0; b < d.count; ++b) {
    const double* wr = hw.data() + b * 2 * n;
    const double* wi = wr + n;
    for (int j = 0; j < n; ++j) cw[b * n + j] = complex64_t(static_cast<float>(wr[j]), static_cast<float>(wi[j]));
    if (!vectors_) continue;
    const double* vr = hv.data() + b * n * n;  // column-major: vr[i + j n]
    complex64_t* vb = cv.data() + b * n * n;    // row-major
    for (int j = 0; j < n; ++j) {
      bool pair = wi[j] > 0 && j + 1 < n;
      for (int i = 0; i < n; ++i) {
        float re = static_cast<float>(vr[i + static_cast<int64_t>(j) * n]);
        float im = pair ? static_cast<float>(vr[i + static_cast<int64_t>(j + 1) * n]) : 0.0f;
        vb[i * n + j] = complex64_t(re, im);
        if (pair) vb[i * n + j + 1] = complex64_t(re, -im);
      }
      if (pair) ++j;
    }
  }
  cudaStream_t st = cuda::current_stream();
  KILN_CUDA_CHECK(op, cudaMemcpyAsync(cuda::out_ptr(outputs[0]), cw.data(), cw.size() * sizeof(complex64_t),
                                      cudaMemcpyHostToDevice, st));
  if (vectors_) {
    KILN_CUDA_CHECK(op, cudaMemcpyAsync(cuda::out_ptr(outputs[1]), cv.data(), cv.size() * sizeof(complex64_t),
                                        cudaMemcpyHostToDevice, st));
  }
  KILN_CUDA_CHECK(op, cudaStreamSynchronize(st));  // cw and cv are read by the copies
}

}  // namespace kiln
