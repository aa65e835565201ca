#pragma once
// Branch-free float32 versions of the transcendental functions that the
// hot elementwise kernels need. Written so that GCC vectorizes a loop that
// calls them (std::exp and std::tanh are scalar library calls, about ten
// times slower). Accuracy: a few ulp over the whole float range.
#include <bit>
#include <cmath>
#include <cstdint>

namespace kiln::cpu::simd {

// c ? a : b, bitwise. GCC if-converts (and so vectorizes) a ?: only when
// neither arm can trap; with the default -ftrapping-math, range propagation
// through a ?: clamp specializes the arithmetic after it into branches
// (e.g. folding exp(89) into an overflowing constant product), which blocks
// vectorization of every loop calling these functions. std::fmin/fmax are
// library calls. The masks below give the same results without branches.
inline float select(bool c, float a, float b) {
  uint32_t m = 0u - static_cast<uint32_t>(c);
  return std::bit_cast<float>((std::bit_cast<uint32_t>(a) & m) | (std::bit_cast<uint32_t>(b) & ~m));
}
// Clamps to [lo, hi]; a NaN passes through (every caller returns x itself
// for a NaN x).
inline float clamp(float x, float lo, float hi) {
  float y = select(x < lo, lo, x);
  return select(y > hi, hi, y);
}

// x where x is NaN, else v.
inline float nan_passthrough(float x, float v) { return select(x != x, x, v); }

// e^x. Range reduction x = n ln2 + r with |r| <= ln2/2, a degree-6
// polynomial for e^r, and 2^n applied in two halves so every n from the
// clamped range stays a normal float (overflow gives inf, underflow 0).
inline float exp(float x) {
  float xc = clamp(x, -104.0f, 89.0f);
  float t = xc * 1.44269504088896341f + 12582912.0f;  // rounds to nearest integer
  float n = t - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t ni = static_cast<int32_t>(n);
  int32_t n1 = ni >> 1;
  int32_t n2 = ni - n1;
  float s1 = std::bit_cast<float>((n1 + 127) << 23);
  float s2 = std::bit_cast<float>((n2 + 127) << 23);
  float out = p * s1 * s2;
  return nan_passthrough(x, out);
}

// tanh as a rational function of x (odd numerator of degree 13, even
// denominator of degree 6), exact to a few ulp; saturates past |x| ~ 7.9.
inline float tanh(float x) {
  float xc = clamp(x, -7.90531110763549805f, 7.90531110763549805f);
  float x2 = xc * xc;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 - 8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * xc;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  float out = p / q;
  out = select(std::fabs(x) < 0.0004f, x, out);
  return nan_passthrough(x, out);
}

inline float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

inline float silu(float x) { return x / (1.0f + exp(-x)); }

// 0.5 x (1 + tanh(u)) written as x * sigmoid(2u): no cancellation for
// negative x, and one exp instead of a tanh.
inline float gelu_approx(float x) {
  constexpr float k = 0.7978845608028654f;  // sqrt(2/pi)
  float u = k * (x + 0.044715f * x * x * x);
  return x / (1.0f + exp(-2.0f * u));
}

}  // namespace kiln::cpu::simd
