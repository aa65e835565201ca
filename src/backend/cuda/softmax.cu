// Softmax over the last axis, a block per row, accumulation in float
// (double for double).
//
// Rows of up to 2048 16-byte vectors (8192 fp32, 16384 bf16) are held in
// registers: one read of the input and one write of the output, the floor.
// Longer or unaligned rows take three passes over the row (max, sum of
// exponentials, scaled write), the second and third mostly from the cache.
#include "backend/cuda/kernel_utils.cuh"
#include "core/ops_util.h"
#include "core/primitives.h"

namespace kiln {
namespace cuda {
namespace {

template <typename C>
__device__ __forceinline__ C max_nan(C a, C b) {
  return (a > b || a != a) ? a : b;
}

// Reduces across the block; every thread gets the result.
template <bool kMax, typename C>
__device__ C block_all_reduce(C v) {
  __shared__ C part[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const C other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? max_nan(v, other) : v + other;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? part[lane] : (kMax ? -std::numeric_limits<C>::infinity() : C(0));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const C other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? max_nan(v, other) : v + other;
  }
  __syncthreads();  // part is free for the next call
  return v;
}

template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// exp(x) for x <= 0: the hardware's ex2 for float (a few ulp, against about
// 20 instructions for expf, which made bf16 rows arithmetic-bound).
template <typename C>
__device__ __forceinline__ C exp_le0(C x) {
  if constexpr (std::is_same_v<C, float>) return __expf(x);
  else return exp(x);
}

// Thread t holds vectors t, t + blockDim.x, ... of the row (kVecs of them).
template <typename T, int kVecs>
__global__ void __launch_bounds__(256) softmax_cached(const T* __restrict__ in, T* __restrict__ out, int64_t len) {
  using C = Acc<T>;
  using V = Vec<T>;
  constexpr int E = V::n;
  const V* x = reinterpret_cast<const V*>(in + static_cast<int64_t>(blockIdx.x) * len);
  V* y = reinterpret_cast<V*>(out + static_cast<int64_t>(blockIdx.x) * len);
  const int64_t nv = len / E;
  C v[kVecs][E];
  C m = -std::numeric_limits<C>::infinity();
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int64_t idx = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
    if (idx < nv) {
      const V a = x[idx];
#pragma unroll
      for (int e = 0; e < E; ++e) {
        v[i][e] = static_cast<C>(to_compute(a.v[e]));
        m = max_nan(m, v[i][e]);
      }
    }
  }
  m = block_all_reduce<true>(m);
  C sum = 0;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    if (threadIdx.x + static_cast<int64_t>(i) * blockDim.x < nv) {
#pragma unroll
      for (int e = 0; e < E; ++e) sum += v[i][e] = exp_le0(v[i][e] - m);
    }
  }
  const C inv = C(1) / block_all_reduce<false>(sum);
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int64_t idx = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
    if (idx < nv) {
      V o;
#pragma unroll
      for (int e = 0; e < E; ++e) o.v[e] = convert<T>(v[i][e] * inv);
      y[idx] = o;
    }
  }
}

template <typename T>
__global__ void softmax_three_pass(const T* __restrict__ in, T* __restrict__ out, int64_t len) {
  using C = Acc<T>;
  const T* x = in + static_cast<int64_t>(blockIdx.x) * len;
  T* y = out + static_cast<int64_t>(blockIdx.x) * len;
  C m = -std::numeric_limits<C>::infinity();
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) m = max_nan(m, static_cast<C>(to_compute(x[i])));
  m = block_all_reduce<true>(m);
  // A thread adds len / blockDim.x terms (10^4 on a 10^7 row): compensated
  // (Kahan), as the reductions' sums are (reduce.cu). The terms are in
  // [0, 1], so there is no inf to guard against.
  C sum = 0, comp = 0;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
    const C term = exp_le0(static_cast<C>(to_compute(x[i])) - m) - comp;
    const C t = sum + term;
    comp = (t - sum) - term;
    sum = t;
  }
  const C inv = C(1) / block_all_reduce<false>(sum - comp);
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
    y[i] = convert<T>(static_cast<C>(exp_le0(static_cast<C>(to_compute(x[i])) - m) * inv));
  }
}

template <typename T>
void launch_softmax(const T* in, T* out, int64_t rows, int64_t len, cudaStream_t s) {
  constexpr int E = Vec<T>::n;
  const int64_t nv = len / E;
  const unsigned grid = static_cast<unsigned>(rows);
  if (len % E == 0 && aligned16(in) && aligned16(out) && nv <= 256 * 8) {
    const int block = static_cast<int>(std::min<int64_t>(256, (nv + 31) / 32 * 32));
    const int64_t per_thread = (nv + block - 1) / block;
    if (per_thread <= 1) softmax_cached<T, 1><<<grid, block, 0, s>>>(in, out, len);
    else if (per_thread <= 2) softmax_cached<T, 2><<<grid, block, 0, s>>>(in, out, len);
    else if (per_thread <= 4) softmax_cached<T, 4><<<grid, block, 0, s>>>(in, out, len);
    else softmax_cached<T, 8><<<grid, block, 0, s>>>(in, out, len);
    return;
  }
  const int block = len >= 4096 ? 1024 : len >= 1024 ? 256 : 128;
  softmax_three_pass<T><<<grid, block, 0, s>>>(in, out, len);
}

}  // namespace
}  // namespace cuda

void Softmax::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  if (in.desc()->offset == 0) {
    cuda::allocate_or_donate(out, in, "softmax");
  } else {
    cuda::allocate(out, "softmax");
  }
  int64_t len = in.ndim() ? in.shape().back() : 1;
  int64_t rows = len ? static_cast<int64_t>(in.size()) / len : 0;
  if (rows == 0) return;
  const auto& d = *in.desc();
  const char* src = cuda::in_ptr(in);
  char* dst = cuda::out_ptr(out);
  if (!detail::is_row_contiguous(d.shape, d.strides)) {
    char* tmp = static_cast<char*>(cuda::scratch(in.nbytes(), "softmax"));
    cuda::copy_strided(src, d.dtype, d.shape, d.strides, tmp, d.dtype, row_major_strides(d.shape), "softmax");
    src = tmp;
  }
  cudaStream_t s = cuda::current_stream();
  cuda::dispatch(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (cuda::is_float_v<T>) {
      cuda::launch_softmax<T>(reinterpret_cast<const T*>(src), reinterpret_cast<T*>(dst), rows, len, s);
    } else {
      throw Error(std::string("[softmax] unsupported dtype ") + dtype_name(in.dtype()));
    }
  });
  KILN_CUDA_CHECK_LAUNCH("softmax");
}

}  // namespace kiln
