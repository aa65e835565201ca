#pragma once
// Panel packing: copies a strided slice of A or B into the contiguous,
// zero-padded order a micro-kernel reads (see PackFn in gemm_internal.h).
// Plain C++ that GCC vectorizes for the library's baseline ISA (AVX2);
// packing is O(MK + KN) against O(MNK) compute, so it only has to avoid
// being slow, and the unit-stride cases below are the ones that matter.
#include <cstdint>
#include <cstring>

#include "kiln/dtype.h"

namespace kiln::cpu::gemm_detail {

inline float widen(float x) { return x; }
inline float widen(bfloat16_t x) { return bfloat16_t::to_float(x.bits); }

// fp32 panels: dst[k * R + r] = float(src[r * line_stride + k * k_stride]).
// S is float or bfloat16_t (bf16 is widened here so the fp32 kernels can
// run bf16 GEMMs on CPUs without AVX512-BF16).
template <class S, int R>
void pack_f32_panel(const void* src_v, int64_t line_stride, int64_t k_stride, int64_t len, int64_t klen,
                    void* dst_v) {
  const S* src = static_cast<const S*>(src_v);
  float* dst = static_cast<float*>(dst_v);
  if (line_stride == 1 && len == R) {
    // Lines contiguous (row-major B, column-major A): one R-wide copy per k.
    for (int64_t k = 0; k < klen; ++k) {
      const S* s = src + k * k_stride;
      float* d = dst + k * R;
      for (int r = 0; r < R; ++r) d[r] = widen(s[r]);
    }
    return;
  }
  if (len < R) {
    for (int64_t k = 0; k < klen; ++k) std::memset(dst + k * R + len, 0, (R - len) * sizeof(float));
  }
  if (k_stride == 1) {
    // K contiguous (row-major A, column-major B): a transpose. Blocks of 8 k
    // keep the R destination rows being written in L1.
    int64_t k0 = 0;
    for (; k0 + 8 <= klen; k0 += 8) {
      for (int64_t r = 0; r < len; ++r) {
        const S* s = src + r * line_stride + k0;
        float* d = dst + k0 * R + r;
        for (int kk = 0; kk < 8; ++kk) d[kk * R] = widen(s[kk]);
      }
    }
    for (int64_t r = 0; r < len; ++r) {
      const S* s = src + r * line_stride;
      for (int64_t k = k0; k < klen; ++k) dst[k * R + r] = widen(s[k]);
    }
    return;
  }
  for (int64_t k = 0; k < klen; ++k) {
    for (int64_t r = 0; r < len; ++r) dst[k * R + r] = widen(src[r * line_stride + k * k_stride]);
  }
}

// bf16 pair panels for vdpbf16ps: 32-bit group (kp, r) holds elements
// (r, 2kp) in the low half and (r, 2kp+1) in the high half; an odd K gets a
// zero partner (0 * x adds nothing).
template <int R>
void pack_bf16_pair_panel(const void* src_v, int64_t line_stride, int64_t k_stride, int64_t len, int64_t klen,
                          void* dst_v) {
  const uint16_t* src = static_cast<const uint16_t*>(src_v);
  uint32_t* dst = static_cast<uint32_t*>(dst_v);
  const int64_t kfull = klen / 2, kpairs = (klen + 1) / 2;
  if (line_stride == 1 && len == R) {
    // Row-major B: interleave rows 2kp and 2kp+1.
    for (int64_t kp = 0; kp < kfull; ++kp) {
      const uint16_t* s0 = src + 2 * kp * k_stride;
      const uint16_t* s1 = s0 + k_stride;
      uint32_t* d = dst + kp * R;
      for (int r = 0; r < R; ++r) d[r] = static_cast<uint32_t>(s0[r]) | (static_cast<uint32_t>(s1[r]) << 16);
    }
    if (kfull < kpairs) {
      const uint16_t* s0 = src + 2 * kfull * k_stride;
      for (int r = 0; r < R; ++r) dst[kfull * R + r] = s0[r];
    }
    return;
  }
  if (len < R) {
    for (int64_t kp = 0; kp < kpairs; ++kp) std::memset(dst + kp * R + len, 0, (R - len) * sizeof(uint32_t));
  }
  if (k_stride == 1) {
    // Row-major A / column-major B: pairs are already adjacent in memory.
    for (int64_t r = 0; r < len; ++r) {
      const uint16_t* s = src + r * line_stride;
      for (int64_t kp = 0; kp < kfull; ++kp) {
        uint32_t v;
        std::memcpy(&v, s + 2 * kp, 4);
        dst[kp * R + r] = v;
      }
      if (kfull < kpairs) dst[kfull * R + r] = s[2 * kfull];
    }
    return;
  }
  for (int64_t kp = 0; kp < kpairs; ++kp) {
    for (int64_t r = 0; r < len; ++r) {
      const uint16_t* s = src + r * line_stride + 2 * kp * k_stride;
      uint32_t lo = s[0], hi = (2 * kp + 1 < klen) ? s[k_stride] : 0;
      dst[kp * R + r] = lo | (hi << 16);
    }
  }
}

}  // namespace kiln::cpu::gemm_detail
