// D3 GEMM and D5 matvec (decode), fp32 and bf16, against OpenBLAS in the
// same run. GEMM is compute bound from a few hundred rows on; matvec streams
// the weights once and is bandwidth bound. D3 conv2d is a ResNet 3x3 layer
// (channels last), against im2col + OpenBLAS sgemm.
#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <memory>

#include "bench.h"
#include "onednn_peer.h"

namespace kiln::bench {
namespace {

// OpenBLAS has bf16 GEMM/GEMV only when built with BUILD_BFLOAT16 (Debian's
// 0.3.21 is not, though its cblas.h declares them), so they are looked up at
// run time and the bf16 rows simply have no peer where they are missing.
using SbgemmFn = decltype(&cblas_sbgemm);
using SbgemvFn = decltype(&cblas_sbgemv);

SbgemmFn find_sbgemm() { return reinterpret_cast<SbgemmFn>(dlsym(RTLD_DEFAULT, "cblas_sbgemm")); }
SbgemvFn find_sbgemv() { return reinterpret_cast<SbgemvFn>(dlsym(RTLD_DEFAULT, "cblas_sbgemv")); }

// Peers of bf16 drills write fp32 (OpenBLAS has no bf16 output), Kiln writes
// bf16: the check allows for the output rounding.
constexpr double kFp32Tolerance = 1e-4;  // summation order differs over K
constexpr double kBf16Tolerance = 1e-2;

Shape int_shape(int64_t a, int64_t b) { return {static_cast<int>(a), static_cast<int>(b)}; }

// C[M, N] = A[M, K] B[K, N], all row-major.
void add_gemm(std::vector<DrillSpec>& out, Dtype dtype, int64_t m, int64_t k, int64_t n) {
  const double item = static_cast<double>(size_of(dtype));
  const double bytes = item * (static_cast<double>(m) * k + static_cast<double>(k) * n + static_cast<double>(m) * n);
  const double flops = 2.0 * m * k * n;
  const std::string name = dtype == float32 ? "sgemm" : "bf16_gemm";
  out.push_back({"D3", name, dtype, {m, k, n}, bytes, flops, [=] {
    auto st = std::make_shared<DrillState>();
    // Inputs in [-1, 1): the products' sums stay O(sqrt(K)).
    st->inputs = {random_input(int_shape(m, k), dtype, 11, -1, 1), random_input(int_shape(k, n), dtype, 12, -1, 1)};
    st->out_elements = m * n;
    DrillCase c = kiln_case(st, [](const std::vector<array>& in) { return matmul(in[0], in[1]); });
    if (dtype == float32) {
      st->ref = make_float_buffer(m * n);
      c.peer_name = "openblas_sgemm";
      c.run_peer = [st, m, k, n] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, st->inputs[0].data<float>(), k,
                    st->inputs[1].data<float>(), n, 0.0f, st->ref.get(), n);
      };
      compare_with_float_reference(c, st, kFp32Tolerance);
    } else if (SbgemmFn sbgemm = find_sbgemm()) {
      st->ref = make_float_buffer(m * n);
      c.peer_name = "openblas_sbgemm";
      c.run_peer = [st, m, k, n, sbgemm] {
        auto bits = [&](int i) { return reinterpret_cast<const ::bfloat16*>(st->inputs[i].data<bfloat16_t>()); };
        sbgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, bits(0), k, bits(1), n, 0.0f,
               st->ref.get(), n);
      };
      compare_with_float_reference(c, st, kBf16Tolerance);
    } else {
      st->ref = make_float_buffer(m * n);
      auto bits = [&](int i) { return reinterpret_cast<const uint16_t*>(st->inputs[i].data<bfloat16_t>()); };
      std::shared_ptr<OnednnMatmul> dnnl = OnednnMatmul::make(m, k, n, bits(0), bits(1), st->ref.get());
      if (dnnl) {
        c.peer_name = "onednn_matmul";
        c.run_peer = [st, dnnl] { dnnl->run(); };
        compare_with_float_reference(c, st, kBf16Tolerance);
      }
    }
    return c;
  }});
}

// y[1, N] = x[1, K] W[K, N]: the decode step of a linear layer.
void add_matvec(std::vector<DrillSpec>& out, Dtype dtype, int64_t k, int64_t n) {
  const double item = static_cast<double>(size_of(dtype));
  const double bytes = item * (static_cast<double>(k) * n + k + n);
  const double flops = 2.0 * k * n;
  const std::string name = dtype == float32 ? "sgemv" : "bf16_gemv";
  out.push_back({"D5", name, dtype, {k, n}, bytes, flops, [=] {
    auto st = std::make_shared<DrillState>();
    st->inputs = {random_input(int_shape(1, k), dtype, 13, -1, 1), random_input(int_shape(k, n), dtype, 14, -1, 1)};
    st->out_elements = n;
    DrillCase c = kiln_case(st, [](const std::vector<array>& in) { return matmul(in[0], in[1]); });
    // Row-major W[K, N] transposed gives y = W^T x.
    if (dtype == float32) {
      st->ref = make_float_buffer(n);
      c.peer_name = "openblas_sgemv";
      c.run_peer = [st, k, n] {
        cblas_sgemv(CblasRowMajor, CblasTrans, k, n, 1.0f, st->inputs[1].data<float>(), n,
                    st->inputs[0].data<float>(), 1, 0.0f, st->ref.get(), 1);
      };
      compare_with_float_reference(c, st, kFp32Tolerance);
    } else if (SbgemvFn sbgemv = find_sbgemv()) {
      st->ref = make_float_buffer(n);
      c.peer_name = "openblas_sbgemv";
      c.run_peer = [st, k, n, sbgemv] {
        auto bits = [&](int i) { return reinterpret_cast<const ::bfloat16*>(st->inputs[i].data<bfloat16_t>()); };
        sbgemv(CblasRowMajor, CblasTrans, k, n, 1.0f, bits(1), n, bits(0), 1, 0.0f, st->ref.get(), 1);
      };
      compare_with_float_reference(c, st, kBf16Tolerance);
    }
    return c;
  }});
}

// out[N, H, W, O] = conv2d(x[N, H, W, C], w[O, 3, 3, C], padding 1): a
// ResNet stage's 3x3 convolution. The peer lays out the patches (im2col)
// and multiplies them with OpenBLAS's sgemm, as a framework without its own
// convolution kernels would.
void add_conv2d(std::vector<DrillSpec>& out, int64_t n, int64_t hw, int64_t c, int64_t o) {
  const int64_t rows = n * hw * hw, patch = 9 * c;
  const double bytes = 4.0 * (static_cast<double>(rows) * c + static_cast<double>(o) * patch +
                              static_cast<double>(rows) * o);
  const double flops = 2.0 * rows * patch * o;
  out.push_back({"D3", "conv2d_3x3", float32, {n, hw, hw, c, o}, bytes, flops, [=] {
    auto st = std::make_shared<DrillState>();
    const int ni = static_cast<int>(n), h = static_cast<int>(hw), ci = static_cast<int>(c), oi = static_cast<int>(o);
    st->inputs = {random_input({ni, h, h, ci}, float32, 15, -1, 1), random_input({oi, 3, 3, ci}, float32, 16, -1, 1)};
    st->out_elements = rows * o;
    DrillCase dc = kiln_case(st, [](const std::vector<array>& in) { return conv2d(in[0], in[1], {1, 1}, {1, 1}); });
    st->ref = make_float_buffer(rows * o);
    auto cols = std::shared_ptr<float>(new float[rows * patch], std::default_delete<float[]>());
    dc.peer_name = "im2col+openblas_sgemm";
    dc.run_peer = [st, cols, n, hw, c, o, rows, patch] {
      const float* x = st->inputs[0].data<float>();
      float* col = cols.get();
#pragma omp parallel for
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t b = r / (hw * hw), i = r / hw % hw, j = r % hw;
        for (int64_t di = 0; di < 3; ++di)
          for (int64_t dj = 0; dj < 3; ++dj) {
            const int64_t si = i + di - 1, sj = j + dj - 1;
            float* dst = col + r * patch + (di * 3 + dj) * c;
            if (si < 0 || si >= hw || sj < 0 || sj >= hw) {
              std::fill(dst, dst + c, 0.0f);
            } else {
              std::copy_n(x + ((b * hw + si) * hw + sj) * c, c, dst);
            }
          }
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, o, patch, 1.0f, col, patch,
                  st->inputs[1].data<float>(), patch, 0.0f, st->ref.get(), o);
    };
    compare_with_float_reference(dc, st, kFp32Tolerance);
    return dc;
  }});
}

}  // namespace

void add_linalg_drills(std::vector<DrillSpec>& out, bool quick) {
  // Square sizes double, so the table shows the cost curve.
  const std::vector<int64_t> squares = quick ? std::vector<int64_t>{64, 128, 256}
                                             : std::vector<int64_t>{256, 512, 1024, 2048, 4096};
  // LLM weights K x N: an attention projection and an MLP up-projection
  // (Llama-3-8B); --quick keeps the shapes' proportions only roughly.
  const std::vector<std::pair<int64_t, int64_t>> weights =
      quick ? std::vector<std::pair<int64_t, int64_t>>{{1024, 1024}, {1024, 2048}}
            : std::vector<std::pair<int64_t, int64_t>>{{4096, 4096}, {4096, 14336}};
  // M = 1 is the matvec of D5; these are prefill batches.
  const std::vector<int64_t> batch_rows = quick ? std::vector<int64_t>{16, 64} : std::vector<int64_t>{16, 128, 512};

  for (Dtype dtype : {float32, bfloat16}) {
    for (int64_t s : squares) add_gemm(out, dtype, s, s, s);
    for (auto [k, n] : weights)
      for (int64_t m : batch_rows) add_gemm(out, dtype, m, k, n);
  }
  for (Dtype dtype : {float32, bfloat16})
    for (auto [k, n] : weights) add_matvec(out, dtype, k, n);
  if (quick) add_conv2d(out, 1, 14, 32, 32);
  else add_conv2d(out, 8, 56, 64, 64);
}

}  // namespace kiln::bench
