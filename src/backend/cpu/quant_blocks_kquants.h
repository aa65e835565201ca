#pragma once
// ggml's reference quantizers of the K formats (super-blocks of 256
// weights), for host and device (included by quant_blocks_math.h). The
// algorithms are ggml's quantize_row_q{2,3,4,5,6}_K_ref: each sub-block's
// scale (and min) comes from a small search that minimizes a weighted
// squared (or absolute) error; the sub-block scales are then quantized to 6
// (or 4) bits under one fp16 super-scale, and the weights re-quantized with
// the scales the decoder will actually see.

namespace kiln::qb {

constexpr float kGroupMaxEps = 1e-15f;

// make_qkx2_quants: asymmetric levels 0..nmax with a min <= 0; tries
// nstep + 1 candidate scales around nmax / (max - min) and keeps the
// weighted least-squares fit with the lowest error. Returns the scale,
// writes -min to the_min.
KILN_QB float make_qkx2_quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float& the_min,
                               uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    int l = clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
    L[i] = static_cast<uint8_t>(l);
    float diff = scale * l + min - x[i];
    diff = use_mad ? fabsf(diff) : diff * diff;
    best_error += w[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
      Laux[i] = static_cast<uint8_t>(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        cur_error += w[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  the_min = -min;
  return scale;
}

// make_qx_quants with rmse_type 1 (weights x^2): symmetric levels
// -nmax..nmax-1, 19 candidate scales; L gets l + nmax. Returns the scale.
KILN_QB float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    float ax = fabsf(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// make_q3_quants with do_rmse: symmetric levels -nmax..nmax-1, refined by
// coordinate descent on the weighted (x^2) least-squares error; L gets
// l + nmax.
KILN_QB float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    float ax = fabsf(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        int new_l = clampi(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return sumlx / suml2;
}

// Packs Q4_K / Q5_K's eight 6-bit scales and mins into 12 bytes.
KILN_QB void pack_scale_min_k4(const float* scales, const float* mins, float max_scale, float max_min, uint8_t* s) {
  float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < 12; ++j) s[j] = 0;
  for (int j = 0; j < 8; ++j) {
    int ls = nearest_int(inv_scale * scales[j]), lm = nearest_int(inv_min * mins[j]);
    ls = ls < 63 ? ls : 63;
    lm = lm < 63 ? lm : 63;
    if (j < 4) {
      s[j] = static_cast<uint8_t>(ls);
      s[j + 4] = static_cast<uint8_t>(lm);
    } else {
      s[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      s[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      s[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
}

// Q4_K (nbits 4) and Q5_K (nbits 5): eight sub-blocks of 32, weights
// rms(x) + |x_i|, 6-bit scales and mins.
template <int kBits>
KILN_QB void quantize_qk_affine(const float* x, uint8_t* y) {
  constexpr int nmax = (1 << kBits) - 1;
  uint8_t L[kQK], Laux[32];
  float weights[32], mins[8], scales[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    float av_x = sqrtf(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(xs[l]);
    scales[j] = kBits == 4 ? make_qkx2_quants(32, nmax, xs, weights, L + 32 * j, mins[j], Laux, -1.f, 0.1f, 20, false)
                           : make_qkx2_quants(32, nmax, xs, weights, L + 32 * j, mins[j], Laux, -0.5f, 0.1f, 15, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  uint8_t* s = y + 4;
  pack_scale_min_k4(scales, mins, max_scale, max_min, s);
  store_half(y, max_scale / 63.f);
  store_half(y + 2, max_min / 63.f);
  float d_all = load_half(y), dmin_all = load_half(y + 2);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    scale_min_k4(s, j, sc, m);
    float d = d_all * sc;
    if (d == 0) continue;
    float dm = dmin_all * m;
    for (int ii = 0; ii < 32; ++ii) L[32 * j + ii] = static_cast<uint8_t>(clampi(nearest_int((x[32 * j + ii] + dm) / d), 0, nmax));
  }
  if (kBits == 4) {
    uint8_t* q = y + 16;
    for (int j = 0; j < kQK; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  } else {
    uint8_t* qh = y + 16;
    uint8_t* ql = y + 48;
    for (int l = 0; l < 32; ++l) qh[l] = 0;
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < kQK; n += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j], l2 = L[n + j + 32];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
    }
  }
}

KILN_QB void quantize_q4_k(const float* x, uint8_t* y) { quantize_qk_affine<4>(x, y); }
KILN_QB void quantize_q5_k(const float* x, uint8_t* y) { quantize_qk_affine<5>(x, y); }

KILN_QB void quantize_q6_k(const float* x, uint8_t* y) {
  int8_t L[kQK];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
    scales[ib] = scale;
    if (fabsf(scale) > max_abs_scale) {
      max_abs_scale = fabsf(scale);
      max_scale = scale;
    }
  }
  if (max_abs_scale < kGroupMaxEps) {
    for (int i = 0; i < 210; ++i) y[i] = 0;
    return;
  }
  float iscale = -128.f / max_scale;
  store_half(y + 208, 1 / iscale);
  for (int ib = 0; ib < 16; ++ib) {
    int v = nearest_int(iscale * scales[ib]);
    y[192 + ib] = static_cast<uint8_t>(static_cast<int8_t>(v < 127 ? v : 127));
  }
  float d_all = load_half(y + 208);
  for (int j = 0; j < 16; ++j) {
    float d = d_all * static_cast<int8_t>(y[192 + j]);
    if (d == 0) continue;
    for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = static_cast<int8_t>(clampi(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
  }
  uint8_t* ql = y;
  uint8_t* qh = y + 128;
  for (int j = 0; j < kQK; j += 128, ql += 64, qh += 32) {
    for (int l = 0; l < 32; ++l) {
      int q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
      ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
      ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
      qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                   ((L[j + l + 96] >> 4) << 6));
    }
  }
}

KILN_QB void quantize_q3_k(const float* x, uint8_t* y) {
  int8_t L[kQK];
  float scales[16];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
    if (fabsf(scales[j]) > amax) {
      amax = fabsf(scales[j]);
      max_scale = scales[j];
    }
  }
  uint8_t* hmask = y;
  uint8_t* qs = y + 32;
  uint8_t* s = y + 96;
  for (int j = 0; j < 12; ++j) s[j] = 0;
  if (max_scale != 0) {
    float iscale = -32.f / max_scale;
    for (int j = 0; j < 16; ++j) {
      int l = clampi(nearest_int(iscale * scales[j]), -32, 31) + 32;
      if (j < 8) {
        s[j] = static_cast<uint8_t>(l & 0xF);
      } else {
        s[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
      }
      l >>= 4;
      s[j % 4 + 8] |= static_cast<uint8_t>(l << (2 * (j / 4)));
    }
    store_half(y + 108, 1 / iscale);
  } else {
    store_half(y + 108, 0.f);
  }
  float d_all = load_half(y + 108);
  for (int j = 0; j < 16; ++j) {
    float d = d_all * scale_q3_k(s, j);
    if (d == 0) continue;
    for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = static_cast<int8_t>(clampi(nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
  }
  for (int l = 0; l < 32; ++l) hmask[l] = 0;
  int m = 0;
  uint8_t hm = 1;
  for (int j = 0; j < kQK; ++j) {
    if (L[j] > 3) {
      hmask[m] |= hm;
      L[j] = static_cast<int8_t>(L[j] - 4);
    }
    if (++m == 32) {
      m = 0;
      hm = static_cast<uint8_t>(hm << 1);
    }
  }
  for (int j = 0; j < kQK; j += 128, qs += 32) {
    for (int l = 0; l < 32; ++l) {
      qs[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
  }
}

KILN_QB void quantize_q2_k(const float* x, uint8_t* y) {
  uint8_t L[kQK], Laux[16];
  float weights[16], mins[16], scales[16];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = fabsf(x[16 * j + l]);
    scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, mins[j], Laux, -0.5f, 0.1f, 15, true);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  uint8_t* s = y;
  if (max_scale > 0) {
    float iscale = 15.f / max_scale;
    for (int j = 0; j < 16; ++j) s[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
    store_half(y + 80, max_scale / 15.f);
  } else {
    for (int j = 0; j < 16; ++j) s[j] = 0;
    store_half(y + 80, 0.f);
  }
  if (max_min > 0) {
    float iscale = 15.f / max_min;
    for (int j = 0; j < 16; ++j) s[j] |= static_cast<uint8_t>(nearest_int(iscale * mins[j]) << 4);
    store_half(y + 82, max_min / 15.f);
  } else {
    store_half(y + 82, 0.f);
  }
  float d_all = load_half(y + 80), dmin_all = load_half(y + 82);
  for (int j = 0; j < 16; ++j) {
    float d = d_all * (s[j] & 0xF);
    if (d == 0) continue;
    float dm = dmin_all * (s[j] >> 4);
    for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = static_cast<uint8_t>(clampi(nearest_int((x[16 * j + ii] + dm) / d), 0, 3));
  }
  uint8_t* qs = y + 16;
  for (int j = 0; j < kQK; j += 128) {
    for (int l = 0; l < 32; ++l) {
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
  }
}

// Encodes one block of `f` from block_layout(f).block floats.
KILN_QB void quantize_block(BlockFormat f, const float* x, uint8_t* y) {
  switch (f) {
    case BlockFormat::q4_0: quantize_q4_0(x, y); return;
    case BlockFormat::q4_1: quantize_q4_1(x, y); return;
    case BlockFormat::q5_0: quantize_q5_0(x, y); return;
    case BlockFormat::q5_1: quantize_q5_1(x, y); return;
    case BlockFormat::q8_0: quantize_q8_0(x, y); return;
    case BlockFormat::q2_k: quantize_q2_k(x, y); return;
    case BlockFormat::q3_k: quantize_q3_k(x, y); return;
    case BlockFormat::q4_k: quantize_q4_k(x, y); return;
    case BlockFormat::q5_k: quantize_q5_k(x, y); return;
    case BlockFormat::q6_k: quantize_q6_k(x, y); return;
  }
}

}  // namespace kiln::qb
