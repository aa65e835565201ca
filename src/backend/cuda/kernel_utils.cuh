#pragma once
// Device-side helpers shared by the kernel files: dtype -> device type
// dispatch, conversions with the CPU's rules (backend/cpu/cast.h), and a
// strided layout that maps a linear index to per-operand offsets.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>
#include <limits>
#include <type_traits>

#include "backend/common/layout.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/op_math.cuh"

namespace kiln::cuda {

// Lets a kernel launched after this one with programmatic dependent launch
// (the decode QMVs, quant_blocks_qmv_i8.cu) start its CTAs now: they load
// what was complete before the graph began and wait (griddepcontrol.wait)
// for this kernel's writes. No effect when nothing is launched that way.
// Called first thing by the kernels that feed a decode step's QMVs (norms,
// attention's merge; compile's generated kernels emit the same line), whose
// few CTAs there leave the SMs free.
__device__ __forceinline__ void allow_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// The sum of v over the warp; every lane gets it.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The sum of v over the block (blockDim.x a multiple of 32); every thread
// gets it. Ends with a barrier, so it may be called again at once.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float part[32];
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = warp_sum(lane < static_cast<int>(blockDim.x / 32) ? part[lane] : 0.0f);
  __syncthreads();
  return v;
}

template <typename T>
struct Tag {
  using type = T;
};

// Calls f(Tag<T>{}) with the device type of dtype t, for the real dtypes;
// complex64 throws (the kernels that handle it use dispatch_with_complex;
// the op layer refuses complex64 before the others run).
template <typename F>
void dispatch(Dtype t, F&& f) {
  switch (t) {
    case Dtype::bool_: return f(Tag<bool>{});
    case Dtype::uint8: return f(Tag<uint8_t>{});
    case Dtype::uint16: return f(Tag<uint16_t>{});
    case Dtype::uint32: return f(Tag<uint32_t>{});
    case Dtype::uint64: return f(Tag<uint64_t>{});
    case Dtype::int8: return f(Tag<int8_t>{});
    case Dtype::int16: return f(Tag<int16_t>{});
    case Dtype::int32: return f(Tag<int32_t>{});
    case Dtype::int64: return f(Tag<int64_t>{});
    case Dtype::float16: return f(Tag<__half>{});
    case Dtype::bfloat16: return f(Tag<__nv_bfloat16>{});
    case Dtype::float32: return f(Tag<float>{});
    case Dtype::float64: return f(Tag<double>{});
    case Dtype::complex64: throw Error("[cuda] this kernel does not support complex64");
    case Dtype::float8_e4m3fn:
    case Dtype::float8_e5m2:
      throw Error(std::string("[cuda] this kernel does not support ") + dtype_name(t));
  }
  throw Error("[cuda] unknown dtype");
}

#include "backend/cuda/convert.inc"

// kiln::complex64_t (include/kiln/complex.h: its arithmetic is host/device
// code) is the complex type convert() knows; generated kernels have none.
template <>
struct is_complex_type<complex64_t> : std::true_type {};
template <typename T>
inline constexpr bool is_complex_v = is_complex_type<T>::value;

// dispatch, complex64 included.
template <typename F>
void dispatch_with_complex(Dtype t, F&& f) {
  if (t == Dtype::complex64) return f(Tag<complex64_t>{});
  dispatch(t, std::forward<F>(f));
}

template <>
struct is_fp8_type<float8_e4m3fn_t> : std::true_type {};
template <>
struct is_fp8_type<float8_e5m2_t> : std::true_type {};

// dispatch_with_complex, the fp8 storage types included: for the casts
// (the op layer lets fp8 reach only the byte moves and scaled_matmul).
template <typename F>
void dispatch_copyable(Dtype t, F&& f) {
  if (t == Dtype::float8_e4m3fn) return f(Tag<float8_e4m3fn_t>{});
  if (t == Dtype::float8_e5m2) return f(Tag<float8_e5m2_t>{});
  dispatch_with_complex(t, std::forward<F>(f));
}

constexpr int kMaxDims = 8;

// A collapsed layout of N operands: shape and element strides per operand.
template <int N>
struct Strided {
  int ndim;
  int64_t shape[kMaxDims];
  int64_t strides[N][kMaxDims];

  __device__ __forceinline__ void offsets(int64_t i, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      int64_t q = i / shape[d];
      int64_t pos = i - q * shape[d];
      i = q;
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += pos * strides[k][d];
    }
  }
};

// Collapses shape/strides (merging dims that chain in every operand).
template <int N>
Strided<N> make_strided(const Shape& shape, const std::array<const Strides*, N>& strides, const char* op) {
  layout::Layout<N> l = layout::collapse<N>(shape, strides);
  if (l.shape.size() > static_cast<size_t>(kMaxDims)) {
    throw Error(std::string("[") + op + "] layouts with more than " + std::to_string(kMaxDims) +
                " non-mergeable dimensions are not supported on the GPU");
  }
  Strided<N> s{};
  s.ndim = static_cast<int>(l.shape.size());
  for (int d = 0; d < s.ndim; ++d) {
    s.shape[d] = l.shape[d];
    for (int k = 0; k < N; ++k) s.strides[k][d] = l.strides[k][d];
  }
  return s;
}

template <int N>
bool all_contiguous(const Strided<N>& s) {
  return s.ndim == 1 && [&] {
    for (int k = 0; k < N; ++k) {
      if (s.strides[k][0] != 1) return false;
    }
    return true;
  }();
}

// 16 bytes of T.
template <typename T>
struct alignas(16) Vec {
  static constexpr int n = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
  T v[n];
};

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace kiln::cuda
