#pragma once
// A naive double-precision DFT (O(n^2) per row) and numpy's padding and
// real-transform rules, the reference of kiln::fft's tests (test_fft.cpp,
// tests/harness/cases_complex.cpp).
#include <cmath>
#include <complex>
#include <numbers>
#include <vector>

#include "kiln/array.h"

namespace kiln::test {

using cdouble = std::complex<double>;

// Row-major complex values of a shape.
struct CTensor {
  Shape shape;
  std::vector<cdouble> v;

  static int64_t count(const Shape& s) {
    int64_t n = 1;
    for (int d : s) n *= d;
    return n;
  }
  std::vector<int64_t> strides() const {
    std::vector<int64_t> st(shape.size(), 1);
    for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * shape[d + 1];
    return st;
  }
};

// `t` truncated or zero-padded along each axis to `shape`.
inline CTensor resized(const CTensor& t, const Shape& shape) {
  CTensor out{shape, std::vector<cdouble>(CTensor::count(shape))};
  auto ist = t.strides(), ost = out.strides();
  for (int64_t i = 0; i < static_cast<int64_t>(out.v.size()); ++i) {
    int64_t rem = i, src = 0;
    bool inside = true;
    for (size_t d = 0; d < shape.size(); ++d) {
      int64_t idx = rem / ost[d];
      rem %= ost[d];
      if (idx >= t.shape[d]) inside = false;
      src += idx * ist[d];
    }
    if (inside) out.v[i] = t.v[src];
  }
  return out;
}

// The DFT along one axis (inverse: e^{+i...} and 1 / n).
inline CTensor dft_axis(const CTensor& t, int axis, bool inverse) {
  CTensor out = t;
  auto st = t.strides();
  int n = t.shape[axis];
  int64_t step = st[axis];
  double sign = inverse ? 1.0 : -1.0;
  for (int64_t base = 0; base < static_cast<int64_t>(t.v.size()); ++base) {
    if ((base / step) % n != 0) continue;  // the start of a row along `axis`
    for (int k = 0; k < n; ++k) {
      cdouble acc = 0;
      for (int j = 0; j < n; ++j) {
        double ang = sign * 2.0 * std::numbers::pi * static_cast<double>((static_cast<int64_t>(j) * k) % n) / n;
        acc += t.v[base + j * step] * cdouble(std::cos(ang), std::sin(ang));
      }
      out.v[base + k * step] = inverse ? acc / static_cast<double>(n) : acc;
    }
  }
  return out;
}

// numpy's fftn / ifftn with sizes n over axes (normalized, non-negative).
inline CTensor ref_fftn(CTensor t, const Shape& n, const std::vector<int>& axes, bool inverse) {
  Shape s = t.shape;
  for (size_t i = 0; i < axes.size(); ++i) s[axes[i]] = n[i];
  t = resized(t, s);
  for (int ax : axes) t = dft_axis(t, ax, inverse);
  return t;
}

// numpy's rfftn: the full transform of the real input, the last axis cut
// to n / 2 + 1.
inline CTensor ref_rfftn(const CTensor& t, const Shape& n, const std::vector<int>& axes) {
  CTensor f = ref_fftn(t, n, axes, false);
  Shape s = f.shape;
  s[axes.back()] = n.back() / 2 + 1;
  return resized(f, s);
}

// numpy's irfftn: the other axes resized to n, the real axis to n / 2 + 1
// bins made Hermitian (imaginary parts of DC and Nyquist dropped), then the
// inverse transform's real part.
inline CTensor ref_irfftn(const CTensor& t, const Shape& n, const std::vector<int>& axes) {
  int last = axes.back(), m = n.back();
  Shape s = t.shape;
  for (size_t i = 0; i < axes.size(); ++i) s[axes[i]] = n[i];
  s[last] = m / 2 + 1;
  CTensor half = resized(t, s);
  for (size_t i = 0; i + 1 < axes.size(); ++i) half = dft_axis(half, axes[i], true);
  Shape fs = s;
  fs[last] = m;
  CTensor full = resized(half, fs);
  auto st = full.strides();
  int64_t step = st[last];
  for (int64_t base = 0; base < static_cast<int64_t>(full.v.size()); ++base) {
    if ((base / step) % m != 0) continue;
    full.v[base] = full.v[base].real();
    if (m % 2 == 0) full.v[base + (m / 2) * step] = full.v[base + (m / 2) * step].real();
    for (int k = m / 2 + 1; k < m; ++k) full.v[base + k * step] = std::conj(full.v[base + (m - k) * step]);
  }
  CTensor out = dft_axis(full, last, true);
  for (auto& z : out.v) z = z.real();
  return out;
}

}  // namespace kiln::test
