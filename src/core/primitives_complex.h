#pragma once
// The complex64 primitives (MLX's Real, Imag and FFT). Real and Imag are
// views of the complex buffer as float32 (every other float), on every
// backend: their eval lives in core (ops_complex.cpp). FFT is listed in
// KILN_FOR_EACH_PRIMITIVE (primitives.h); its kernels: backend/cpu/fft.cpp
// (KissFFT) and backend/cuda/fft.cu (cuFFT).
#include <vector>

#include "core/primitives.h"

namespace kiln {

class Real : public Primitive {
 public:
  using Primitive::Primitive;
  KILN_PRIMITIVE_BODY(Real)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override { return dynamic_cast<const Real*>(&o) != nullptr; }
};

class Imag : public Primitive {
 public:
  using Primitive::Primitive;
  KILN_PRIMITIVE_BODY(Imag)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override { return dynamic_cast<const Imag*>(&o) != nullptr; }
};

// Discrete Fourier transforms along `axes` (distinct, normalized), as MLX's
// FFT: complex -> complex (real = false); real = true, inverse = false:
// float32 -> complex64 with the last axis of n points giving n / 2 + 1;
// real = true, inverse = true: complex64 -> float32, the last axis of the
// output has the output's size (the input holds its first n / 2 + 1 bins,
// imaginary parts of the DC and Nyquist bins ignored, as numpy). Inverse
// transforms are scaled by 1 / n per axis (numpy's "backward" norm).
// The input has exactly the shape the transform reads (the op layer
// pads or truncates to n). Difference from MLX: a real transform also
// stores n, the length of its real axis (the last of axes) on the real
// side, since an inverse's output size (even or odd) cannot be told from
// its input; 0 for complex transforms.
class FFT : public Primitive {
 public:
  FFT(Stream s, std::vector<int> axes, bool inverse, bool real, int n = 0)
      : Primitive(s), axes_(std::move(axes)), inverse_(inverse), real_(real), n_(n) {}
  KILN_PRIMITIVE_BODY(FFT)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  const std::vector<int>& axes() const { return axes_; }
  bool inverse() const { return inverse_; }
  bool real() const { return real_; }
  int n() const { return n_; }

 private:
  std::vector<int> axes_;
  bool inverse_, real_;
  int n_;
};

}  // namespace kiln
