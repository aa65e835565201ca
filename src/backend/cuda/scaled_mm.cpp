// scaled_matmul on the GPU (kiln bench row fp8_gemm): cuBLASLt's FP8 path
// on Hopper's tensor cores, with the scales applied inside the GEMM.
//
// Why it is shaped so: FP8 GEMM is compute bound (8192^3 is 1.1 PFLOP of
// work against ~3.3 TB/s for 200 MB of operands), and cuBLASLt's Hopper
// kernels (wgmma with fp32 promotion every 128 K, the block scales folded in
// at each promotion) are what torch._scaled_mm runs too; this file only
// lays the operands out the way those kernels take them:
// - FP8 in cuBLASLt is "TN" only. Row-major C[M, N] = A[M, K] B[K, N] is the
//   column-major C^T = B^T A^T, so cuBLASLt's first operand is our b read as
//   a transposed K-contiguous matrix (b = transpose(w) of a row-major [N, K]
//   weight: free) and its second our row-major a; any other layout costs one
//   copy into scratch.
// - Block scales (CUDA 12.9+): b's 128x128 scales in BLK128x128_32F layout
//   (K-block fastest: [ceil(N/128)][ceil(K/128)]), a's 1x128 scales in
//   VEC128_32F layout (row fastest: [ceil(K/128)][M]), as torch._scaled_mm
//   passes them; ours are row-major [M, kb] and [kb, nb], so both get a
//   small transposing copy (kb * (M + nb) floats).
// - Block scales go through cuBLASLt by default (KILN_CUDA_FP8_BLOCK_LT=0,
//   read at each call, sends them to the fallback below). Checked on the
//   H200 by tests/cuda/test_cuda_fp8.cpp, which runs both ways: the layouts
//   are right; the sums are a little less exact than per-tensor mode (the
//   tensor cores add each 128-wide K block in their own reduced precision
//   before the block's scale is applied in float32): up to 1.8e-4 of
//   sum |a*b| measured, against under 1e-4 for per-tensor scales. torch's
//   block-scaled _scaled_mm calls the same kernels.
// - Shapes whose layouts are not certain (block mode with K not a multiple
//   of 512 or N not of 128; anything not a multiple of 16) and problems
//   the heuristic has no kernel for take the fallback: dequantize to float32
//   (scaled_mm.cu, the CPU's math) and the float32 GEMM.
#include <cublasLt.h>

#include <compare>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backend/common/scaled_mm.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/quantized_fp.h"
#include "backend/cuda/scaled_mm.h"
#include "core/array_desc.h"
#include "core/primitives_scaled_mm.h"
#include "kiln/error.h"

namespace kiln {
namespace cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

cublasLtHandle_t lt_handle() {
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t x;
    cublasStatus_t st = cublasLtCreate(&x);
    if (st != CUBLAS_STATUS_SUCCESS) {
      throw Error("[scaled_matmul] cublasLtCreate failed: " + std::to_string(static_cast<int>(st)));
    }
    return x;
  }();
  return h;
}

cudaDataType_t fp8_type(Dtype t) { return t == Dtype::float8_e4m3fn ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

struct Fp8Key {
  Dtype ta, tb, out;
  bool block;
  int64_t M, N, K, lda, ldb;
  auto operator<=>(const Fp8Key&) const = default;
};

struct Fp8Plan {
  bool ok = false;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Fp8Plan() {
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

bool set_scale_pointers(cublasLtMatmulDesc_t op, const float* sa, const float* sb) {
  // cuBLASLt's A is our b, its B our a.
  const void* pa = sb;
  const void* pb = sa;
  return cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &pa, sizeof(pa)) ==
             CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &pb, sizeof(pb)) ==
             CUBLAS_STATUS_SUCCESS;
}

// The descriptors and the heuristic's algorithm; ok = false when cuBLASLt
// refuses any step (the caller falls back).
std::unique_ptr<Fp8Plan> make_plan(const Fp8Key& k, const float* sa, const float* sb) {
  auto p = std::make_unique<Fp8Plan>();
  auto good = [](cublasStatus_t st) { return st == CUBLAS_STATUS_SUCCESS; };
  if (!good(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F))) return p;
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  if (!good(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta))) ||
      !good(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)))) {
    return p;
  }
  if (k.block) {
#if CUBLAS_VERSION >= 120900
    int32_t mode_a = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, mode_b = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    if (!good(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a, sizeof(mode_a))) ||
        !good(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b, sizeof(mode_b)))) {
      return p;
    }
#else
    return p;  // no block scaling before CUDA 12.9: the fallback
#endif
  }
  if (!set_scale_pointers(p->op, sa, sb)) return p;
  const cudaDataType_t out_t = k.out == Dtype::bfloat16 ? CUDA_R_16BF : CUDA_R_32F;
  // Stored shapes, column-major: our b as K x N (ld ldb), our a as K x M.
  if (!good(cublasLtMatrixLayoutCreate(&p->la, fp8_type(k.tb), k.K, k.N, k.ldb)) ||
      !good(cublasLtMatrixLayoutCreate(&p->lb, fp8_type(k.ta), k.K, k.M, k.lda)) ||
      !good(cublasLtMatrixLayoutCreate(&p->lc, out_t, k.N, k.M, k.N))) {
    return p;
  }
  cublasLtMatmulPreference_t pref;
  if (!good(cublasLtMatmulPreferenceCreate(&pref))) return p;
  size_t ws = kWorkspaceBytes;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (good(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)))) {
    if (!good(cublasLtMatmulAlgoGetHeuristic(lt_handle(), p->op, p->la, p->lb, p->lc, p->lc, pref, 1, &result,
                                             &found))) {
      found = 0;
    }
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if (found == 0) return p;
  p->algo = result.algo;
  p->ok = true;
  return p;
}

// Runs the problem through cuBLASLt; false when it has no kernel for it.
bool lt_fp8(const Fp8Key& k, const char* a, const char* b, const float* sa, const float* sb, char* c, cudaStream_t s) {
  static std::mutex mutex;
  static auto* plans = new std::map<Fp8Key, std::unique_ptr<Fp8Plan>>();
  std::lock_guard lock(mutex);
  auto& slot = (*plans)[k];
  if (!slot) slot = make_plan(k, sa, sb);
  if (!slot->ok) return false;
  // The scale pointers change from call to call; the descriptor is shared,
  // so they are set and used under the lock.
  if (!set_scale_pointers(slot->op, sa, sb)) return false;
  void* ws = scratch(kWorkspaceBytes, "scaled_matmul");
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t st = cublasLtMatmul(lt_handle(), slot->op, &one, b, slot->la, a, slot->lb, &zero, c, slot->lc, c,
                                     slot->lc, &slot->algo, ws, kWorkspaceBytes, s);
  if (st != CUBLAS_STATUS_SUCCESS) {
    throw Error("[scaled_matmul] cuBLASLt error " + std::to_string(static_cast<int>(st)) + " for M=" +
                std::to_string(k.M) + " N=" + std::to_string(k.N) + " K=" + std::to_string(k.K));
  }
  return true;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool block_scales_through_cublaslt() {
  const char* e = std::getenv("KILN_CUDA_FP8_BLOCK_LT");
  return !(e && std::string(e) == "0");
}

// The cuBLASLt path: operands and scales laid out as its FP8 kernels take
// them (see the top of the file). False: use the fallback.
bool try_cublaslt(const array& a, const array& b, const char* pa, const char* pb, const float* sa, const float* sb,
                  bool block, array& out, char* pc) {
  const int64_t M = a.shape(0), K = a.shape(1), N = b.shape(1);
  if (M % 16 || N % 16 || K % 16) return false;
  const int64_t kb = smm::blocks(K), nb = smm::blocks(N);
  if (block && (!block_scales_through_cublaslt() || K % 128 || kb % 4 || N % 128)) return false;
  cudaStream_t s = current_stream();
  const auto& da = *a.desc();
  const auto& db = *b.desc();
  // a: K contiguous (row-major with a row stride lda).
  int64_t lda = da.strides[0];
  if (da.strides[1] != 1 || lda < K || lda % 16 || !aligned16(pa)) {
    char* tmp = static_cast<char*>(scratch(static_cast<size_t>(M * K), "scaled_matmul"));
    copy_strided(pa, da.dtype, da.shape, da.strides, tmp, da.dtype, {K, 1}, "scaled_matmul");
    pa = tmp;
    lda = K;
  }
  // b: K contiguous too (a transposed view of an [N, K] array).
  int64_t ldb = db.strides[1];
  if (db.strides[0] != 1 || ldb < K || ldb % 16 || !aligned16(pb)) {
    char* tmp = static_cast<char*>(scratch(static_cast<size_t>(K * N), "scaled_matmul"));
    copy_strided(pb, db.dtype, db.shape, db.strides, tmp, db.dtype, {1, K}, "scaled_matmul");
    pb = tmp;
    ldb = K;
  }
  if (block) {
    float* ta = static_cast<float*>(scratch(static_cast<size_t>(kb * M) * 4, "scaled_matmul"));
    float* tb = static_cast<float*>(scratch(static_cast<size_t>(nb * kb) * 4, "scaled_matmul"));
    copy_strided(reinterpret_cast<const char*>(sa), Dtype::float32, {static_cast<int>(kb), static_cast<int>(M)},
                 {1, kb}, reinterpret_cast<char*>(ta), Dtype::float32, {M, 1}, "scaled_matmul");
    copy_strided(reinterpret_cast<const char*>(sb), Dtype::float32, {static_cast<int>(nb), static_cast<int>(kb)},
                 {1, nb}, reinterpret_cast<char*>(tb), Dtype::float32, {kb, 1}, "scaled_matmul");
    sa = ta;
    sb = tb;
  }
  Fp8Key key{da.dtype, db.dtype, out.dtype(), block, M, N, K, lda, ldb};
  return lt_fp8(key, pa, pb, sa, sb, pc, s);
}

}  // namespace
}  // namespace cuda

void ScaledMatmul::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& a = inputs[0];
  const array& b = inputs[1];
  cuda::allocate(out, "scaled_matmul");
  if (out.size() == 0) return;
  const int64_t M = a.shape(0), K = a.shape(1), N = b.shape(1);
  char* pc = cuda::out_ptr(out);
  cudaStream_t s = cuda::current_stream();
  if (K == 0) {
    KILN_CUDA_CHECK("scaled_matmul", cudaMemsetAsync(pc, 0, out.nbytes(), s));
    return;
  }
  const char* pa = cuda::in_ptr(a);
  const char* pb = cuda::in_ptr(b);
  const float* sa = reinterpret_cast<const float*>(cuda::in_ptr(inputs[2]));
  const float* sb = reinterpret_cast<const float*>(cuda::in_ptr(inputs[3]));
  if (cuda::try_cublaslt(a, b, pa, pb, sa, sb, block_, out, pc)) return;
  // The fallback: float32 copies with the scales folded in, the float32 GEMM.
  const auto& da = *a.desc();
  const auto& db = *b.desc();
  float* fa = static_cast<float*>(cuda::scratch(static_cast<size_t>(M * K) * 4, "scaled_matmul"));
  float* fb = static_cast<float*>(cuda::scratch(static_cast<size_t>(K * N) * 4, "scaled_matmul"));
  cuda::scaled_mm_dequantize(pa, da.dtype, M, K, da.strides[0], da.strides[1], true, block_, sa, smm::blocks(K), fa);
  cuda::scaled_mm_dequantize(pb, db.dtype, K, N, db.strides[0], db.strides[1], false, block_, sb, smm::blocks(N), fb);
  const bool direct = out.dtype() == Dtype::float32;
  char* fc = direct ? pc : static_cast<char*>(cuda::scratch(static_cast<size_t>(M * N) * 4, "scaled_matmul"));
  cuda::gemm_rowmajor(Dtype::float32, reinterpret_cast<const char*>(fa), reinterpret_cast<const char*>(fb), false, fc,
                      M, N, K);
  if (!direct) {
    Strides rm{N, 1};
    cuda::copy_strided(fc, Dtype::float32, out.shape(), rm, pc, out.dtype(), rm, "scaled_matmul");
  }
}

}  // namespace kiln
