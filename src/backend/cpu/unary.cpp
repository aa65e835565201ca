// Unary elementwise kernels. The op layer casts integer inputs of floating
// ops to float32, so transcendental ops only see floating types; float32
// and the 16-bit floats use the vectorizable versions in simd_math.h.
#include <cmath>

#include "backend/cpu/elementwise.h"
#include "backend/cpu/simd_math.h"
#include "core/primitives.h"

namespace kiln {
namespace {

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

template <typename T>
void run_unary(UnaryOp op, const array& in, array& out) {
  using C = cpu::compute_t<T>;
  constexpr bool fp = std::is_floating_point_v<C>;
  constexpr bool f32 = std::is_same_v<C, float>;
  auto go = [&](auto fn) { cpu::unary_loop<T, T>(in, out, fn); };
  switch (op) {
    case UnaryOp::abs:
      if constexpr (std::is_unsigned_v<C> || std::is_same_v<C, bool>) return go([](C x) { return x; });
      else return go([](C x) { return x < C(0) ? C(-x) : x; });
    case UnaryOp::negative:
      if constexpr (std::is_same_v<C, bool>) return go([](C x) { return x; });
      else return go([](C x) { return static_cast<C>(C(0) - x); });
    case UnaryOp::sign:
      if constexpr (std::is_same_v<C, bool>) return go([](C x) { return x; });
      else return go([](C x) { return x != x ? x : static_cast<C>((C(0) < x) - (x < C(0))); });
    case UnaryOp::square: return go([](C x) { return static_cast<C>(x * x); });
    case UnaryOp::relu: return go([](C x) { return x > C(0) ? x : C(0); });
    case UnaryOp::floor:
      if constexpr (fp) return go([](C x) { return std::floor(x); });
      else return go([](C x) { return x; });
    case UnaryOp::ceil:
      if constexpr (fp) return go([](C x) { return std::ceil(x); });
      else return go([](C x) { return x; });
    case UnaryOp::round: return go([](C x) { return round_half_even(x); });
    case UnaryOp::logical_not: return go([](C x) { return !x; });
    default: break;
  }
  if constexpr (fp) {
    switch (op) {
      case UnaryOp::exp:
        if constexpr (f32) return go([](C x) { return cpu::simd::exp(x); });
        else return go([](C x) { return std::exp(x); });
      case UnaryOp::tanh:
        if constexpr (f32) return go([](C x) { return cpu::simd::tanh(x); });
        else return go([](C x) { return std::tanh(x); });
      case UnaryOp::sigmoid:
        if constexpr (f32) return go([](C x) { return cpu::simd::sigmoid(x); });
        else return go([](C x) { return C(1) / (C(1) + std::exp(-x)); });
      case UnaryOp::silu:
        if constexpr (f32) return go([](C x) { return cpu::simd::silu(x); });
        else return go([](C x) { return x / (C(1) + std::exp(-x)); });
      case UnaryOp::gelu_approx:
        if constexpr (f32) return go([](C x) { return cpu::simd::gelu_approx(x); });
        else return go([](C x) {
          C u = C(0.7978845608028654) * (x + C(0.044715) * x * x * x);
          return x / (C(1) + std::exp(C(-2) * u));
        });
      case UnaryOp::gelu:
        // erfc keeps full relative precision for negative x.
        return go([](C x) { return C(0.5) * x * std::erfc(-x * C(0.7071067811865476)); });
      case UnaryOp::expm1: return go([](C x) { return std::expm1(x); });
      case UnaryOp::log: return go([](C x) { return std::log(x); });
      case UnaryOp::log1p: return go([](C x) { return std::log1p(x); });
      case UnaryOp::sqrt: return go([](C x) { return std::sqrt(x); });
      case UnaryOp::rsqrt: return go([](C x) { return C(1) / std::sqrt(x); });
      case UnaryOp::sin: return go([](C x) { return std::sin(x); });
      case UnaryOp::cos: return go([](C x) { return std::cos(x); });
      case UnaryOp::erf: return go([](C x) { return std::erf(x); });
      case UnaryOp::erfinv: return go([](C x) { return erfinv_impl(x); });
      default: break;
    }
  }
  throw Error(std::string("[") + unary_op_name(op) + "] unsupported dtype " + dtype_name(in.dtype()));
}

}  // namespace

void Unary::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  if (in.dtype() == out.dtype() && in.desc()->offset == 0) {
    detail::allocate_or_donate(out, in, unary_op_name(op_));
  } else {
    detail::allocate(out, unary_op_name(op_));
  }
  cpu::dispatch_all(in.dtype(), [&](auto tag) { run_unary<typename decltype(tag)::type>(op_, in, out); });
}

}  // namespace kiln
