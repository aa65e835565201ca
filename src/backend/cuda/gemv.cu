// Small-M matrix products for decode (M = 1..8): y[m, n] = sum_k x[m, k] *
// w[n, k], where w is the weights in the [N, K] layout of a linear layer
// (matmul(x, transpose(w)) gives b with row stride 1). The weights are read
// once at full bandwidth: 16-byte loads, a warp per output column (one row
// of w), several warps per block, the M dot products reduced with warp
// shuffles. x is tiny and stays in L1/L2.
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

bool gemv(Dtype t, const char* x, int64_t ldx, const char* w, int64_t ldw, char* y, int64_t M, int64_t N, int64_t K) {
  size_t item = size_of(t);
  if (M < 1 || M > 8 || (t != Dtype::float32 && t != Dtype::bfloat16)) return false;
  // 16-byte loads need aligned rows.
  if (!aligned16(x) || !aligned16(w) || (ldx * item) % 16 || (ldw * item) % 16) return false;
  cudaStream_t s = current_stream();
  if (t == Dtype::float32) {
    launch(reinterpret_cast<const float*>(x), ldx, reinterpret_cast<const float*>(w), ldw, reinterpret_cast<float*>(y),
           M, N, K, s);
  } else {
    launch(reinterpret_cast<const __nv_bfloat16*>(x), ldx, reinterpret_cast<const __nv_bfloat16*>(w), ldw,
           reinterpret_cast<__nv_bfloat16*>(y), M, N, K, s);
  }
  KILN_CUDA_CHECK_LAUNCH("matmul");
  return true;
}

}  // namespace kiln::cuda
