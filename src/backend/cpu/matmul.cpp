// Batched matmul on the CPU. float32 and bfloat16 go to Kiln's own packed
// kernels (gemm.h); float64 to OpenBLAS; float16 is widened to float32;
// integers use a simple blocked loop (exact, rarely hot); complex64 goes to
// OpenBLAS's cgemm.
#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "backend/cpu/cast.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/threading.h"
#include "core/array_desc.h"
#include "core/ops_util.h"
#include "core/primitives.h"

namespace kiln {
namespace {

// KILN_SGEMM=openblas routes float32 to OpenBLAS (for comparisons).
bool use_openblas_sgemm() {
  static const bool v = [] {
    const char* e = std::getenv("KILN_SGEMM");
    return e && std::string(e) == "openblas";
  }();
  return v;
}

struct MatView {
  const char* data;
  int64_t row_stride, col_stride;
};

template <typename T>
void int_gemm(int64_t M, int64_t N, int64_t K, MatView a, MatView b, T* c) {
  cpu::parallel_for(M, 1, [&](int64_t r0, int64_t r1) {
    std::unique_ptr<T[]> acc(new T[N]);  // not vector<T>: vector<bool> has no data()
    for (int64_t i = r0; i < r1; ++i) {
      std::fill(acc.get(), acc.get() + N, T(0));
      for (int64_t k = 0; k < K; ++k) {
        T av = reinterpret_cast<const T*>(a.data)[i * a.row_stride + k * a.col_stride];
        const T* brow = reinterpret_cast<const T*>(b.data) + k * b.row_stride;
        for (int64_t j = 0; j < N; ++j) {
          if constexpr (std::is_same_v<T, bool>) {
            acc[j] = acc[j] || (av && brow[j * b.col_stride]);
          } else {
            using U = cpu::ko::wrap_unsigned_t<T>;  // wrap on overflow instead of UB
            acc[j] = static_cast<T>(static_cast<U>(acc[j]) + static_cast<U>(av) * static_cast<U>(brow[j * b.col_stride]));
          }
        }
      }
      std::memcpy(c + i * N, acc.get(), N * sizeof(T));
    }
  });
}

// A row-major float32 copy of a half-precision matrix view.
std::vector<float> widen(const MatView& v, Dtype t, int64_t rows, int64_t cols) {
  std::vector<float> out(rows * cols);
  cpu::dispatch_all(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = reinterpret_cast<const T*>(v.data);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = cpu::convert<float>(p[i * v.row_stride + j * v.col_stride]);
    }
  });
  return out;
}

// BLAS needs one of the two strides to be 1 and the other >= the extent.
bool blas_layout(const MatView& v, int64_t rows, int64_t cols, CBLAS_TRANSPOSE& trans, int64_t& ld) {
  if (v.col_stride == 1 && v.row_stride >= std::max<int64_t>(cols, 1)) {
    trans = CblasNoTrans;
    ld = v.row_stride;
    return true;
  }
  if (v.row_stride == 1 && v.col_stride >= std::max<int64_t>(rows, 1)) {
    trans = CblasTrans;
    ld = v.col_stride;
    return true;
  }
  return false;
}

void gemm_one(Dtype t, int64_t M, int64_t N, int64_t K, MatView a, MatView b, char* c) {
  int threads = cpu_threads();
  if (t == float32 && !use_openblas_sgemm()) {
    cpu::gemm_f32({M, N, K, a.data, a.row_stride, a.col_stride, b.data, b.row_stride, b.col_stride, c, N, threads});
    return;
  }
  if (t == bfloat16) {
    cpu::gemm_bf16({M, N, K, a.data, a.row_stride, a.col_stride, b.data, b.row_stride, b.col_stride, c, N, threads},
                   bfloat16);
    return;
  }
  if (t == float32 || t == float64 || t == complex64) {
    CBLAS_TRANSPOSE ta, tb;
    int64_t lda, ldb;
    std::vector<char> ca, cb;
    int item = static_cast<int>(size_of(t));
    auto compact = [&](MatView& v, int64_t rows, int64_t cols, std::vector<char>& store) {
      store.resize(rows * cols * item);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
          std::memcpy(&store[(i * cols + j) * item], v.data + (i * v.row_stride + j * v.col_stride) * item, item);
      v = {store.data(), cols, 1};
    };
    if (!blas_layout(a, M, K, ta, lda)) { compact(a, M, K, ca); blas_layout(a, M, K, ta, lda); }
    if (!blas_layout(b, K, N, tb, ldb)) { compact(b, K, N, cb); blas_layout(b, K, N, tb, ldb); }
    openblas_set_num_threads(threads);
    if (t == float32) {
      cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, reinterpret_cast<const float*>(a.data), lda,
                  reinterpret_cast<const float*>(b.data), ldb, 0.0f, reinterpret_cast<float*>(c), N);
    } else if (t == complex64) {
      const complex64_t one(1.0f, 0.0f), zero(0.0f, 0.0f);
      cblas_cgemm(CblasRowMajor, ta, tb, M, N, K, &one, a.data, lda, b.data, ldb, &zero, c, N);
    } else {
      cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, reinterpret_cast<const double*>(a.data), lda,
                  reinterpret_cast<const double*>(b.data), ldb, 0.0, reinterpret_cast<double*>(c), N);
    }
    return;
  }
  if (t == float16) {
    std::vector<float> wa = widen(a, t, M, K), wb = widen(b, t, K, N);
    std::vector<float> wc(M * N);
    cpu::gemm_f32({M, N, K, wa.data(), K, 1, wb.data(), N, 1, wc.data(), N, threads});
    cpu::cast_contiguous(wc.data(), float32, c, float16, wc.size());
    return;
  }
  cpu::dispatch_all(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) {
      int_gemm<T>(M, N, K, a, b, reinterpret_cast<T*>(c));
    } else {
      throw Error(std::string("[matmul] unsupported dtype ") + dtype_name(t));
    }
  });
}

}  // namespace

void Matmul::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& a = inputs[0];
  const array& b = inputs[1];
  detail::allocate(out, name());
  int nd = out.ndim();
  int64_t M = out.shape()[nd - 2], N = out.shape()[nd - 1], K = a.shape()[nd - 1];
  if (out.size() == 0) return;
  int64_t item = static_cast<int64_t>(out.itemsize());
  char* c = detail::data_ptr(out);
  if (K == 0) {
    std::memset(c, 0, out.nbytes());
    return;
  }
  const auto& sa = a.desc()->strides;
  const auto& sb = b.desc()->strides;
  int64_t batches = static_cast<int64_t>(out.size()) / (M * N);
  const char* pa = detail::data_ptr(a);
  const char* pb = detail::data_ptr(b);
  for (int64_t bi = 0; bi < batches; ++bi) {
    // Batch offsets through each operand's (possibly zero) batch strides.
    int64_t rem = bi, oa = 0, ob = 0;
    for (int d = nd - 3; d >= 0; --d) {
      int64_t idx = rem % out.shape()[d];
      rem /= out.shape()[d];
      oa += idx * sa[d];
      ob += idx * sb[d];
    }
    MatView va{pa + oa * item, sa[nd - 2], sa[nd - 1]};
    MatView vb{pb + ob * item, sb[nd - 2], sb[nd - 1]};
    gemm_one(out.dtype(), M, N, K, va, vb, c + bi * M * N * item);
  }
}

}  // namespace kiln
