// Unary elementwise kernels. One kernel per dtype: the op is a run-time
// switch inside (uniform across the grid, so it costs a few instructions
// per element on memory-bound work and keeps the instantiation count, and
// the build time, small). The contiguous path moves 16 bytes per load and
// store; the strided path handles any layout.
#include "backend/cuda/kernel_utils.cuh"
#include "core/primitives.h"

namespace kiln {
namespace cuda {
namespace {

// gelu_approx with the hardware's ex2 in float (a few ulp): the accurate
// expf and the op switch made bf16 GELU arithmetic-bound.
template <typename C>
__device__ __forceinline__ C gelu_approx_fast(C x) {
  const C u = C(0.7978845608028654) * (x + C(0.044715) * x * x * x);
  if constexpr (std::is_same_v<C, float>) return x / (1.0f + __expf(-2.0f * u));
  else return x / (C(1) + exp(C(-2) * u));
}

template <typename C>
__device__ __forceinline__ C unary_float(UnaryOp op, C x) {
  constexpr bool f = std::is_same_v<C, float>;
  switch (op) {
    case UnaryOp::exp: return f ? expf(x) : exp(x);
    case UnaryOp::expm1: return f ? expm1f(x) : expm1(x);
    case UnaryOp::log: return f ? logf(x) : log(x);
    case UnaryOp::log1p: return f ? log1pf(x) : log1p(x);
    case UnaryOp::sqrt: return f ? sqrtf(x) : sqrt(x);
    case UnaryOp::rsqrt: return C(1) / (f ? sqrtf(x) : sqrt(x));
    case UnaryOp::sin: return f ? sinf(x) : sin(x);
    case UnaryOp::cos: return f ? cosf(x) : cos(x);
    case UnaryOp::tanh: return f ? tanhf(x) : tanh(x);
    case UnaryOp::sigmoid: return C(1) / (C(1) + (f ? expf(-x) : exp(-x)));
    case UnaryOp::silu: return x / (C(1) + (f ? expf(-x) : exp(-x)));
    case UnaryOp::erf: return f ? erff(x) : erf(x);
    case UnaryOp::erfinv: return f ? erfinvf(x) : erfinv(x);
    case UnaryOp::tan: return f ? tanf(x) : tan(x);
    case UnaryOp::arcsin: return f ? asinf(x) : asin(x);
    case UnaryOp::arccos: return f ? acosf(x) : acos(x);
    case UnaryOp::arctan: return f ? atanf(x) : atan(x);
    case UnaryOp::sinh: return f ? sinhf(x) : sinh(x);
    case UnaryOp::cosh: return f ? coshf(x) : cosh(x);
    case UnaryOp::arcsinh: return f ? asinhf(x) : asinh(x);
    case UnaryOp::arccosh: return f ? acoshf(x) : acosh(x);
    case UnaryOp::arctanh: return f ? atanhf(x) : atanh(x);
    case UnaryOp::log2: return f ? log2f(x) : log2(x);
    case UnaryOp::log10: return f ? log10f(x) : log10(x);
    case UnaryOp::gelu: return C(0.5) * x * (f ? erfcf(-x * C(0.7071067811865476)) : erfc(-x * C(0.7071067811865476)));
    case UnaryOp::gelu_approx: return gelu_approx_fast(x);
    case UnaryOp::floor: return f ? floorf(x) : floor(x);
    case UnaryOp::ceil: return f ? ceilf(x) : ceil(x);
    case UnaryOp::round: return f ? rintf(x) : rint(x);  // half to even
    case UnaryOp::abs: return f ? fabsf(x) : fabs(x);
    case UnaryOp::sign: return x != x ? x : static_cast<C>((C(0) < x) - (x < C(0)));
    default: break;
  }
  switch (op) {
    case UnaryOp::negative: return -x;
    case UnaryOp::square: return x * x;
    case UnaryOp::relu: return x > C(0) ? x : C(0);
    case UnaryOp::logical_not: return static_cast<C>(!(x != C(0)));
    default: return x;
  }
}

template <typename C>
__device__ __forceinline__ C unary_int(UnaryOp op, C x) {
  if constexpr (std::is_same_v<C, bool>) {
    return op == UnaryOp::logical_not ? !x : x;  // every other op is the identity on bool
  } else {
    using U = std::make_unsigned_t<C>;
    switch (op) {
      case UnaryOp::abs:
        if constexpr (std::is_signed_v<C>) return x < 0 ? static_cast<C>(U(0) - static_cast<U>(x)) : x;
        else return x;
      case UnaryOp::negative: return static_cast<C>(U(0) - static_cast<U>(x));
      case UnaryOp::sign:
        if constexpr (std::is_signed_v<C>) return static_cast<C>((C(0) < x) - (x < C(0)));
        else return static_cast<C>(x != 0);
      case UnaryOp::square: return static_cast<C>(static_cast<U>(x) * static_cast<U>(x));
      case UnaryOp::relu: return x > C(0) ? x : C(0);
      case UnaryOp::logical_not: return static_cast<C>(!x);
      case UnaryOp::bitwise_invert: return static_cast<C>(~x);
      default: return x;
    }
  }
}

template <typename T>
__device__ __forceinline__ T apply(UnaryOp op, T x) {
  if constexpr (is_float_v<T>) return convert<T>(unary_float<compute_t<T>>(op, to_compute(x)));
  else return unary_int<T>(op, x);
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
      map_contiguous(in, out, n, [](T x) { return convert<T>(gelu_approx_fast(to_compute(x))); });
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
  cuda::dispatch(in.dtype(), [&](auto tag) {
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
