#pragma once
// Device-side helpers shared by the kernel files: dtype -> device type
// dispatch, conversions with the CPU's rules (backend/cpu/cast.h), and a
// strided layout that maps a linear index to per-operand offsets.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "backend/common/layout.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/op_math.cuh"

namespace kiln::cuda {

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
  }
  throw Error("[cuda] unknown dtype");
}

// dispatch, complex64 (kiln::complex64_t, whose arithmetic is host/device
// code: include/kiln/complex.h) included.
template <typename F>
void dispatch_with_complex(Dtype t, F&& f) {
  if (t == Dtype::complex64) return f(Tag<complex64_t>{});
  dispatch(t, std::forward<F>(f));
}

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <typename T>
inline constexpr bool is_float_v = is_half_v<T> || std::is_floating_point_v<T>;
template <typename T>
inline constexpr bool is_complex_v = std::is_same_v<T, complex64_t>;
// The type arithmetic happens in: float for the 16-bit floats.
template <typename T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;

template <typename T>
__device__ __forceinline__ compute_t<T> to_compute(T x) {
  if constexpr (is_half_v<T>) return static_cast<float>(x);
  else return x;
}

// x rounded to float to odd (toward zero, then the last bit set when
// inexact): the 16-bit rounding after it is then the same as a direct one
// (as cpu::simd::round_to_odd_float, kernel_math.inc).
__device__ __forceinline__ float round_to_odd_float(double x) {
  float f = __double2float_rz(x);
  if (static_cast<double>(f) != x && x == x) f = __int_as_float(__float_as_int(f) | 1);
  return f;
}
// An int64 (a uint64) as a double rounded to odd.
__device__ __forceinline__ double int64_to_odd_double(long long v) {
  double d = __ll2double_rz(v);  // |d| <= |v|, so converting back is exact
  if (__double2ll_rz(d) != v) d = __longlong_as_double(__double_as_longlong(d) | 1);
  return d;
}
__device__ __forceinline__ double uint64_to_odd_double(unsigned long long v) {
  double d = __ull2double_rz(v);
  if (__double2ull_rz(d) != v) d = __longlong_as_double(__double_as_longlong(d) | 1);
  return d;
}
// A value on its way to a 16-bit float: float, rounded to odd where float is
// not exact (see above).
template <typename C>
__device__ __forceinline__ float to_float_for_half(C v) {
  if constexpr (std::is_same_v<C, double> || std::is_same_v<C, int32_t> || std::is_same_v<C, uint32_t>) {
    return round_to_odd_float(static_cast<double>(v));
  } else if constexpr (std::is_same_v<C, int64_t>) {
    return round_to_odd_float(int64_to_odd_double(v));
  } else if constexpr (std::is_same_v<C, uint64_t>) {
    return round_to_odd_float(uint64_to_odd_double(v));
  } else {
    return static_cast<float>(v);
  }
}

// Conversion with the CPU rules: float -> integer truncates and saturates
// (NaN gives 0); anything -> bool is `!= 0`; to a 16-bit float rounds once;
// real -> complex64 has a zero imaginary part, complex64 -> real takes the
// real part.
template <typename To, typename From>
__device__ __forceinline__ To convert(From x) {
  using C = compute_t<From>;
  C v = to_compute(x);
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (is_complex_v<From>) {
    if constexpr (std::is_same_v<To, bool>) return x.re != 0.0f || x.im != 0.0f;
    else return convert<To>(x.re);
  } else if constexpr (is_complex_v<To>) {
    return To(convert<float>(x), 0.0f);
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != C(0);
  } else if constexpr (std::is_same_v<To, __half>) {
    return __float2half_rn(to_float_for_half(v));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(to_float_for_half(v));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<C>) {
    return ko::saturate<To>(v);
  } else {
    return static_cast<To>(v);
  }
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

// A grid-stride launch size for n elements handled `per_thread` at a time.
inline unsigned grid_for(int64_t n, int per_thread, int block) {
  int64_t blocks = (n + static_cast<int64_t>(block) * per_thread - 1) / (static_cast<int64_t>(block) * per_thread);
  int64_t cap = static_cast<int64_t>(device_sm_count() > 0 ? device_sm_count() : 132) * 32;
  if (blocks > cap) blocks = cap;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

// 16 bytes of T.
template <typename T>
struct alignas(16) Vec {
  static constexpr int n = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
  T v[n];
};

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace kiln::cuda
