#pragma once
// The math of llama.cpp's block formats, written once for the CPU and the
// CUDA compilers (as philox.h): how a block decodes to weights, and how
// ggml's reference quantizers encode a block.
//
// Decoding. Every format decodes weight i of a block as
//     value = a * q_i + b
// with q_i a small integer and (a, b) constant over a sub-block of 16 or 32
// weights. a and b are computed in float32 with exactly the operations, in
// the order, of gguf-py's numpy dequantizers (e.g. Q4_K: a = d * sc,
// b = -(dmin * m)), and b = -0.0f where the format has no offset
// (x + -0.0f == x for every x, signed zeros included), so decoding is bit
// for bit the reference's as long as nothing fuses the multiply and the add:
// the host files that include this are compiled with -ffp-contract=off and
// device code goes through the _rn intrinsics below.
//
// Encoding. Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 follow gguf-py's quantizers
// (themselves bit-exact with ggml's quantize_row_*_ref); the K formats
// follow ggml's reference algorithms (make_qkx2_quants, make_qx_quants,
// make_q3_quants: a search for the sub-block scale and min that minimizes a
// weighted error, then 6- or 4-bit quantized sub-block scales under one
// fp16 super-scale).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/block_format.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define KILN_QB __host__ __device__ __forceinline__
#else
#define KILN_QB inline
#endif

namespace kiln::qb {

constexpr int kQK = 256;  // weights in a K-format super-block

KILN_QB float fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
KILN_QB float fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

KILN_QB uint32_t as_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
KILN_QB float from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// fp16 -> fp32, exact; NaN payloads kept as numpy keeps them.
KILN_QB float half_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  // The hardware conversion (exact) on the GPU, but for inf and NaN, whose
  // payload rule is the one below.
  if ((h & 0x7c00u) != 0x7c00u) return __half2float(__ushort_as_half(h));
#endif
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return from_bits(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) return from_bits(as_bits(fmul(static_cast<float>(mant), 1.0f / 16777216.0f)) | sign);
  return from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

// fp32 -> fp16, round to nearest even (numpy's astype(float16)).
KILN_QB uint16_t float_to_half(float f) {
  uint32_t x = as_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u, mag = x & 0x7fffffffu;
  if (mag >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u : 0u));
  if (mag >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (mag < 0x38800000u) {  // a half subnormal (or zero): units of 2^-24
    if (mag <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25 rounds to 0
    uint32_t e = mag >> 23, m = (mag & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e;  // 14..24
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  mag += 0xc8000fffu + ((mag >> 13) & 1u);
  return static_cast<uint16_t>(sign | (mag >> 13));
}

KILN_QB uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
KILN_QB float load_half(const uint8_t* p) { return half_to_float(load_u16(p)); }
KILN_QB void store_half(uint8_t* p, float f) {
  uint16_t h = float_to_half(f);
  p[0] = static_cast<uint8_t>(h & 0xff);
  p[1] = static_cast<uint8_t>(h >> 8);
}
KILN_QB uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

// ggml's nearest_int: round half to even through the 1.5 * 2^23 trick
// (valid for |v| < 2^22, which every caller guarantees).
KILN_QB int nearest_int(float v) {
  float t = fadd(v, 12582912.f);
  return static_cast<int>(as_bits(t) & 0x007fffffu) - 0x00400000;
}

KILN_QB int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// ---- decoding ----

// Weights per (a, b) pair.
KILN_QB constexpr int sub_size(BlockFormat f) {
  return (f == BlockFormat::q2_k || f == BlockFormat::q3_k || f == BlockFormat::q6_k) ? 16 : 32;
}

// Whether a format's sub-blocks carry an offset b (w = a * q + b).
KILN_QB constexpr bool has_offset(BlockFormat f) {
  return f == BlockFormat::q4_1 || f == BlockFormat::q5_1 || f == BlockFormat::q2_k || f == BlockFormat::q4_k ||
         f == BlockFormat::q5_k;
}

// K formats' 6-bit scale and min of sub-block j (ggml's get_scale_min_k4).
KILN_QB void scale_min_k4(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q3_K's signed 6-bit scale of sub-block j.
KILN_QB int scale_q3_k(const uint8_t* s, int j) {
  int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
  int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}

// (a, b) of sub-block j.
KILN_QB void sub_params(BlockFormat f, const uint8_t* blk, int j, float& a, float& b) {
  a = 0.f;
  b = -0.0f;
  switch (f) {
    case BlockFormat::q4_0:
    case BlockFormat::q5_0:
    case BlockFormat::q8_0:
      a = load_half(blk);
      return;
    case BlockFormat::q4_1:
    case BlockFormat::q5_1:
      a = load_half(blk);
      b = load_half(blk + 2);
      return;
    case BlockFormat::q2_k: {
      int s = blk[j];
      a = fmul(load_half(blk + 80), static_cast<float>(s & 0xF));
      b = -fmul(load_half(blk + 82), static_cast<float>(s >> 4));
      return;
    }
    case BlockFormat::q3_k:
      a = fmul(load_half(blk + 108), static_cast<float>(scale_q3_k(blk + 96, j)));
      return;
    case BlockFormat::q4_k:
    case BlockFormat::q5_k: {
      int sc, m;
      scale_min_k4(blk + 4, j, sc, m);
      a = fmul(load_half(blk), static_cast<float>(sc));
      b = -fmul(load_half(blk + 2), static_cast<float>(m));
      return;
    }
    case BlockFormat::q6_k:
      a = fmul(load_half(blk + 208), static_cast<float>(static_cast<int8_t>(blk[192 + j])));
      return;
  }
}

// The integer q of weight i of a block.
KILN_QB int quant_value(BlockFormat f, const uint8_t* blk, int i) {
  switch (f) {
    case BlockFormat::q4_0:
      return ((i < 16 ? blk[2 + i] : blk[2 + i - 16] >> 4) & 0xF) - 8;
    case BlockFormat::q4_1:
      return (i < 16 ? blk[4 + i] : blk[4 + i - 16] >> 4) & 0xF;
    case BlockFormat::q5_0:
      return (((i < 16 ? blk[6 + i] : blk[6 + i - 16] >> 4) & 0xF) | (((load_u32(blk + 2) >> i) & 1) << 4)) - 16;
    case BlockFormat::q5_1:
      return ((i < 16 ? blk[8 + i] : blk[8 + i - 16] >> 4) & 0xF) | (((load_u32(blk + 4) >> i) & 1) << 4);
    case BlockFormat::q8_0:
      return static_cast<int8_t>(blk[2 + i]);
    case BlockFormat::q2_k: {
      int h = i / 128, s = (i % 128) / 32, l = i % 32;
      return (blk[16 + h * 32 + l] >> (2 * s)) & 3;
    }
    case BlockFormat::q3_k: {
      int h = i / 128, s = (i % 128) / 32, l = i % 32;
      int low = (blk[32 + h * 32 + l] >> (2 * s)) & 3;
      int high = (blk[l] >> (i / 32)) & 1;
      return low - (high ? 0 : 4);
    }
    case BlockFormat::q4_k: {
      int j = i / 32, l = i % 32;
      return (blk[16 + (j / 2) * 32 + l] >> (4 * (j % 2))) & 0xF;
    }
    case BlockFormat::q5_k: {
      int j = i / 32, l = i % 32;
      int low = (blk[48 + (j / 2) * 32 + l] >> (4 * (j % 2))) & 0xF;
      return low | (((blk[16 + l] >> j) & 1) << 4);
    }
    case BlockFormat::q6_k: {
      int h = i / 128, r = i % 128;
      int low = (blk[h * 64 + r % 64] >> (4 * (r / 64))) & 0xF;
      int high = (blk[128 + h * 32 + r % 32] >> (2 * (r / 32))) & 3;
      return (low | (high << 4)) - 32;
    }
  }
  return 0;
}

KILN_QB float decode(float a, float b, int q) { return fadd(fmul(a, static_cast<float>(q)), b); }

// ---- encoding: the formats of 32 weights (gguf-py's quantizers) ----

// The first element of largest magnitude (numpy's argmax of |x|).
KILN_QB float signed_absmax(const float* x, int n) {
  float amax = 0.f, max = 0.f;
  for (int i = 0; i < n; ++i) {
    float ax = fabsf(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  return max;
}
KILN_QB float inverse_or_zero(float d) { return d == 0.f ? 0.f : 1.f / d; }
// trunc toward zero then clip to [0, hi] (numpy's trunc().astype(uint8).clip).
KILN_QB int trunc_clip(float v, int hi) {
  int q = static_cast<int>(truncf(v));
  return clampi(q, 0, hi);
}

KILN_QB void pack_nibbles(const int* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
}
KILN_QB void pack_high_bits(const int* q, uint8_t* qh) {
  uint32_t h = 0;
  for (int j = 0; j < 32; ++j) h |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  for (int k = 0; k < 4; ++k) qh[k] = static_cast<uint8_t>(h >> (8 * k));
}

KILN_QB void quantize_q8_0(const float* x, uint8_t* y) {
  float amax = 0.f;
  for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(x[i]));
  float d = amax / 127.f, id = inverse_or_zero(d);
  store_half(y, d);
  for (int i = 0; i < 32; ++i) y[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(roundf(fmul(x[i], id))));
}

// Symmetric 4/5-bit: d = max / -2^(bits-1), q = trunc(x / d + 2^(bits-1) + 0.5).
template <int kBits>
KILN_QB void quantize_symmetric(const float* x, float& d, int* q) {
  constexpr float half_range = static_cast<float>(1 << (kBits - 1));
  d = signed_absmax(x, 32) / -half_range;
  float id = inverse_or_zero(d);
  for (int i = 0; i < 32; ++i) q[i] = trunc_clip(fadd(fmul(x[i], id), half_range + 0.5f), (1 << kBits) - 1);
}
// Asymmetric 4/5-bit: d = (max - min) / (2^bits - 1), q = trunc((x - min) / d + 0.5).
template <int kBits>
KILN_QB void quantize_affine(const float* x, float& d, float& min, int* q) {
  float mx = x[0];
  min = x[0];
  for (int i = 1; i < 32; ++i) {
    mx = fmaxf(mx, x[i]);
    min = fminf(min, x[i]);
  }
  d = (mx - min) / static_cast<float>((1 << kBits) - 1);
  float id = inverse_or_zero(d);
  for (int i = 0; i < 32; ++i) q[i] = trunc_clip(fadd(fmul(fadd(x[i], -min), id), 0.5f), (1 << kBits) - 1);
}

KILN_QB void quantize_q4_0(const float* x, uint8_t* y) {
  float d;
  int q[32];
  quantize_symmetric<4>(x, d, q);
  store_half(y, d);
  pack_nibbles(q, y + 2);
}
KILN_QB void quantize_q4_1(const float* x, uint8_t* y) {
  float d, m;
  int q[32];
  quantize_affine<4>(x, d, m, q);
  store_half(y, d);
  store_half(y + 2, m);
  pack_nibbles(q, y + 4);
}
KILN_QB void quantize_q5_0(const float* x, uint8_t* y) {
  float d;
  int q[32];
  quantize_symmetric<5>(x, d, q);
  store_half(y, d);
  pack_high_bits(q, y + 2);
  pack_nibbles(q, y + 6);
}
KILN_QB void quantize_q5_1(const float* x, uint8_t* y) {
  float d, m;
  int q[32];
  quantize_affine<5>(x, d, m, q);
  store_half(y, d);
  store_half(y + 2, m);
  pack_high_bits(q, y + 4);
  pack_nibbles(q, y + 8);
}

}  // namespace kiln::qb

#include "backend/cpu/quant_blocks_kquants.h"
