#pragma once
// The scalar definitions of the unary and binary elementwise ops, shared by
// the per-op kernels (unary.cpp, binary.cpp) and compile's fused kernels
// (compiled.cpp) so that both compute bit-identical results.
//
// with_unary_op<C>(op, go) calls go(f) with a captureless functor f(C) for
// the op on compute type C (float for the 16-bit floats) and returns true,
// or returns false when the op is not defined for C. with_binary_op<C> calls
// same(f) for ops whose result has the input type and to_bool(f) for
// comparisons and logical ops.
#include <cmath>
#include <type_traits>

#include "backend/cpu/simd_math.h"
#include "core/primitives.h"

namespace kiln::cpu {

template <typename C>
C erfinv_impl(C y) {
  // Giles' single-precision approximation refined with two Newton steps on
  // erf, which gives full double precision too.
  if (y <= C(-1)) return y == C(-1) ? -INFINITY : NAN;
  if (y >= C(1)) return y == C(1) ? INFINITY : NAN;
  double x = y;
  double w = -std::log((1.0 - x) * (1.0 + x));
  double p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = std::sqrt(w) - 3.0;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  double r = p * x;
  if constexpr (std::is_same_v<C, float>) return static_cast<C>(r);  // already float-accurate
  for (int i = 0; i < 2; ++i) {
    double err = std::erf(r) - x;
    r -= err / (1.1283791670955126 * std::exp(-r * r));
  }
  return static_cast<C>(r);
}

template <typename C>
C round_half_even(C x) {
  if constexpr (std::is_floating_point_v<C>) {
    return std::nearbyint(x);  // default rounding mode: to nearest even
  } else {
    return x;
  }
}

template <typename C>
C int_power(C base, C exp) {
  if constexpr (std::is_signed_v<C>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp % 2 == 0) ? 1 : -1;
      return 0;
    }
  }
  // Unsigned arithmetic: overflow wraps instead of being undefined.
  using U = std::make_unsigned_t<C>;
  U result = 1, b = static_cast<U>(base);
  auto e = static_cast<std::make_unsigned_t<C>>(exp);
  while (e) {
    if (e & 1) result *= b;
    b *= b;
    e >>= 1;
  }
  return static_cast<C>(result);
}

// Python's (and numpy's) remainder: the result takes the sign of the
// divisor, a zero result included (-4.0 % 2.0 is +0.0, 4.0 % -2.0 is -0.0).
template <typename C>
C python_remainder(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    C r = std::fmod(a, b);
    if (r == C(0)) return std::copysign(C(0), b);
    if ((r < C(0)) != (b < C(0))) r += b;
    return r;
  } else if constexpr (std::is_unsigned_v<C>) {
    return b == 0 ? C(0) : static_cast<C>(a % b);
  } else {
    if (b == 0 || b == -1) return C(0);  // x % 0 is undefined; min % -1 overflows
    C r = static_cast<C>(a % b);
    if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<C>(r + b);
    return r;
  }
}

// numpy's floor division: integers round toward -inf (x // 0 is 0, and
// MIN // -1 wraps); floats follow npy_divmod, which is exact where
// floor(x / y) is not (1 // 0.1 is 9, as 1 - 9 * 0.1 leaves the remainder).
template <typename C>
C floor_divide_impl(C x, C y) {
  if constexpr (std::is_floating_point_v<C>) {
    if (y == C(0)) return x / y;
    C mod = std::fmod(x, y);
    C div = (x - mod) / y;
    if (mod != C(0) && ((y < C(0)) != (mod < C(0)))) div -= C(1);
    if (div == C(0)) return std::copysign(C(0), x / y);
    C fl = std::floor(div);
    return div - fl > C(0.5) ? fl + C(1) : fl;
  } else if constexpr (std::is_unsigned_v<C>) {
    return y == 0 ? C(0) : static_cast<C>(x / y);
  } else {
    using U = std::make_unsigned_t<C>;
    if (y == 0) return C(0);
    if (y == C(-1)) return static_cast<C>(U(0) - static_cast<U>(x));
    C q = static_cast<C>(x / y);
    if (static_cast<C>(x % y) != 0 && ((x < 0) != (y < 0))) --q;
    return q;
  }
}

// numpy's shifts: a count outside [0, bits) shifts every bit out (0, or -1
// for a negative value shifted right); left shifts wrap like unsigned.
template <typename C>
C left_shift_impl(C x, C n) {
  constexpr int bits = static_cast<int>(sizeof(C) * 8);
  bool in_range = n < C(bits);
  if constexpr (std::is_signed_v<C>) in_range = in_range && n >= 0;
  if (!in_range) return C(0);
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(static_cast<U>(static_cast<U>(x) << n));
}
template <typename C>
C right_shift_impl(C x, C n) {
  constexpr int bits = static_cast<int>(sizeof(C) * 8);
  bool in_range = n < C(bits);
  if constexpr (std::is_signed_v<C>) {
    in_range = in_range && n >= 0;
    if (!in_range) return x < 0 ? C(-1) : C(0);
  }
  if (!in_range) return C(0);
  return static_cast<C>(x >> n);
}

// Integer add/sub/mul through unsigned types: wraps like the hardware
// instead of being undefined behaviour on overflow.
template <typename C, typename F>
C wrapping(C a, C b, F f) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(f(static_cast<U>(a), static_cast<U>(b)));
  } else {
    return static_cast<C>(f(a, b));
  }
}

template <typename C, typename Go>
bool with_unary_op(UnaryOp op, Go&& go) {
  constexpr bool fp = std::is_floating_point_v<C>;
  constexpr bool f32 = std::is_same_v<C, float>;
  switch (op) {
    // Floats flip or clear the sign bit (abs(-0.0) is +0.0, -(0.0) is -0.0);
    // integers wrap (abs and negation of the minimum give the minimum).
    case UnaryOp::abs:
      if constexpr (std::is_unsigned_v<C> || std::is_same_v<C, bool>) go([](C x) { return x; });
      else if constexpr (fp) go([](C x) { return std::fabs(x); });
      else go([](C x) { return x < C(0) ? static_cast<C>(wrapping(C(0), x, [](auto p, auto q) { return p - q; })) : x; });
      return true;
    case UnaryOp::negative:
      if constexpr (std::is_same_v<C, bool>) go([](C x) { return x; });
      else if constexpr (fp) go([](C x) { return -x; });
      else go([](C x) { return static_cast<C>(wrapping(C(0), x, [](auto p, auto q) { return p - q; })); });
      return true;
    case UnaryOp::sign:
      if constexpr (std::is_same_v<C, bool>) go([](C x) { return x; });
      else go([](C x) { return x != x ? x : static_cast<C>((C(0) < x) - (x < C(0))); });
      return true;
    case UnaryOp::square: go([](C x) { return wrapping(x, x, [](auto p, auto q) { return p * q; }); }); return true;
    case UnaryOp::relu: go([](C x) { return x > C(0) ? x : C(0); }); return true;
    case UnaryOp::floor:
      if constexpr (fp) go([](C x) { return std::floor(x); });
      else go([](C x) { return x; });
      return true;
    case UnaryOp::ceil:
      if constexpr (fp) go([](C x) { return std::ceil(x); });
      else go([](C x) { return x; });
      return true;
    case UnaryOp::round: go([](C x) { return round_half_even(x); }); return true;
    case UnaryOp::logical_not: go([](C x) { return !x; }); return true;
    case UnaryOp::bitwise_invert:
      if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
        go([](C x) { return static_cast<C>(~x); });
        return true;
      }
      return false;
    default: break;
  }
  if constexpr (fp) {
    switch (op) {
      case UnaryOp::exp:
        if constexpr (f32) go([](C x) { return simd::exp(x); });
        else go([](C x) { return std::exp(x); });
        return true;
      case UnaryOp::tanh:
        if constexpr (f32) go([](C x) { return simd::tanh(x); });
        else go([](C x) { return std::tanh(x); });
        return true;
      case UnaryOp::sigmoid:
        if constexpr (f32) go([](C x) { return simd::sigmoid(x); });
        else go([](C x) { return C(1) / (C(1) + std::exp(-x)); });
        return true;
      case UnaryOp::silu:
        if constexpr (f32) go([](C x) { return simd::silu(x); });
        else go([](C x) { return x / (C(1) + std::exp(-x)); });
        return true;
      case UnaryOp::gelu_approx:
        if constexpr (f32) go([](C x) { return simd::gelu_approx(x); });
        else go([](C x) {
          C u = C(0.7978845608028654) * (x + C(0.044715) * x * x * x);
          return x / (C(1) + std::exp(C(-2) * u));
        });
        return true;
      case UnaryOp::gelu:
        // erfc keeps full relative precision for negative x.
        go([](C x) { return C(0.5) * x * std::erfc(-x * C(0.7071067811865476)); });
        return true;
      case UnaryOp::expm1: go([](C x) { return std::expm1(x); }); return true;
      case UnaryOp::log: go([](C x) { return std::log(x); }); return true;
      case UnaryOp::log1p: go([](C x) { return std::log1p(x); }); return true;
      case UnaryOp::sqrt: go([](C x) { return std::sqrt(x); }); return true;
      case UnaryOp::rsqrt: go([](C x) { return C(1) / std::sqrt(x); }); return true;
      case UnaryOp::sin: go([](C x) { return std::sin(x); }); return true;
      case UnaryOp::cos: go([](C x) { return std::cos(x); }); return true;
      case UnaryOp::erf: go([](C x) { return std::erf(x); }); return true;
      case UnaryOp::erfinv: go([](C x) { return erfinv_impl(x); }); return true;
      case UnaryOp::tan: go([](C x) { return std::tan(x); }); return true;
      case UnaryOp::arcsin: go([](C x) { return std::asin(x); }); return true;
      case UnaryOp::arccos: go([](C x) { return std::acos(x); }); return true;
      case UnaryOp::arctan: go([](C x) { return std::atan(x); }); return true;
      case UnaryOp::sinh: go([](C x) { return std::sinh(x); }); return true;
      case UnaryOp::cosh: go([](C x) { return std::cosh(x); }); return true;
      case UnaryOp::arcsinh: go([](C x) { return std::asinh(x); }); return true;
      case UnaryOp::arccosh: go([](C x) { return std::acosh(x); }); return true;
      case UnaryOp::arctanh: go([](C x) { return std::atanh(x); }); return true;
      case UnaryOp::log2: go([](C x) { return std::log2(x); }); return true;
      case UnaryOp::log10: go([](C x) { return std::log10(x); }); return true;
      default: break;
    }
  }
  return false;
}

template <typename C, typename Same, typename ToBool>
bool with_binary_op(BinaryOp op, Same&& same, ToBool&& to_bool) {
  constexpr bool fp = std::is_floating_point_v<C>;
  switch (op) {
    case BinaryOp::add:
      same([](C x, C y) { return wrapping(x, y, [](auto p, auto q) { return p + q; }); });
      return true;
    case BinaryOp::subtract:
      same([](C x, C y) { return wrapping(x, y, [](auto p, auto q) { return p - q; }); });
      return true;
    case BinaryOp::multiply:
      same([](C x, C y) { return wrapping(x, y, [](auto p, auto q) { return p * q; }); });
      return true;
    case BinaryOp::divide:
      if constexpr (fp) {
        same([](C x, C y) { return x / y; });
        return true;
      }
      break;
    case BinaryOp::power:
      if constexpr (fp) {
        same([](C x, C y) { return std::pow(x, y); });
        return true;
      } else if constexpr (!std::is_same_v<C, bool>) {
        same([](C x, C y) { return int_power(x, y); });
        return true;
      }
      break;
    case BinaryOp::maximum: same([](C x, C y) { return (x > y || x != x) ? x : y; }); return true;
    case BinaryOp::minimum: same([](C x, C y) { return (x < y || x != x) ? x : y; }); return true;
    case BinaryOp::remainder:
      if constexpr (!std::is_same_v<C, bool>) {
        same([](C x, C y) { return python_remainder(x, y); });
        return true;
      }
      break;
    case BinaryOp::arctan2:
      if constexpr (fp) {
        same([](C x, C y) { return std::atan2(x, y); });
        return true;
      }
      break;
    case BinaryOp::floor_divide:
      if constexpr (!std::is_same_v<C, bool>) {
        same([](C x, C y) { return floor_divide_impl(x, y); });
        return true;
      }
      break;
    case BinaryOp::bitwise_and:
      if constexpr (!fp) {
        same([](C x, C y) { return static_cast<C>(x & y); });
        return true;
      }
      break;
    case BinaryOp::bitwise_or:
      if constexpr (!fp) {
        same([](C x, C y) { return static_cast<C>(x | y); });
        return true;
      }
      break;
    case BinaryOp::bitwise_xor:
      if constexpr (!fp) {
        same([](C x, C y) { return static_cast<C>(x ^ y); });
        return true;
      }
      break;
    case BinaryOp::left_shift:
      if constexpr (!fp && !std::is_same_v<C, bool>) {
        same([](C x, C y) { return left_shift_impl(x, y); });
        return true;
      }
      break;
    case BinaryOp::right_shift:
      if constexpr (!fp && !std::is_same_v<C, bool>) {
        same([](C x, C y) { return right_shift_impl(x, y); });
        return true;
      }
      break;
    case BinaryOp::equal: to_bool([](C x, C y) { return x == y; }); return true;
    case BinaryOp::not_equal: to_bool([](C x, C y) { return x != y; }); return true;
    case BinaryOp::less: to_bool([](C x, C y) { return x < y; }); return true;
    case BinaryOp::less_equal: to_bool([](C x, C y) { return x <= y; }); return true;
    case BinaryOp::greater: to_bool([](C x, C y) { return x > y; }); return true;
    case BinaryOp::greater_equal: to_bool([](C x, C y) { return x >= y; }); return true;
    case BinaryOp::logical_and: to_bool([](C x, C y) { return x != C(0) && y != C(0); }); return true;
    case BinaryOp::logical_or: to_bool([](C x, C y) { return x != C(0) || y != C(0); }); return true;
  }
  return false;
}

}  // namespace kiln::cpu
