#pragma once
// The (a, b) of each sub-block of the block formats that have SIMD QMV
// decoders (Q8_0, Q4_0, Q4_K, Q6_K), with the fp16 fields converted by F16C
// rather than quant_blocks_math.h's portable qb::sub_params (same values):
// shared by the float kernel (quant_blocks_qmv.cpp) and the bf16 one
// (quant_blocks_qmv_bf16.cpp). Weight = a[j] * q + b[j] with q the signed
// code of qb::quant_value; j counts sub-blocks of 32 weights (16 for Q6_K).
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/quant_blocks_math.h"

namespace kiln::cpu::qparams {

struct Params {
  float a[16], b[16];
};

inline __attribute__((always_inline)) float half_at(const uint8_t* p) { return _cvtsh_ss(qb::load_u16(p)); }

// Q4_0 and Q8_0: one fp16 scale at the start of the block.
inline __attribute__((always_inline)) void one_scale(const uint8_t* blk, Params& p) {
  p.a[0] = half_at(blk);
  p.b[0] = 0.f;
}

inline __attribute__((always_inline)) void q4_k(const uint8_t* blk, Params& p) {
  const float d = half_at(blk), dmin = half_at(blk + 2);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    qb::scale_min_k4(blk + 4, j, sc, m);
    p.a[j] = d * static_cast<float>(sc);
    p.b[j] = -dmin * static_cast<float>(m);
  }
}

inline __attribute__((always_inline)) void q6_k(const uint8_t* blk, Params& p) {
  const float d = half_at(blk + 208);
  for (int j = 0; j < 16; ++j) {
    p.a[j] = d * static_cast<float>(static_cast<int8_t>(blk[192 + j]));
    p.b[j] = 0.f;
  }
}

}  // namespace kiln::cpu::qparams
