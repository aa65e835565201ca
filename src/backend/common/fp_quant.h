#pragma once
// The math of MLX's microscaling quantization modes (mxfp4, mxfp8, nvfp4),
// written once for the CPU kernels (src/backend/cpu/quantized_fp*.cpp) and
// the CUDA ones (src/backend/cuda/quantized_fp.cu), so that both backends
// produce the same words and scales bit for bit.
//
// Why quantize is written as a chain of rounded steps: on the CPU, MLX
// 0.32.4 quantizes these modes with a graph of ordinary ops, each rounding
// to w's dtype. Matching it bit for bit (checked against mlx 0.32.4 by
// tests/test_quantize_fp.cpp) means rounding where it rounds: the scale
// s = max|w| / vmax in w's dtype, the e8m0 exponent e = ceil(log2 s)
// (exact), w / 2^e in w's dtype, and for fp4 the argmin over the 16 code
// values of |w - v| computed in w's dtype (float32 for nvfp4, whose steps
// promote), first index winning ties (so ties go to the smaller magnitude
// and small negatives to +0). The policy `R` rounds a value of the compute
// type C (float, or double for float64 inputs) to the storage dtype and
// back; R::kNonFiniteByte is the scale byte of a group with inf or NaN.
// Such groups follow MLX's results too (values divided by 0).
//
// Encodings (MLX's, not the OCP tables where they differ):
// - fp4 e2m1 codes 0..15: +{0, .5, 1, 1.5, 2, 3, 4, 6}, then the negatives.
// - fp8 e4m3 (MLX's to_fp8 / from_fp8): round to nearest even, saturating
//   at ±448, NaN and inf map to ±448 too; 0x7f and 0xff decode to NaN.
// - e8m0 scale byte s: 2^(s - 127), with s = 0 read as 2^-127.
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define KILN_FPQ_HD __host__ __device__ inline
#else
#define KILN_FPQ_HD inline
#endif

namespace kiln::fpq {

KILN_FPQ_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return __builtin_bit_cast(uint32_t, f);
#endif
}
KILN_FPQ_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}

// The fp4 e2m1 value of a code (bit 3 the sign).
KILN_FPQ_HD float fp4_value(uint32_t code) {
  const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float v = mag[code & 7u];
  return (code & 8u) ? -v : v;
}

// MLX's to_fp8: e4m3, round to nearest even, saturating.
KILN_FPQ_HD uint8_t to_fp8(float f) {
  uint32_t u = float_bits(f);
  uint32_t sign = (u >> 24) & 0x80u;
  u &= 0x7fffffffu;
  if (u >= 0x43e00000u) return static_cast<uint8_t>(0x7eu | sign);  // >= 448, inf, NaN
  if (u < (121u << 23)) {
    // Below 2^-6: multiples of 2^-9 (subnormals); adding 2^14 rounds there.
    float r = bits_float(u) + 16384.0f;
    return static_cast<uint8_t>((float_bits(r) - 0x46800000u) | sign);
  }
  uint32_t rounded = u + 0x7ffffu + ((u >> 20) & 1u);
  return static_cast<uint8_t>(((rounded >> 20) - (120u << 3)) | sign);
}

// MLX's from_fp8 (0x7f and 0xff are NaN, keeping the sign).
KILN_FPQ_HD float from_fp8(uint32_t b) {
  uint32_t m = b & 0x7fu;
  float v = m == 0x7fu ? bits_float(0x7fc00000u)
            : (m >> 3) == 0 ? static_cast<float>(m) * (1.0f / 512.0f)
                            : bits_float((m + (120u << 3)) << 20);
  return (b & 0x80u) ? -v : v;
}

// 2^(s - 127) for an e8m0 byte (s = 0: 2^-127, as MLX's bf16 trick).
KILN_FPQ_HD float e8m0_value(uint32_t s) { return s == 0 ? bits_float(0x00400000u) : bits_float(s << 23); }

// The value of a scale byte in float: e8m0 (group 32) or e4m3 (nvfp4).
KILN_FPQ_HD float scale_value(uint32_t s, bool e4m3) { return e4m3 ? from_fp8(s) : e8m0_value(s); }

// a / b, with x86's NaN results on every backend: an input NaN propagates
// (sign kept), an invalid operation (0 / 0, inf / inf) gives the negative
// default NaN. MLX's CPU quantize runs on x86 and those signs reach the
// fp8 codes (to_fp8 keeps the sign of a NaN).
template <typename C>
KILN_FPQ_HD C x86_div(C a, C b) {
  C r = a / b;
  if (r == r) return r;
  if (a != a) return a;
  if (b != b) return b;
  return -static_cast<C>(NAN);
}

// One group of `gs` values (gs = 16 or 32) of w: the codes (bits 4: 16
// nibbles, 8: bytes) into `codes` and the scale byte. `encode` is nvfp4's
// 2688 / global_scale (1 without one). Division is IEEE (no fast-math
// anywhere) and no product is contracted into an fma (the files that
// include this compile with -ffp-contract=off / --fmad=false).
template <typename C, typename R, typename Load>
KILN_FPQ_HD uint8_t quantize_group(Load w, int gs, int bits, bool nvfp4, float encode, uint8_t* codes) {
  C amax = 0;
  for (int k = 0; k < gs; ++k) {
    C a = w(k) < 0 ? -w(k) : w(k);
    amax = (a > amax || a != a) && amax == amax ? a : amax;  // a NaN wins, as MLX's max
  }
  const C vmax = bits == 4 ? C(6) : C(448);
  const C s = R::round(amax / vmax);
  uint8_t scale_byte;
  // The divisor of w's values and the factor after it (nvfp4's encode).
  C divisor;
  if (nvfp4) {
    scale_byte = to_fp8(static_cast<float>(static_cast<float>(s) * encode));
    divisor = R::round(static_cast<C>(from_fp8(scale_byte)));
  } else {
    // e = ceil(log2(s)), exactly (MLX 0.32.4's rule: no value of the group
    // exceeds vmax after the division), from the binary exponent; e + 127
    // modulo 256 is the byte (exponents below -127 wrap, as MLX's uint8 cast
    // leaves them).
    if (s - s == 0) {
      int e = 0;
      if (s != 0) {
        int ex;
        double m = frexp(static_cast<double>(s), &ex);  // s = m 2^ex, m in [0.5, 1)
        e = m == 0.5 ? ex - 1 : ex;
      }
      divisor = R::round(static_cast<C>(ldexp(1.0, e)));
      scale_byte = static_cast<uint8_t>(e + 127);
    } else {
      // inf or NaN (a group with inf or NaN, or beyond float's range): MLX's
      // exponent is INT_MIN there, its 2^e is 0, and its byte INT_MIN + 127
      // as w's dtype, cast to uint8: 0x80 for float32, 0 for the 16-bit
      // floats (R::kNonFiniteByte).
      divisor = 0;
      scale_byte = R::kNonFiniteByte;
    }
  }
  for (int k = 0; k < gs; ++k) {
    C q = R::round(x86_div(w(k), divisor));
    if (bits == 8) {
      codes[k] = to_fp8(static_cast<float>(q));
      continue;
    }
    // nvfp4's steps promote to float32 (encode is a float32 array in MLX).
    C best = 0;
    uint8_t idx = 0;
    if (nvfp4) {
      float t = static_cast<float>(q) * encode;
      for (uint32_t c = 0; c < 16; ++c) {
        float d = fabsf(t - fp4_value(c));
        if (c == 0 || d < static_cast<float>(best)) {
          best = static_cast<C>(d);
          idx = static_cast<uint8_t>(c);
        }
      }
    } else {
      for (uint32_t c = 0; c < 16; ++c) {
        C d = R::round(q - static_cast<C>(fp4_value(c)));
        d = d < 0 ? -d : d;
        if (c == 0 || d < best) {
          best = d;
          idx = static_cast<uint8_t>(c);
        }
      }
    }
    codes[k] = idx;
  }
  return scale_byte;
}

// MLX's to_fp4_e2m1 as a value: the nearest of the 8 magnitudes, ties to
// the even code (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2,
// 3.5 -> 4, 5 -> 4), beyond 6 saturating; the sign kept (-0.1 -> -0).
KILN_FPQ_HD float fp4_nearest_even(float x) {
  float a = x < 0 ? -x : x;
  float m = a > 5.0f     ? 6.0f
            : a >= 3.5f  ? 4.0f
            : a > 2.5f   ? 3.0f
            : a >= 1.75f ? 2.0f
            : a > 1.25f  ? 1.5f
            : a >= 0.75f ? 1.0f
            : a > 0.25f  ? 0.5f
                         : 0.0f;
  return (float_bits(x) >> 31) ? -m : m;
}

// qqmm's rounding of its operands (MLX 0.32.4's quantize_dequantize, which
// its qqmm applies to x, and to w when w is given unquantized): one group
// of `gs` values in, the dequantized values out (out(k, v); the caller
// rounds v once to the output dtype). It differs from quantize followed by
// dequantize in three points, each MLX's: every step runs in float32
// whatever the dtype (the scale max|w| / vmax is not rounded to it), fp4
// rounds ties to the even code (fp4_nearest_even; quantize's argmin sends
// them to the smaller magnitude), and a group whose scale encodes to 0
// gives zeros. The e8m0 exponent is ceil(log2 s) exactly, at least -127.
// `encode` is nvfp4's 2688 / global_scale (1 without one): the values are
// then those of the codes times the e4m3 scale, without the factor
// global_scale / 2688, which qqmm applies to the product. A group holding
// inf or NaN gives NaN (MLX's kernel makes a NaN 6 * scale: not copied).
template <typename Load, typename Store>
KILN_FPQ_HD void quantize_dequantize_group(Load w, Store out, int gs, int bits, bool nvfp4, float encode) {
  float amax = 0.0f;
  bool finite = true;
  for (int k = 0; k < gs; ++k) {
    const float v = w(k);
    finite = finite && v - v == 0.0f;
    const float a = v < 0 ? -v : v;
    amax = a > amax ? a : amax;
  }
  if (!finite) {
    for (int k = 0; k < gs; ++k) out(k, bits_float(0x7fc00000u));
    return;
  }
  const float s = amax / (bits == 4 ? 6.0f : 448.0f);
  float scale = 0.0f;
  if (nvfp4) {
    scale = from_fp8(to_fp8(s * encode));
  } else if (s != 0.0f) {
    int ex;
    const float m = frexpf(s, &ex);  // s = m 2^ex, m in [0.5, 1)
    const int e = m == 0.5f ? ex - 1 : ex;
    scale = ldexpf(1.0f, e < -127 ? -127 : e);
  }
  for (int k = 0; k < gs; ++k) {
    float q = scale == 0.0f ? 0.0f : w(k) / scale;
    if (nvfp4) q = q * encode;
    const float v = bits == 8 ? from_fp8(to_fp8(q)) : fp4_nearest_even(q);
    out(k, scale * v);
  }
}

}  // namespace kiln::fpq
