#pragma once
// References for quantized_matmul on llama.cpp's block formats, shared by
// tests/test_quant_blocks*.cpp and the op harness (cases_quant_blocks.cpp).
//
// On the CPU, float32 / float16 / bfloat16 x is rounded to 8-bit blocks
// before the product (include/kiln/ops.h, quantized_matmul): each 32 values
// of a row become q = round_half_even(x * (127 / amax)) times
// d = amax / 127, in float32. round_x8 repeats that rounding exactly, so a
// product against the rounded x in float64 leaves only the kernels' float32
// accumulation as error (the tight check); against the unrounded x the
// difference is bounded by x8_bound (the documented one).
#include <cfloat>
#include <cmath>
#include <vector>

#include "backend/cpu/quant_blocks_cpu.h"
#include "core/quantize_blocks.h"
#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {

// While alive, block-format products on the CPU take x as it is (the float
// kernels): for comparisons whose subject is not the 8-bit rounding of x
// (the GPU against the CPU, a quantized model against its dequantized copy).
struct CpuBlockXExact {
  CpuBlockXExact() { cpu::set_block_x_int8_override(0); }
  ~CpuBlockXExact() { cpu::set_block_x_int8_override(-1); }
  CpuBlockXExact(const CpuBlockXExact&) = delete;
  CpuBlockXExact& operator=(const CpuBlockXExact&) = delete;
};

// x (row-major, rows a multiple of 32 long) rounded as the CPU rounds it;
// d (optional) gets each block's scale.
inline std::vector<double> round_x8(const std::vector<double>& x, std::vector<double>* d = nullptr) {
  std::vector<double> out(x.size());
  if (d) d->assign(x.size() / 32, 0.0);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0.f;
    bool finite = true;
    for (int i = 0; i < 32; ++i) {
      const float v = static_cast<float>(x[32 * b + i]);
      finite = finite && std::isfinite(v);
      amax = std::max(amax, std::fabs(v));
    }
    const float s = 127.f / amax, scale = amax / 127.f;
    for (int i = 0; i < 32; ++i) {
      if (!finite) {
        out[32 * b + i] = NAN;
      } else if (!(s <= FLT_MAX)) {
        out[32 * b + i] = 0.0;
      } else {
        const float q = std::nearbyint(static_cast<float>(x[32 * b + i]) * s);
        out[32 * b + i] = static_cast<double>(scale) * q;
      }
    }
    if (d) (*d)[b] = finite ? scale : NAN;
  }
  return out;
}

// Whether the CPU rounds this x (not float64).
inline bool rounds_x(const array& x) { return x.dtype() != float64; }

// y[r, j] = sum_i x[r, i] w[j, i] in float64 (x as given, or as the CPU
// rounds it); w [N, K] block bytes.
inline std::vector<double> block_product(const std::vector<double>& x, int64_t k, const array& wq,
                                         const std::string& mode, bool round) {
  std::vector<double> xd = round ? round_x8(x) : x;
  std::vector<double> wd = to_double(detail::block_dequantize(wq, mode, float32, {}));
  const int64_t n = wq.shape(0), rows = static_cast<int64_t>(x.size()) / k;
  std::vector<double> y(rows * n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t i = 0; i < k; ++i) s += xd[r * k + i] * wd[j * k + i];
      y[r * n + j] = s;
    }
  return y;
}

// The largest |y(x) - y(rounded x)| the rounding allows: |x - d q| <= d / 2
// (round to nearest of x * s with s = 127 / amax), plus the float32
// roundings of x * s, of s and of d = amax / 127 (each at most 2^-24
// relative, which moves d q by at most 2^-21 |x| together), so
// |dy[r, j]| <= sum_i (d(i) / 2 + 2^-21 |x_i|) |w[j, i]|.
inline std::vector<double> x8_bound(const std::vector<double>& x, int64_t k, const array& wq, const std::string& mode) {
  std::vector<double> d;
  round_x8(x, &d);
  std::vector<double> wd = to_double(detail::block_dequantize(wq, mode, float32, {}));
  const int64_t n = wq.shape(0), rows = static_cast<int64_t>(x.size()) / k;
  std::vector<double> out(rows * n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t i = 0; i < k; ++i)
        s += (d[(r * k + i) / 32] / 2 + std::ldexp(std::fabs(x[r * k + i]), -21)) * std::fabs(wd[j * k + i]);
      out[r * n + j] = s;
    }
  return out;
}

}  // namespace kiln::test
