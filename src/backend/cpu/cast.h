#pragma once
// Element conversion between dtypes, with defined results everywhere:
// float -> integer truncates toward zero and saturates (NaN gives 0);
// anything -> bool is `!= 0`; real -> complex64 has a zero imaginary part,
// complex64 -> real takes the real part (numpy, MLX).
#include <cstddef>
#include <limits>
#include <type_traits>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/op_math.h"

namespace kiln::cpu {

template <typename To, typename From>
inline To convert(From x) {
  using C = compute_t<From>;
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (is_complex_v<From>) {
    if constexpr (std::is_same_v<To, bool>) return x.re != 0.0f || x.im != 0.0f;
    else return convert<To>(x.re);
  } else if constexpr (is_complex_v<To>) {
    return To(convert<float>(x), 0.0f);
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<C>(x) != C(0);
  } else if constexpr (is_half_v<To>) {
    // One rounding to the 16-bit type (see round_to_odd_float): float is
    // exact for the 16-bit floats and the 8- and 16-bit integers, double
    // for the 32-bit ones.
    if constexpr (std::is_same_v<C, double> || std::is_same_v<C, int32_t> || std::is_same_v<C, uint32_t>) {
      return To(simd::round_to_odd_float(static_cast<double>(x)));
    } else if constexpr (std::is_same_v<C, int64_t>) {
      return To(simd::round_to_odd_float(simd::int64_to_odd_double(x)));
    } else if constexpr (std::is_same_v<C, uint64_t>) {
      return To(simd::round_to_odd_float(simd::uint64_to_odd_double(x)));
    } else {
      return To(static_cast<float>(static_cast<C>(x)));
    }
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<C>) {
    return ko::saturate<To>(static_cast<C>(x));
  } else {
    return static_cast<To>(static_cast<C>(x));
  }
}

// n contiguous elements from src (dtype s) to dst (dtype d).
void cast_contiguous(const void* src, Dtype s, void* dst, Dtype d, size_t n);

}  // namespace kiln::cpu
