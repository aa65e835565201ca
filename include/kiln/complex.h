#pragma once
// complex64_t: the element type of the complex64 dtype (MLX's
// mlx/types/complex.h), two floats, real part first (numpy's '<c8').
//
// Differences from MLX, whose complex64_t derives from std::complex<float>:
// this is a plain struct whose members and arithmetic are host/device code,
// so the CPU and CUDA kernels compute with the very same definitions
// (+, -, *, / and the comparisons below); it converts to and from
// std::complex<float> implicitly. It has no implicit conversion to float
// (MLX's takes the real part) and no ordering operators of its own; the
// elementwise ops that order (less, greater, maximum, minimum, ...) order
// complex64 as numpy and MLX do, by the real part and then the imaginary
// part (src/backend/common/op_math.inc).
#include <cmath>
#include <complex>
#include <type_traits>

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KILN_HOST_DEVICE inline
#endif

namespace kiln {

// Trivially default-constructible (uninitialized, like float) so that CUDA
// kernels may hold it in shared memory; complex64_t{} is zero.
struct alignas(8) complex64_t {
  float re;
  float im;
  // Marks the type for op_math.inc's is_complex_v (which must not name it).
  static constexpr bool kiln_complex = true;

  complex64_t() = default;
  KILN_HOST_DEVICE constexpr complex64_t(float r, float i) : re(r), im(i) {}
  // A real value (any arithmetic or 16-bit float type) with a zero imaginary part.
  template <typename T, typename = std::enable_if_t<!std::is_same_v<T, complex64_t> && std::is_convertible_v<T, float>>>
  KILN_HOST_DEVICE constexpr complex64_t(T x) : re(static_cast<float>(x)), im(0.0f) {}  // NOLINT(implicit)
  complex64_t(std::complex<float> z) : re(z.real()), im(z.imag()) {}                      // NOLINT(implicit)
  operator std::complex<float>() const { return {re, im}; }                               // NOLINT(implicit)

  KILN_HOST_DEVICE constexpr float real() const { return re; }
  KILN_HOST_DEVICE constexpr float imag() const { return im; }
};

KILN_HOST_DEVICE complex64_t operator+(complex64_t a, complex64_t b) { return {a.re + b.re, a.im + b.im}; }
KILN_HOST_DEVICE complex64_t operator-(complex64_t a, complex64_t b) { return {a.re - b.re, a.im - b.im}; }
KILN_HOST_DEVICE complex64_t operator-(complex64_t a) { return {-a.re, -a.im}; }
// Every product that meets a sum is an explicit fused multiply-add: with
// FMA contraction left to the compiler, the same expression rounded
// differently (by an ulp) where it was inlined into a vector loop and
// where it was called out of line, so a vmapped product differed from the
// loop of slices, and the CPU from the GPU.
KILN_HOST_DEVICE float complex_fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
KILN_HOST_DEVICE complex64_t operator*(complex64_t a, complex64_t b) {
  return {complex_fma(a.re, b.re, -(a.im * b.im)), complex_fma(a.re, b.im, a.im * b.re)};
}
// Smith's algorithm (numpy's): divides by the larger part of b first, so
// |b|^2 is never formed and cannot overflow or underflow.
KILN_HOST_DEVICE complex64_t operator/(complex64_t a, complex64_t b) {
  float abs_re = b.re < 0.0f ? -b.re : b.re;
  float abs_im = b.im < 0.0f ? -b.im : b.im;
  if (abs_re >= abs_im) {
    if (abs_re == 0.0f && abs_im == 0.0f) return {a.re / abs_re, a.im / abs_im};  // inf or nan, as numpy
    float r = b.im / b.re, d = complex_fma(b.im, r, b.re);
    return {complex_fma(a.im, r, a.re) / d, complex_fma(-a.re, r, a.im) / d};
  }
  float r = b.re / b.im, d = complex_fma(b.re, r, b.im);
  return {complex_fma(a.re, r, a.im) / d, complex_fma(a.im, r, -a.re) / d};
}
KILN_HOST_DEVICE bool operator==(complex64_t a, complex64_t b) { return a.re == b.re && a.im == b.im; }
KILN_HOST_DEVICE bool operator!=(complex64_t a, complex64_t b) { return !(a == b); }

}  // namespace kiln
