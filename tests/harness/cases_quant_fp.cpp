// Cases of MLX's microscaling modes (mxfp4, mxfp8, nvfp4) for quantize,
// dequantize, quantized_matmul, gather_qmm, and of to_fp8 / from_fp8. The
// references decode from the formats' definitions in float64 and encode
// by searching the code tables (not the kernels' bit tricks); packed words
// and scales compare exactly. quantize's reference follows MLX's steps in
// float, so its cases are float32.
#include <cmath>

#include "harness.h"

namespace kiln::harness {
namespace {

constexpr double kWordMax = 4294967295.0;

struct Mode {
  const char* name;
  int gs, bits;
};
constexpr Mode kModes[] = {{"mxfp4", 32, 4}, {"mxfp8", 32, 8}, {"nvfp4", 16, 4}};

double e4m3(int c) {
  if ((c & 0x7f) == 0x7f) return NAN;
  int e = (c >> 3) & 15, m = c & 7;
  double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (c & 0x80) ? -v : v;
}
double e2m1(int c) {
  static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (c & 8) ? -mag[c & 7] : mag[c & 7];
}
double scale_of(int s, const Mode& m) { return m.gs == 16 ? e4m3(s) : std::ldexp(1.0, s == 0 ? -127 : s - 127); }

// The nearest e4m3 code of v (ties to the even code), saturating at ±448
// (NaN too), by search over the magnitudes.
int e4m3_code(float v) {
  int sign = std::signbit(v) ? 0x80 : 0;
  double a = std::fabs(static_cast<double>(v));
  if (!(a < 448.0)) return 0x7e | sign;
  int best = 0;
  for (int c = 1; c <= 0x7e; ++c) {
    double d = std::fabs(e4m3(c) - a), db = std::fabs(e4m3(best) - a);
    if (d < db || (d == db && (c & 1) == 0)) best = c;
  }
  return best | sign;
}

// Dequantized [rows, cols] in float64 from packed words (AND `mask`) and
// scale bytes.
std::vector<double> dequantized(const array& w, const array& scales, const Mode& m, double factor = 0,
                                uint32_t mask = 0xffffffffu) {
  auto wv = values(w), sv = values(scales);
  int64_t row_words = w.shape(-1), cols = row_words * 32 / m.bits, rows = static_cast<int64_t>(w.size()) / row_words;
  std::vector<double> out(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) {
      uint32_t word = static_cast<uint32_t>(wv[r * row_words + k * m.bits / 32]) & mask;
      int code = (word >> ((k * m.bits) % 32)) & ((1u << m.bits) - 1);
      int s = static_cast<int>(sv[r * (cols / m.gs) + k / m.gs]);
      double v = m.bits == 8 ? e4m3(code) : e2m1(code);
      double scale = factor ? static_cast<float>(static_cast<float>(e4m3(s)) * static_cast<float>(factor)) : scale_of(s, m);
      out[r * cols + k] = factor ? static_cast<float>(static_cast<float>(v) * static_cast<float>(scale)) : v * scale;
    }
  }
  return out;
}

// MLX's quantization of float32 rows in float: words and scale bytes (the
// e8m0 exponent is ceil(log2(max|w| / vmax)), from frexp).
std::vector<std::vector<double>> quantize_ref(const array& w, const Mode& m, float global = 0) {
  auto v = values(w);
  std::vector<double> words, scales;
  float encode = global ? 2688.0f / global : 1.0f;
  uint64_t acc = 0;
  int filled = 0;
  for (size_t g = 0; g < v.size() / m.gs; ++g) {
    float amax = 0;
    for (int k = 0; k < m.gs; ++k) amax = std::max(amax, std::fabs(static_cast<float>(v[g * m.gs + k])));
    float s = amax / (m.bits == 4 ? 6.0f : 448.0f);
    float divisor;
    if (m.gs == 16) {
      int sb = e4m3_code(s * encode);
      scales.push_back(sb);
      divisor = static_cast<float>(e4m3(sb));
    } else {
      int e = 0;
      if (s != 0) {
        int ex;
        e = std::frexp(s, &ex) == 0.5f ? ex - 1 : ex;
      }
      scales.push_back(e + 127);
      divisor = std::ldexp(1.0f, e);
    }
    for (int k = 0; k < m.gs; ++k) {
      float q = static_cast<float>(v[g * m.gs + k]) / divisor;
      int code;
      if (m.bits == 8) {
        code = e4m3_code(q);
      } else {
        if (m.gs == 16) q *= encode;
        code = 0;
        for (int c = 1; c < 16; ++c) {
          if (std::fabs(q - static_cast<float>(e2m1(c))) < std::fabs(q - static_cast<float>(e2m1(code)))) code = c;
        }
      }
      acc |= static_cast<uint64_t>(code) << filled;
      filled += m.bits;
      if (filled == 32) {
        words.push_back(static_cast<double>(static_cast<uint32_t>(acc)));
        acc = 0;
        filled = 0;
      }
    }
  }
  return {words, scales};
}

std::vector<double> products(const std::vector<double>& x, const std::vector<double>& d, int64_t M, int64_t K,
                             int64_t N, bool transpose, const std::vector<int64_t>& li, const std::vector<int64_t>& ri) {
  std::vector<double> out;
  for (size_t i = 0; i < li.size(); ++i) {
    const double* xm = x.data() + li[i] * M * K;
    const double* dm = d.data() + ri[i] * N * K;
    for (int64_t r = 0; r < M; ++r)
      for (int64_t n = 0; n < N; ++n) {
        double a = 0;
        for (int64_t k = 0; k < K; ++k) a += xm[r * K + k] * (transpose ? dm[n * K + k] : dm[k * N + n]);
        out.push_back(a);
      }
  }
  return out;
}

std::vector<int64_t> as_indices(const array& a) {
  std::vector<int64_t> out;
  for (double v : values(a)) out.push_back(static_cast<int64_t>(v));
  return out;
}

// qqmm's rounding (MLX's quantize_dequantize), every step in float32: the
// nearest fp4 magnitude with ties to the even code, by search.
double fp4_even(float v) {
  float a = std::fabs(v);
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    float d = std::fabs(a - static_cast<float>(e2m1(c))), db = std::fabs(a - static_cast<float>(e2m1(best)));
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return std::signbit(v) ? -e2m1(best) : e2m1(best);
}
// Rows of v rounded group by group; nvfp4 with a global scale (encode =
// 2688 / global) leaves out the factor global / 2688, as the kernels do.
std::vector<double> qqmm_round(const std::vector<double>& v, const Mode& m, float encode = 1.0f) {
  std::vector<double> out(v.size());
  for (size_t g = 0; g < v.size() / m.gs; ++g) {
    float amax = 0;
    for (int k = 0; k < m.gs; ++k) amax = std::max(amax, std::fabs(static_cast<float>(v[g * m.gs + k])));
    float s = amax / (m.bits == 4 ? 6.0f : 448.0f), sc = 0;
    if (m.gs == 16) {
      sc = static_cast<float>(e4m3(e4m3_code(s * encode)));
    } else if (s != 0) {
      int ex;
      int e = std::frexp(s, &ex) == 0.5f ? ex - 1 : ex;
      sc = std::ldexp(1.0f, std::max(e, -127));
    }
    for (int k = 0; k < m.gs; ++k) {
      float q = sc == 0 ? 0.0f : static_cast<float>(v[g * m.gs + k]) / sc;
      if (m.gs == 16) q *= encode;
      double val = m.bits == 8 ? e4m3(e4m3_code(q)) : fp4_even(q);
      out[g * m.gs + k] = static_cast<float>(sc * static_cast<float>(val));
    }
  }
  return out;
}

// Scale bytes in a range that keeps every product finite in float16
// (64 terms of |x| < 2 times codes up to 6, or 240 for the fp8 codes the
// product cases keep).
Input scale_bytes(Shape s, const Mode& m) {
  if (m.gs == 16) return fixed(std::move(s), uint8, 0x30, 0x50);
  return m.bits == 8 ? fixed(std::move(s), uint8, 116, 126) : fixed(std::move(s), uint8, 118, 130);
}

// Products would turn the NaN codes of fp8 (0x7f, 0xff) into NaN rows, which
// the finite-difference checks cannot use: the product cases clear bit 3
// of every byte (no NaN code is left).
constexpr uint32_t kNoNan = 0xf7f7f7f7u;
uint32_t product_mask(const Mode& m) { return m.bits == 8 ? kNoNan : 0xffffffffu; }

}  // namespace

void register_quant_fp() {
  for (const Mode& m : kModes) {
    std::string mode = m.name;
    add({.op = "quantize",
         .primitive = "Quantize",
         .name = "(3,4,64) " + mode,
         .fn = [mode](const Arrays& x) { return quantize(x[0], std::nullopt, std::nullopt, mode); },
         .inputs = {in({3, 4, 64}, -3, 3)},
         .dtypes = {float32},
         .ref = [m](const Arrays& x) { return quantize_ref(contiguous(x[0]), m); }});
    int words = 64 * m.bits / 32, groups = 64 / m.gs;
    add({.op = "dequantize",
         .primitive = "Dequantize",
         .name = "(5,64) " + mode,
         // x[2] carries the case's dtype (the output's); adding zeros of its shape
         // keeps the output a function of every input (for vmap).
         .fn = [mode](const Arrays& x) {
           return Arrays{dequantize(x[0], x[1], std::nullopt, std::nullopt, std::nullopt, mode, std::nullopt,
                                    x[2].dtype()) +
                         zeros_like(x[2])};
         },
         .inputs = {fixed({5, words}, uint32, 0, kWordMax), scale_bytes({5, groups}, m), in({1})},
         .ref = [m](const Arrays& x) { return std::vector<std::vector<double>>{dequantized(x[0], x[1], m)}; }});
    for (bool transpose : {true, false}) {
      std::string t = transpose ? "transposed" : "plain";
      // transposed: w [N=6, K=64]; plain: w [K=5, N=64].
      int64_t K = transpose ? 64 : 5, N = transpose ? 6 : 64;
      int rows = transpose ? 6 : 5;
      add({.op = "quantized_matmul",
           .primitive = "QuantizedMatmul",
           .name = "x (3," + std::to_string(K) + ") " + t + " " + mode,
           .fn = [transpose, mode, mask = product_mask(m)](const Arrays& x) {
             array w = bitwise_and(x[1], array(mask));
             return Arrays{quantized_matmul(x[0], w, x[2], std::nullopt, transpose, std::nullopt, std::nullopt, mode)};
           },
           .inputs = {in({3, static_cast<int>(K)}), fixed({rows, words}, uint32, 0, kWordMax),
                      scale_bytes({rows, groups}, m)},
           .ref = [transpose, K, N, m](const Arrays& x) {
             return std::vector<std::vector<double>>{
                 products(values(x[0]), dequantized(x[1], x[2], m, 0, product_mask(m)), 3, K, N, transpose, {0}, {0})};
           },
           .diff = {0},
           .rtol_scale = 4.0});
      add({.op = "gather_qmm",
           .primitive = "GatherQMM",
           .name = "x (3,2," + std::to_string(K) + ") 4 experts " + t + " " + mode,
           .fn = [transpose, mode, mask = product_mask(m)](const Arrays& x) {
             array w = bitwise_and(x[1], array(mask));
             return Arrays{
                 gather_qmm(x[0], w, x[2], std::nullopt, x[3], x[4], transpose, std::nullopt, std::nullopt, mode)};
           },
           .inputs = {in({3, 2, static_cast<int>(K)}), fixed({4, rows, words}, uint32, 0, kWordMax),
                      scale_bytes({4, rows, groups}, m), fixed({5}, uint32, 0, 3), fixed({5}, int32, 0, 4)},
           .ref = [transpose, K, N, m](const Arrays& x) {
             return std::vector<std::vector<double>>{products(values(x[0]), dequantized(x[1], x[2], m, 0, product_mask(m)),
                                                              2, K, N, transpose, as_indices(x[3]), as_indices(x[4]))};
           },
           .diff = {0},
           .rtol_scale = 4.0});
    }
  }
  // nvfp4 with a global scale (a float32 scalar input).
  const Mode nv = kModes[2];
  add({.op = "quantize",
       .primitive = "Quantize",
       .name = "(4,32) nvfp4 global scale",
       .fn = [](const Arrays& x) { return quantize(x[0], std::nullopt, std::nullopt, "nvfp4", array(7.0f)); },
       .inputs = {in({4, 32}, -7, 7)},
       .dtypes = {float32},
       .ref = [nv](const Arrays& x) { return quantize_ref(contiguous(x[0]), nv, 7.0f); }});
  add({.op = "dequantize",
       .primitive = "Dequantize",
       .name = "(5,32) nvfp4 global scale",
       .fn = [](const Arrays& x) {
         return Arrays{dequantize(x[0], x[1], std::nullopt, std::nullopt, std::nullopt, "nvfp4", array(7.0f),
                                  x[2].dtype()) +
                       zeros_like(x[2])};
       },
       .inputs = {fixed({5, 4}, uint32, 0, kWordMax), scale_bytes({5, 2}, nv), in({1})},
       .ref = [nv](const Arrays& x) {
         return std::vector<std::vector<double>>{dequantized(x[0], x[1], nv, 7.0f / 2688.0f)};
       }});
  // qqmm: x (and a float w) rounded on the fly; no finite differences (the
  // rounding is a step function; its rule is tests/test_qqmm.cpp's).
  for (const Mode& m : kModes) {
    std::string mode = m.name;
    int words = 64 * m.bits / 32, groups = 64 / m.gs;
    add({.op = "qqmm",
         .primitive = "QQMatmul",
         .name = "x (3,64) w (6,64) float " + mode,
         .fn =
             [mode](const Arrays& x) {
               return Arrays{qqmm(x[0], x[1], std::nullopt, std::nullopt, std::nullopt, mode)};
             },
         .inputs = {in({3, 64}), in({6, 64})},
         .dtypes = {float32, float16, bfloat16},
         .ref =
             [m](const Arrays& x) {
               return std::vector<std::vector<double>>{
                   products(qqmm_round(values(x[0]), m), qqmm_round(values(x[1]), m), 3, 64, 6, true, {0}, {0})};
             },
         .rtol_scale = 4.0});
    add({.op = "qqmm",
         .primitive = "QQMatmul",
         .name = "x (2,3,64) w quantized (6,64) " + mode,
         .fn =
             [mode, mask = product_mask(m)](const Arrays& x) {
               array w = bitwise_and(x[1], array(mask));
               return Arrays{qqmm(x[0], w, x[2], std::nullopt, std::nullopt, mode)};
             },
         .inputs = {in({2, 3, 64}), fixed({6, words}, uint32, 0, kWordMax), scale_bytes({6, groups}, m)},
         .dtypes = {float32, float16, bfloat16},
         .ref =
             [m](const Arrays& x) {
               return std::vector<std::vector<double>>{products(qqmm_round(values(x[0]), m),
                                                                dequantized(x[1], x[2], m, 0, product_mask(m)), 6, 64,
                                                                6, true, {0}, {0})};
             },
         .rtol_scale = 4.0});
    add({.op = "gather_qqmm",
         .primitive = "QuantizeDequantize",
         .name = "x (3,2,64) 4 experts quantized " + mode,
         .fn =
             [mode, mask = product_mask(m)](const Arrays& x) {
               array w = bitwise_and(x[1], array(mask));
               return Arrays{gather_qqmm(x[0], w, x[2], x[3], x[4], std::nullopt, std::nullopt, mode)};
             },
         .inputs = {in({3, 2, 64}), fixed({4, 6, words}, uint32, 0, kWordMax), scale_bytes({4, 6, groups}, m),
                    fixed({5}, uint32, 0, 3), fixed({5}, int32, 0, 4)},
         .dtypes = {float32, float16, bfloat16},
         .ref =
             [m](const Arrays& x) {
               return std::vector<std::vector<double>>{products(qqmm_round(values(x[0]), m),
                                                                dequantized(x[1], x[2], m, 0, product_mask(m)), 2, 64,
                                                                6, true, as_indices(x[3]), as_indices(x[4]))};
             },
         .rtol_scale = 4.0});
  }
  // nvfp4 with global scales: the product times (7 / 2688) (3 / 2688).
  add({.op = "qqmm",
       .primitive = "QQMatmul",
       .name = "x (3,32) w (5,32) float nvfp4 global scales",
       .fn =
           [](const Arrays& x) {
             return Arrays{
                 qqmm(x[0], x[1], std::nullopt, std::nullopt, std::nullopt, "nvfp4", array(7.0f), array(3.0f))};
           },
       .inputs = {in({3, 32}, -7, 7), in({5, 32}, -3, 3)},
       .dtypes = {float32, float16, bfloat16},
       .ref =
           [nv](const Arrays& x) {
             auto out = products(qqmm_round(values(x[0]), nv, 2688.0f / 7.0f),
                                 qqmm_round(values(x[1]), nv, 2688.0f / 3.0f), 3, 32, 5, true, {0}, {0});
             for (double& v : out) v *= (7.0 / 2688.0) * (3.0 / 2688.0);
             return std::vector<std::vector<double>>{out};
           },
       .rtol_scale = 4.0});
  // MLX's fp8 bridge (composites of ordinary ops).
  add({.op = "to_fp8",
       .primitive = "composite",
       .name = "(6,40) across the range",
       .fn = [](const Arrays& x) { return Arrays{to_fp8(x[0])}; },
       .inputs = {in({6, 40}, -520, 520)},
       .ref = [](const Arrays& x) {
         std::vector<double> out;
         for (double v : values(x[0])) out.push_back(e4m3_code(static_cast<float>(v)));
         return std::vector<std::vector<double>>{out};
       }});
  add({.op = "to_fp8",
       .primitive = "composite",
       .name = "(6,40) small values",
       .fn = [](const Arrays& x) { return Arrays{to_fp8(x[0])}; },
       .inputs = {in({6, 40}, -0.05, 0.05)},
       .ref = [](const Arrays& x) {
         std::vector<double> out;
         for (double v : values(x[0])) out.push_back(e4m3_code(static_cast<float>(v)));
         return std::vector<std::vector<double>>{out};
       }});
  add({.op = "from_fp8",
       .primitive = "composite",
       .name = "(4,64) codes",
       .fn = [](const Arrays& x) { return Arrays{from_fp8(x[0], x[1].dtype()) + zeros_like(x[1])}; },
       .inputs = {fixed({4, 64}, uint8, 0, 256), in({1})},
       .ref = [](const Arrays& x) {
         std::vector<double> out;
         for (double v : values(x[0])) out.push_back(e4m3(static_cast<int>(v)));
         return std::vector<std::vector<double>>{out};
       }});
}

}  // namespace kiln::harness
