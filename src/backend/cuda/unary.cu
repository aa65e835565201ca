// Unary elementwise kernels (the ops' math: backend/common/op_math.inc,
// through op_math.cuh). One kernel per dtype: the op is a run-time
// switch inside (uniform across the grid, so it costs a few instructions
// per element on memory-bound work and keeps the instantiation count, and
// the build time, small). The contiguous path moves 16 bytes per load and
// store; the strided path handles any layout.
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/op_math.cuh"
#include "core/primitives.h"

namespace kiln {
namespace cuda {
namespace {

template <typename T>
__device__ __forceinline__ T apply(UnaryOp op, T x) {
  return convert<T>(ko::unary(op, to_compute(x)));
}

template <typename T, typename F>
__device__ __forceinline__ void map_contiguous(const T* __restrict__ in, T* __restrict__ out, int64_t n, F f) {
  using V = Vec<T>;
  int64_t nvec = n / V::n;
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const V* vin = reinterpret_cast<const V*>(in);
  V* vout = reinterpret_cast<V*>(out);
  for (int64_t i = tid; i < nvec; i += stride) {
    V v = vin[i];
#pragma unroll
    for (int k = 0; k < V::n; ++k) v.v[k] = f(v.v[k]);
    vout[i] = v;
  }
  for (int64_t i = nvec * V::n + tid; i < n; i += stride) out[i] = f(in[i]);
}

template <typename T>
__global__ void unary_contiguous(UnaryOp op, const T* __restrict__ in, T* __restrict__ out, int64_t n) {
  if constexpr (is_float_v<T>) {
    // The hot op gets a loop of its own, without the per-element switch.
    if (op == UnaryOp::gelu_approx) {
      map_contiguous(in, out, n, [](T x) { return convert<T>(ko::gelu_approx_op::apply(to_compute(x))); });
      return;
    }
  }
  map_contiguous(in, out, n, [op](T x) { return apply(op, x); });
}

template <typename T>
__global__ void unary_strided(UnaryOp op, const T* __restrict__ in, T* __restrict__ out, Strided<2> l, int64_t n) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[2];
    l.offsets(i, off);
    out[off[0]] = apply(op, in[off[1]]);
  }
}

}  // namespace
}  // namespace cuda

void Unary::eval_gpu(const std::vector<array>& inputs, array& out) {
  const char* nm = unary_op_name(op_);
  const array& in = inputs[0];
  if (in.dtype() == out.dtype() && in.desc()->offset == 0) {
    cuda::allocate_or_donate(out, in, nm);
  } else {
    cuda::allocate(out, nm);
  }
  int64_t n = static_cast<int64_t>(out.size());
  if (n == 0) return;
  const char* src = cuda::in_ptr(in);
  char* dst = cuda::out_ptr(out);
  auto l = cuda::make_strided<2>(out.shape(), {&out.desc()->strides, &in.desc()->strides}, nm);
  cudaStream_t s = cuda::current_stream();
  UnaryOp op = op_;
  cuda::dispatch_with_complex(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kBlock = 256;
    if (cuda::all_contiguous(l) && cuda::aligned16(src) && cuda::aligned16(dst)) {
      cuda::unary_contiguous<T><<<cuda::grid_for(n, cuda::Vec<T>::n * 4, kBlock), kBlock, 0, s>>>(
          op, reinterpret_cast<const T*>(src), reinterpret_cast<T*>(dst), n);
    } else {
      cuda::unary_strided<T><<<cuda::grid_for(n, 4, kBlock), kBlock, 0, s>>>(
          op, reinterpret_cast<const T*>(src), reinterpret_cast<T*>(dst), l, n);
    }
  });
  KILN_CUDA_CHECK_LAUNCH(nm);
}

}  // namespace kiln
