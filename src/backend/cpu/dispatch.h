#pragma once
// Runtime dtype -> C++ type dispatch for the CPU kernels.
#include <string>
#include <type_traits>

#include "kiln/dtype.h"
#include "kiln/error.h"

namespace kiln::cpu {

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) for the C++ type of dtype t, for the real dtypes;
// complex64 throws (a kernel that handles it uses dispatch_with_complex;
// the op layer refuses complex64 before the others run).
template <typename F>
decltype(auto) dispatch_all(Dtype t, F&& f) {
  switch (t) {
    case bool_: return f(TypeTag<bool>{});
    case uint8: return f(TypeTag<uint8_t>{});
    case uint16: return f(TypeTag<uint16_t>{});
    case uint32: return f(TypeTag<uint32_t>{});
    case uint64: return f(TypeTag<uint64_t>{});
    case int8: return f(TypeTag<int8_t>{});
    case int16: return f(TypeTag<int16_t>{});
    case int32: return f(TypeTag<int32_t>{});
    case int64: return f(TypeTag<int64_t>{});
    case float16: return f(TypeTag<float16_t>{});
    case bfloat16: return f(TypeTag<bfloat16_t>{});
    case float32: return f(TypeTag<float>{});
    case float64: return f(TypeTag<double>{});
    case complex64: throw Error("[dispatch] this kernel does not support complex64");
    case float8_e4m3fn:
    case float8_e5m2:
      throw Error(std::string("[dispatch] this kernel does not support ") + dtype_name(t));
  }
  throw Error("[dispatch] unknown dtype");
}

// dispatch_all, complex64 (kiln::complex64_t) included.
template <typename F>
decltype(auto) dispatch_with_complex(Dtype t, F&& f) {
  if (t == complex64) return f(TypeTag<complex64_t>{});
  return dispatch_all(t, std::forward<F>(f));
}

// dispatch_with_complex, the fp8 storage types included: for the copies and
// casts (the only CPU kernels that take fp8 besides scaled_matmul's; the op
// layer refuses fp8 elsewhere, see Primitive::accepts_fp8).
template <typename F>
decltype(auto) dispatch_copyable(Dtype t, F&& f) {
  if (t == float8_e4m3fn) return f(TypeTag<float8_e4m3fn_t>{});
  if (t == float8_e5m2) return f(TypeTag<float8_e5m2_t>{});
  return dispatch_with_complex(t, std::forward<F>(f));
}

// The 16- and 8-bit float storage types: they compute in float and convert
// from float with one rounding.
template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t> || is_fp8_v<T>;

template <typename T>
inline constexpr bool is_complex_v = std::is_same_v<T, complex64_t>;

// The type arithmetic happens in: float for the 16- and 8-bit floats.
template <typename T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;

}  // namespace kiln::cpu
