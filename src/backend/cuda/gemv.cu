// Small-M matrix products for decode (M = 1..8): y[m, n] = sum_k x[m, k] *
// w[n, k], where w is the weights in the [N, K] layout of a linear layer
// (matmul(x, transpose(w)) gives b with row stride 1). The weights must be
// read once at full bandwidth, whatever M is.
//
// bf16 / fp16 (gemv_mma): a block owns 16 rows of w and its 8 warps split K;
// each 16-byte load of w feeds the tensor cores (mma m16n8k16: the 16 rows
// of w times the M <= 8 rows of x as the 8 columns), so every weight is
// loaded and converted once for all M rows of x, and the FMAs cost nothing.
// A dot product does not care about the order of k, so each thread's 8
// contiguous elements are fed to the k slots its fragment registers hold
// (the same permutation for w and x) instead of shuffling to the documented
// k order. The warps' partial sums meet in shared memory.
//
// float32 (gemv_rows): a warp per row of w, 16-byte loads, the M dot
// products reduced with warp shuffles; x stays in L1/L2.
#include "backend/cuda/gemv.h"
#include "backend/cuda/kernel_utils.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__device__ __forceinline__ float to_f(T x) {
  return static_cast<float>(x);
}

template <typename T, int M>
__global__ void __launch_bounds__(256) gemv_rows(const T* __restrict__ x, int64_t ldx, const T* __restrict__ w,
                                                 int64_t ldw, T* __restrict__ y, int64_t N, int64_t K) {
  using V = Vec<T>;
  constexpr int E = V::n;
  int warps = blockDim.x / 32;
  int lane = threadIdx.x % 32;
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / 32; n < N;
       n += static_cast<int64_t>(gridDim.x) * warps) {
    const T* wr = w + n * ldw;
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.f;
    int64_t kv = K / E;
    // Two 16-byte loads of w in flight per iteration.
    int64_t i = lane;
    for (; i + 32 < kv; i += 64) {
      V a = reinterpret_cast<const V*>(wr)[i];
      V b = reinterpret_cast<const V*>(wr)[i + 32];
#pragma unroll
      for (int m = 0; m < M; ++m) {
        V xa = reinterpret_cast<const V*>(x + m * ldx)[i];
        V xb = reinterpret_cast<const V*>(x + m * ldx)[i + 32];
#pragma unroll
        for (int e = 0; e < E; ++e) acc[m] += to_f(a.v[e]) * to_f(xa.v[e]) + to_f(b.v[e]) * to_f(xb.v[e]);
      }
    }
    for (; i < kv; i += 32) {
      V a = reinterpret_cast<const V*>(wr)[i];
#pragma unroll
      for (int m = 0; m < M; ++m) {
        V xa = reinterpret_cast<const V*>(x + m * ldx)[i];
#pragma unroll
        for (int e = 0; e < E; ++e) acc[m] += to_f(a.v[e]) * to_f(xa.v[e]);
      }
    }
    for (int64_t k = kv * E + lane; k < K; k += 32) {
#pragma unroll
      for (int m = 0; m < M; ++m) acc[m] += to_f(wr[k]) * to_f(x[m * ldx + k]);
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
    }
    if (lane < M) {
      float v = acc[0];
#pragma unroll
      for (int m = 1; m < M; ++m) v = lane == m ? acc[m] : v;
      y[lane * N + n] = static_cast<T>(v);
    }
  }
}

// Two k16 slices of one 32-wide chunk: w rows g and g + 8 (a, b) and x row g
// (v), eight contiguous elements each, accumulated into c.
template <bool kHalf>
__device__ __forceinline__ void mma_pair(float (&c)[4], const uint4& a, const uint4& b, const uint4& v) {
  if constexpr (kHalf) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a.x), "r"(b.x), "r"(a.y), "r"(b.y), "r"(v.x), "r"(v.y));
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a.z), "r"(b.z), "r"(a.w), "r"(b.w), "r"(v.z), "r"(v.w));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a.x), "r"(b.x), "r"(a.y), "r"(b.y), "r"(v.x), "r"(v.y));
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a.z), "r"(b.z), "r"(a.w), "r"(b.w), "r"(v.z), "r"(v.w));
  }
}

constexpr int kMmaWarps = 8;
constexpr int kMmaUnroll = 4;

// Requires K % 8 == 0 and 16-byte aligned rows; any M in 1..8, any N.
template <typename T, bool kHalf>
__global__ void __launch_bounds__(kMmaWarps * 32) gemv_mma(const T* __restrict__ x, int64_t ldx,
                                                           const T* __restrict__ w, int64_t ldw, T* __restrict__ y,
                                                           int M, int64_t N, int64_t K) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // the fragment's row group and thread in group
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * 16;
  const bool row0 = n0 + g < N, row1 = n0 + g + 8 < N, xrow = g < M;
  // Loads are never skipped (a branch would keep them from being in flight
  // together): missing rows read row 0 and the value is then replaced by 0.
  const T* w0 = w + (row0 ? (n0 + g) * ldw : 0);
  const T* w1 = w + (row1 ? (n0 + g + 8) * ldw : 0);
  const T* xr = x + (xrow ? g * ldx : 0);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  float c[4] = {0.f, 0.f, 0.f, 0.f};
  const int64_t chunks = (K + 31) / 32;
  constexpr int64_t kStep = kMmaWarps * kMmaUnroll;
  // Software-pipelined: the loads of the next step are issued before the
  // tensor-core work of this one, so two steps of w are in flight per thread.
  uint4 a[kMmaUnroll], b[kMmaUnroll], v[kMmaUnroll];
  auto load = [&](int64_t c0, uint4 (&la)[kMmaUnroll], uint4 (&lb)[kMmaUnroll], uint4 (&lv)[kMmaUnroll]) {
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      const int64_t k = (c0 + u * kMmaWarps) * 32 + 8 * t;
      const bool in = k < K;
      const int64_t kk = in ? k : 0;
      la[u] = __ldcs(reinterpret_cast<const uint4*>(w0 + kk));
      lb[u] = __ldcs(reinterpret_cast<const uint4*>(w1 + kk));
      lv[u] = __ldg(reinterpret_cast<const uint4*>(xr + kk));
      if (!(in && row0)) la[u] = zero;
      if (!(in && row1)) lb[u] = zero;
      if (!(in && xrow)) lv[u] = zero;
    }
  };
  if (warp < chunks) load(warp, a, b, v);
  for (int64_t c0 = warp; c0 < chunks; c0 += kStep) {
    uint4 na[kMmaUnroll], nb[kMmaUnroll], nv[kMmaUnroll];
    const bool more = c0 + kStep < chunks;  // the same for the whole warp
    if (more) load(c0 + kStep, na, nb, nv);
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) mma_pair<kHalf>(c, a[u], b[u], v[u]);
    if (more) {
#pragma unroll
      for (int u = 0; u < kMmaUnroll; ++u) {
        a[u] = na[u];
        b[u] = nb[u];
        v[u] = nv[u];
      }
    }
  }
  __shared__ float partial[kMmaWarps][4][32];
#pragma unroll
  for (int i = 0; i < 4; ++i) partial[warp][i][lane] = c[i];
  __syncthreads();
  if (warp != 0) return;
  float s[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    s[i] = 0.f;
#pragma unroll
    for (int j = 0; j < kMmaWarps; ++j) s[i] += partial[j][i][lane];
  }
  // c0, c1: row g of w, x rows 2t and 2t + 1; c2, c3: row g + 8.
  const int m = 2 * t;
  if (row0 && m < M) y[m * N + n0 + g] = static_cast<T>(s[0]);
  if (row0 && m + 1 < M) y[(m + 1) * N + n0 + g] = static_cast<T>(s[1]);
  if (row1 && m < M) y[m * N + n0 + g + 8] = static_cast<T>(s[2]);
  if (row1 && m + 1 < M) y[(m + 1) * N + n0 + g + 8] = static_cast<T>(s[3]);
}

template <typename T, bool kHalf>
void launch_mma(const T* x, int64_t ldx, const T* w, int64_t ldw, T* y, int64_t M, int64_t N, int64_t K,
                cudaStream_t s) {
  const unsigned grid = static_cast<unsigned>((N + 15) / 16);
  gemv_mma<T, kHalf><<<grid, kMmaWarps * 32, 0, s>>>(x, ldx, w, ldw, y, static_cast<int>(M), N, K);
}

template <typename T>
void launch(const T* x, int64_t ldx, const T* w, int64_t ldw, T* y, int64_t M, int64_t N, int64_t K, cudaStream_t s) {
  constexpr int kBlock = 256;
  int sms = device_sm_count() > 0 ? device_sm_count() : 132;
  unsigned grid = static_cast<unsigned>(std::min<int64_t>((N + 7) / 8, static_cast<int64_t>(sms) * 16));
  switch (M) {
#define KILN_GEMV_CASE(m) \
  case m: gemv_rows<T, m><<<grid, kBlock, 0, s>>>(x, ldx, w, ldw, y, N, K); break;
    KILN_GEMV_CASE(1) KILN_GEMV_CASE(2) KILN_GEMV_CASE(3) KILN_GEMV_CASE(4)
    KILN_GEMV_CASE(5) KILN_GEMV_CASE(6) KILN_GEMV_CASE(7) KILN_GEMV_CASE(8)
#undef KILN_GEMV_CASE
  }
}

}  // namespace

bool gemv_covers(Dtype t, const char* x, int64_t ldx, const char* w, int64_t ldw, int64_t M, int64_t K) {
  const size_t item = size_of(t);
  if (M < 1 || M > 8 || (t != Dtype::float32 && t != Dtype::bfloat16 && t != Dtype::float16)) return false;
  if (t != Dtype::float32 && K % 8 != 0) return false;
  // 16-byte loads need aligned rows.
  return aligned16(x) && aligned16(w) && (ldx * item) % 16 == 0 && (ldw * item) % 16 == 0;
}

bool gemv(Dtype t, const char* x, int64_t ldx, const char* w, int64_t ldw, char* y, int64_t M, int64_t N, int64_t K,
          cudaStream_t s) {
  if (!gemv_covers(t, x, ldx, w, ldw, M, K)) return false;
  if (!s) s = current_stream();
  if (t == Dtype::float32) {
    launch(reinterpret_cast<const float*>(x), ldx, reinterpret_cast<const float*>(w), ldw, reinterpret_cast<float*>(y),
           M, N, K, s);
  } else if (t == Dtype::bfloat16) {
    launch_mma<__nv_bfloat16, false>(reinterpret_cast<const __nv_bfloat16*>(x), ldx,
                                     reinterpret_cast<const __nv_bfloat16*>(w), ldw,
                                     reinterpret_cast<__nv_bfloat16*>(y), M, N, K, s);
  } else {
    launch_mma<__half, true>(reinterpret_cast<const __half*>(x), ldx, reinterpret_cast<const __half*>(w), ldw,
                             reinterpret_cast<__half*>(y), M, N, K, s);
  }
  KILN_CUDA_CHECK_LAUNCH("matmul");
  return true;
}

}  // namespace kiln::cuda
