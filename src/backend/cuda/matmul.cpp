// Batched matmul on the GPU. float32 / tf32, bfloat16, float16 and float64
// go through cuBLASLt (row-major C = A B computed as the column-major
// C^T = B^T A^T, operands in place whenever one of their two matrix strides
// is 1 and the batch dims collapse to one stride); M <= 8 with weights in
// the [N, K] layout goes to Kiln's GEMV (gemv.cu) or cuBLASLt, whichever
// ran faster on the problem the first time it was seen; integer types use a
// simple kernel (integer_matmul.cu); complex64 is cuBLASLt's CUDA_C_32F
// (cgemm, with complex alpha and beta). KILN_CUDA_TF32=1 (or set_tf32_matmul)
// lets float32 use the tensor cores' tf32 mode. cuBLASLt descriptors and the
// heuristic's choice are cached per problem (shape, dtype, layout).
#include <cublasLt.h>

#include <algorithm>
#include <atomic>
#include <compare>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/gemv.h"
#include "core/ops_util.h"
#include "core/primitives.h"

namespace kiln {
namespace cuda {

void integer_matmul(Dtype t, const char* a, const char* b, char* c, int64_t batch, int64_t M, int64_t N, int64_t K);

namespace {

#define KILN_CUBLAS_CHECK(call)                                                                      \
  do {                                                                                              \
    cublasStatus_t kiln_st_ = (call);                                                               \
    if (kiln_st_ != CUBLAS_STATUS_SUCCESS) {                                                        \
      throw Error(std::string("[matmul] cuBLASLt error ") + std::to_string(static_cast<int>(kiln_st_)) + \
                  " in " #call);                                                                    \
    }                                                                                               \
  } while (0)

cublasLtHandle_t handle() {
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t x;
    KILN_CUBLAS_CHECK(cublasLtCreate(&x));
    return x;
  }();
  return h;
}

std::atomic<bool>& tf32_flag() {
  static std::atomic<bool> flag = [] {
    const char* e = std::getenv("KILN_CUDA_TF32");
    return e && std::string(e) == "1";
  }();
  return flag;
}

// One operand as cuBLASLt sees it.
struct Operand {
  const char* ptr;
  bool transposed;  // row stride 1 (a transposed view)
  int64_t ld;
  int64_t batch_stride;
};

// Matrix strides and one batch stride for an operand of shape [..., R, C],
// when its layout allows it.
bool describe_operand(const array& x, const char* ptr, Operand& o) {
  const auto& d = *x.desc();
  int nd = x.ndim();
  int64_t R = d.shape[nd - 2], C = d.shape[nd - 1];
  int64_t rs = d.strides[nd - 2], cs = d.strides[nd - 1];
  if (C == 1) cs = 1;
  if (R == 1) rs = std::max<int64_t>(C, 1);
  if (cs == 1 && rs >= std::max<int64_t>(C, 1)) {
    o.transposed = false;
    o.ld = rs;
  } else if (rs == 1 && cs >= std::max<int64_t>(R, 1)) {
    o.transposed = true;
    o.ld = cs;
  } else {
    return false;
  }
  // Batch dims must collapse to one linear stride (or 0: broadcast).
  int64_t stride = -1, expected_next = 0;
  for (int k = nd - 3; k >= 0; --k) {
    if (d.shape[k] == 1) continue;
    if (stride < 0) {
      stride = d.strides[k];
      expected_next = stride * d.shape[k];
    } else {
      if (d.strides[k] != expected_next) return false;
      expected_next = d.strides[k] * d.shape[k];
    }
  }
  o.batch_stride = stride < 0 ? 0 : stride;
  o.ptr = ptr;
  return true;
}

// A row-major copy of x in scratch memory.
const char* contiguous_copy(const array& x, const char* ptr) {
  const auto& d = *x.desc();
  char* tmp = static_cast<char*>(scratch(x.nbytes(), "matmul"));
  copy_strided(ptr, d.dtype, d.shape, d.strides, tmp, d.dtype, row_major_strides(d.shape), "matmul");
  return tmp;
}

cudaDataType_t data_type(Dtype t) {
  switch (t) {
    case Dtype::float16: return CUDA_R_16F;
    case Dtype::bfloat16: return CUDA_R_16BF;
    case Dtype::float64: return CUDA_R_64F;
    case Dtype::complex64: return CUDA_C_32F;
    default: return CUDA_R_32F;
  }
}

// Everything cuBLASLt needs for one problem: built (descriptors, layouts,
// the heuristic's algorithm) on the first call and reused afterwards.
struct LtKey {
  Dtype dtype;
  bool tf32, ta, tb;
  int64_t batch, M, N, K, lda, ldb, stride_a, stride_b;
  auto operator<=>(const LtKey&) const = default;
};

struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~LtPlan() {
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

std::unique_ptr<LtPlan> make_plan(const LtKey& k) {
  auto p = std::make_unique<LtPlan>();
  cudaDataType_t dt = data_type(k.dtype);
  cublasComputeType_t ct = k.dtype == Dtype::float64 ? CUBLAS_COMPUTE_64F
                           : k.tf32                  ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                     : CUBLAS_COMPUTE_32F;
  cudaDataType_t scale_t = k.dtype == Dtype::float64 ? CUDA_R_64F : k.dtype == Dtype::complex64 ? CUDA_C_32F : CUDA_R_32F;
  KILN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, ct, scale_t));
  // cuBLASLt's first operand is B (as an N x K column-major op), its second A.
  cublasOperation_t ta = k.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = k.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  // Stored shapes (column-major rows x cols).
  KILN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, dt, k.tb ? k.K : k.N, k.tb ? k.N : k.K, k.ldb));
  KILN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, dt, k.ta ? k.M : k.K, k.ta ? k.K : k.M, k.lda));
  KILN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lc, dt, k.N, k.M, k.N));
  if (k.batch > 1) {
    int32_t bc = static_cast<int32_t>(k.batch);
    int64_t sc = k.M * k.N;
    for (auto [l, st] : {std::pair{p->la, k.stride_b}, std::pair{p->lb, k.stride_a}, std::pair{p->lc, sc}}) {
      KILN_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof(bc)));
      KILN_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st, sizeof(st)));
    }
  }
  cublasLtMatmulPreference_t pref;
  KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws_size = kWorkspaceBytes;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size,
                                                           sizeof(ws_size));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(handle(), p->op, p->la, p->lb, p->lc, p->lc, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    throw Error(std::string("[matmul] cuBLASLt has no algorithm for ") + dtype_name(k.dtype) + " M=" +
                std::to_string(k.M) + " N=" + std::to_string(k.N) + " K=" + std::to_string(k.K));
  }
  p->algo = result.algo;
  return p;
}

// The plan for k, built once per key; plans live until exit. Thread-safe:
// a plan is never changed after it is built.
const LtPlan& plan_for(const LtKey& k) {
  static std::mutex mutex;
  static auto* plans = new std::map<LtKey, std::unique_ptr<LtPlan>>();
  std::lock_guard lock(mutex);
  auto& slot = (*plans)[k];
  if (!slot) slot = make_plan(k);
  return *slot;
}

// On stream s; ws: kWorkspaceBytes of workspace (null: the stream's scratch).
void lt_matmul(Dtype t, const Operand& a, const Operand& b, char* c, int64_t batch, int64_t M, int64_t N, int64_t K,
               cudaStream_t s, void* ws = nullptr) {
  LtKey key{t, t == Dtype::float32 && tf32_matmul(), a.transposed, b.transposed, batch, M, N, K, a.ld, b.ld,
            batch > 1 ? a.batch_stride : 0, batch > 1 ? b.batch_stride : 0};
  const LtPlan& p = plan_for(key);
  if (!ws) ws = scratch(kWorkspaceBytes, "matmul");
  double one64 = 1.0, zero64 = 0.0;
  float one32 = 1.f, zero32 = 0.f;
  const complex64_t one_c(1.0f, 0.0f), zero_c(0.0f, 0.0f);
  const void* alpha = t == Dtype::float64 ? static_cast<const void*>(&one64) : &one32;
  const void* beta = t == Dtype::float64 ? static_cast<const void*>(&zero64) : &zero32;
  if (t == Dtype::complex64) alpha = &one_c, beta = &zero_c;
  KILN_CUBLAS_CHECK(cublasLtMatmul(handle(), p.op, alpha, b.ptr, p.la, a.ptr, p.lb, beta, c, p.lc, c, p.lc, &p.algo,
                                   ws, kWorkspaceBytes, s));
}

// ---- Small M in the GEMV layout: Kiln's GEMV or cuBLASLt ----
//
// Neither is faster at every shape, so the first time a problem (dtype, M,
// N, K, leading dims) is seen both are timed and the faster one is kept for
// it: on a private stream, into a private output and workspace (the inputs
// are only read, and their values do not change the time), a warm-up launch
// each, then five alternating rounds of one launch each, every one after
// a scrub of the L2 and timed alone. This works while the eval stream is
// being captured into a CUDA graph (the capture is relaxed; the private
// stream is not captured), so a compiled decode step picks per layer too. KILN_CUDA_GEMV=kiln or =cublas fixes the choice;
// KILN_CUDA_GEMV_LOG=1 prints each decision with its times.
enum class SmallM { kGemv, kCublas, kAuto };  // kAuto: KILN_CUDA_GEMV unset

std::atomic<int> small_m_override{-1};

SmallM small_m_policy() {
  if (const int o = small_m_override.load(std::memory_order_relaxed); o >= 0) {
    return o == 1 ? SmallM::kGemv : SmallM::kCublas;
  }
  static const SmallM p = [] {
    const char* e = std::getenv("KILN_CUDA_GEMV");
    const std::string v = e ? e : "";
    return v == "kiln" ? SmallM::kGemv : v == "cublas" ? SmallM::kCublas : SmallM::kAuto;
  }();
  return p;
}

// The faster path for a problem the GEMV covers (gemv_covers).
SmallM time_small_m(Dtype t, const Operand& a, const Operand& b, int64_t M, int64_t N, int64_t K) {
  static cudaStream_t ts = [] {
    cudaStream_t x;
    KILN_CUDA_CHECK("matmul", cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
    return x;
  }();
  char* y = nullptr;
  void* ws = nullptr;
  KILN_CUDA_CHECK("matmul", cudaMallocAsync(reinterpret_cast<void**>(&y), M * N * size_of(t), ts));
  KILN_CUDA_CHECK("matmul", cudaMallocAsync(&ws, kWorkspaceBytes, ts));
  // Each timed launch starts with a cold L2 (a memset of twice its size
  // first): the weights of a decode step are read from memory, and 4096^2
  // bf16 weights fit the H100's L2, which made back-to-back launches favour
  // the wrong kernel there. The memset leaves dirty lines whose write-back
  // slows both timed kernels by 15-20% (H200), narrowing gaps of a few per
  // cent; a scrub by reading would be cleaner (docs/performance.md, session 35).
  int device = 0, l2 = 0;
  KILN_CUDA_CHECK("matmul", cudaGetDevice(&device));
  KILN_CUDA_CHECK("matmul", cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  const size_t scrub_bytes = 2 * static_cast<size_t>(std::max(l2, 1 << 20));
  void* scrub = nullptr;
  KILN_CUDA_CHECK("matmul", cudaMallocAsync(&scrub, scrub_bytes, ts));
  cudaEvent_t e0, e1;
  KILN_CUDA_CHECK("matmul", cudaEventCreate(&e0));
  KILN_CUDA_CHECK("matmul", cudaEventCreate(&e1));
  gemv(t, a.ptr, a.ld, b.ptr, b.ld, y, M, N, K, ts);  // warm-up launches
  lt_matmul(t, a, b, y, 1, M, N, K, ts, ws);
  float total[2] = {0.f, 0.f};
  for (int round = 0; round < 5; ++round) {
    for (int which = 0; which < 2; ++which) {
      KILN_CUDA_CHECK("matmul", cudaMemsetAsync(scrub, round, scrub_bytes, ts));
      KILN_CUDA_CHECK("matmul", cudaEventRecord(e0, ts));
      if (which == 0) {
        gemv(t, a.ptr, a.ld, b.ptr, b.ld, y, M, N, K, ts);
      } else {
        lt_matmul(t, a, b, y, 1, M, N, K, ts, ws);
      }
      KILN_CUDA_CHECK("matmul", cudaEventRecord(e1, ts));
      KILN_CUDA_CHECK("matmul", cudaEventSynchronize(e1));
      float ms = 0.f;
      KILN_CUDA_CHECK("matmul", cudaEventElapsedTime(&ms, e0, e1));
      total[which] += ms;
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  KILN_CUDA_CHECK("matmul", cudaFreeAsync(y, ts));
  KILN_CUDA_CHECK("matmul", cudaFreeAsync(ws, ts));
  KILN_CUDA_CHECK("matmul", cudaFreeAsync(scrub, ts));
  KILN_CUDA_CHECK("matmul", cudaStreamSynchronize(ts));
  const SmallM pick = total[1] < total[0] ? SmallM::kCublas : SmallM::kGemv;
  const char* log = std::getenv("KILN_CUDA_GEMV_LOG");
  if (log && std::string(log) == "1") {
    std::fprintf(stderr, "[kiln] matmul %s M=%lld N=%lld K=%lld: GEMV %.2f us, cuBLASLt %.2f us -> %s\n", dtype_name(t),
                 static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K),
                 1000.0 * total[0] / 5, 1000.0 * total[1] / 5, pick == SmallM::kGemv ? "GEMV" : "cuBLASLt");
  }
  return pick;
}

// Kiln's GEMV or cuBLASLt for a problem the GEMV covers (decided once per
// problem, see above).
SmallM choose_small_m(Dtype t, const Operand& a, const Operand& b, int64_t M, int64_t N, int64_t K) {
  if (const SmallM p = small_m_policy(); p != SmallM::kAuto) return p;
  const LtKey key{t, t == Dtype::float32 && tf32_matmul(), false, true, 1, M, N, K, a.ld, b.ld, 0, 0};
  static std::mutex mutex;
  static auto* choices = new std::map<LtKey, SmallM>();
  {
    std::lock_guard lock(mutex);
    if (auto it = choices->find(key); it != choices->end()) return it->second;
  }
  const SmallM pick = time_small_m(t, a, b, M, N, K);
  std::lock_guard lock(mutex);
  return choices->emplace(key, pick).first->second;
}

}  // namespace

// For quantized_matmul's dequantize-then-GEMM path (quantized.cu).
void gemm_rowmajor(Dtype t, const char* a, const char* b, bool b_is_nk, char* c, int64_t M, int64_t N, int64_t K) {
  Operand oa{a, false, K, 0};
  Operand ob{b, b_is_nk, b_is_nk ? K : N, 0};
  lt_matmul(t, oa, ob, c, 1, M, N, K, current_stream());
}

void set_tf32_matmul(bool on) { tf32_flag() = on; }
void set_small_m_override(int which) { small_m_override.store(which, std::memory_order_relaxed); }
bool tf32_matmul() { return tf32_flag(); }

}  // namespace cuda

void Matmul::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& a = inputs[0];
  const array& b = inputs[1];
  cuda::allocate(out, "matmul");
  int nd = out.ndim();
  int64_t M = out.shape()[nd - 2], N = out.shape()[nd - 1], K = a.shape()[a.ndim() - 1];
  int64_t batch = M * N == 0 ? 0 : static_cast<int64_t>(out.size()) / (M * N);
  if (out.size() == 0) return;
  Dtype t = out.dtype();
  const char* pa = cuda::in_ptr(a);
  const char* pb = cuda::in_ptr(b);
  char* pc = cuda::out_ptr(out);
  cudaStream_t s = cuda::current_stream();
  if (K == 0) {
    KILN_CUDA_CHECK("matmul", cudaMemsetAsync(pc, 0, out.nbytes(), s));
    return;
  }
  if (!is_floating_point(t) && !is_complex(t)) {
    const char* ca = detail::is_row_contiguous(a.shape(), a.desc()->strides) ? pa : cuda::contiguous_copy(a, pa);
    const char* cb = detail::is_row_contiguous(b.shape(), b.desc()->strides) ? pb : cuda::contiguous_copy(b, pb);
    // Broadcast batch dims were materialized by the copy only when strided.
    cuda::integer_matmul(t, ca, cb, pc, batch, M, N, K);
    return;
  }
  cuda::Operand oa, ob;
  if (!cuda::describe_operand(a, pa, oa)) {
    pa = cuda::contiguous_copy(a, pa);
    oa = {pa, false, K, M * K};
  }
  if (!cuda::describe_operand(b, pb, ob)) {
    pb = cuda::contiguous_copy(b, pb);
    ob = {pb, false, N, K * N};
  }
  if (batch == 1 && M <= 8 && !is_complex(t) && ob.transposed && !oa.transposed &&
      cuda::gemv_covers(t, oa.ptr, oa.ld, ob.ptr, ob.ld, M, K) &&
      cuda::choose_small_m(t, oa, ob, M, N, K) == cuda::SmallM::kGemv &&
      cuda::gemv(t, oa.ptr, oa.ld, ob.ptr, ob.ld, pc, M, N, K)) {
    return;
  }
  cuda::lt_matmul(t, oa, ob, pc, batch, M, N, K, s);
}

}  // namespace kiln
