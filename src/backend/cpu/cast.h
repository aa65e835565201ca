#pragma once
// Element conversion between dtypes, with defined results everywhere:
// float -> integer truncates toward zero and saturates (NaN gives 0);
// anything -> bool is `!= 0`.
#include <cstddef>
#include <limits>
#include <type_traits>

#include "backend/cpu/dispatch.h"

namespace kiln::cpu {

template <typename To, typename From>
inline To convert(From x) {
  using C = compute_t<From>;
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<C>(x) != C(0);
  } else if constexpr (is_half_v<To>) {
    return To(static_cast<float>(static_cast<C>(x)));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<C>) {
    C v = static_cast<C>(x);
    if (!(v == v)) return To(0);
    if (v <= static_cast<C>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    if (v >= static_cast<C>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(static_cast<C>(x));
  }
}

// n contiguous elements from src (dtype s) to dst (dtype d).
void cast_contiguous(const void* src, Dtype s, void* dst, Dtype d, size_t n);

}  // namespace kiln::cpu
