// Cases of the affine quantization ops: quantize, dequantize,
// quantized_matmul, gather_qmm. Packed weights are random uint32 words
// (every word is a valid packing); references unpack them in float64.
#include <cmath>

#include "harness.h"

namespace kiln::harness {
namespace {

constexpr double kWordMax = 4294967295.0;

// Value k of row r of packed words (LSB-first bit stream per row).
double unpack(const std::vector<double>& words, int64_t row_words, int64_t r, int64_t k, int bits) {
  uint64_t v = 0;
  for (int b = 0; b < bits; ++b) {
    int64_t bit = k * bits + b;
    uint64_t word = static_cast<uint64_t>(words[r * row_words + bit / 32]);
    v |= ((word >> (bit % 32)) & 1u) << b;
  }
  return static_cast<double>(v);
}

// The dequantized matrix [rows, cols] in float64.
std::vector<double> dequantized(const array& w, const array& scales, const array& biases, int gs, int bits) {
  auto wv = values(w), s = values(scales), b = values(biases);
  int64_t row_words = w.shape(-1), cols = row_words * 32 / bits, rows = static_cast<int64_t>(w.size()) / row_words;
  std::vector<double> out(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) {
      int64_t g = r * (cols / gs) + k / gs;
      out[r * cols + k] = unpack(wv, row_words, r, k, bits) * s[g] + b[g];
    }
  }
  return out;
}

// x [count, M, K] rows times dense matrices [experts, rows, cols] picked
// per entry: out[i] = x[li[i]] @ (transpose ? d[ri[i]]^T : d[ri[i]]).
std::vector<double> products(const std::vector<double>& x, const std::vector<double>& d, int64_t M, int64_t K,
                             int64_t N, bool transpose, const std::vector<int64_t>& li,
                             const std::vector<int64_t>& ri) {
  std::vector<double> out;
  for (size_t i = 0; i < li.size(); ++i) {
    const double* xm = x.data() + li[i] * M * K;
    const double* dm = d.data() + ri[i] * N * K;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += xm[m * K + k] * (transpose ? dm[n * K + k] : dm[k * N + n]);
        out.push_back(acc);
      }
    }
  }
  return out;
}

// MLX's affine quantization of a row-major [rows, K] in float: words,
// scales, biases.
std::vector<std::vector<double>> quantize_ref(const array& w, int gs, int bits) {
  auto v = values(w);
  float n_bins = static_cast<float>((1 << bits) - 1);
  std::vector<double> words, scales, biases;
  for (size_t g = 0; g < v.size() / gs; ++g) {
    float lo = static_cast<float>(v[g * gs]), hi = lo;
    for (int k = 1; k < gs; ++k) {
      lo = std::min(lo, static_cast<float>(v[g * gs + k]));
      hi = std::max(hi, static_cast<float>(v[g * gs + k]));
    }
    bool low_edge = std::fabs(lo) > std::fabs(hi);
    float scale = std::max((hi - lo) / n_bins, 1e-7f);
    scale = low_edge ? scale : -scale;
    float edge = low_edge ? lo : hi;
    float q0 = std::rint(edge / scale);
    float bias = 0.0f;
    if (q0 != 0.0f) {
      scale = edge / q0;
      bias = edge;
    }
    uint64_t acc = 0;
    int filled = 0;
    for (int k = 0; k < gs; ++k) {
      float q = std::rint((static_cast<float>(v[g * gs + k]) - bias) / scale);
      acc |= static_cast<uint64_t>(std::min(std::max(q, 0.0f), n_bins)) << filled;
      filled += bits;
      if (filled >= 32) {
        words.push_back(static_cast<double>(static_cast<uint32_t>(acc)));
        acc >>= 32;
        filled -= 32;
      }
    }
    scales.push_back(scale);
    biases.push_back(bias);
  }
  return {words, scales, biases};
}

std::vector<int64_t> as_indices(const array& a) {
  std::vector<int64_t> out;
  for (double v : values(a)) out.push_back(static_cast<int64_t>(v));
  return out;
}

}  // namespace

void register_quant() {
  const std::vector<Dtype> floats = {float32, float16, bfloat16, float64};
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    std::string b = std::to_string(bits);
    add({.op = "quantize",
         .primitive = "Quantize",
         .name = "(3,4,64) group 32 bits " + b,
         .fn = [bits](const Arrays& x) { return quantize(x[0], 32, bits); },
         .inputs = {in({3, 4, 64})},
         .dtypes = floats,
         .ref = [bits](const Arrays& x) { return quantize_ref(contiguous(x[0]), 32, bits); }});
    add({.op = "dequantize",
         .primitive = "Dequantize",
         .name = "(5,128) group 64 bits " + b,
         .fn = [bits](const Arrays& x) { return Arrays{dequantize(x[0], x[1], x[2], 64, bits)}; },
         .inputs = {fixed({5, 4 * bits}, uint32, 0, kWordMax), in({5, 2}), in({5, 2})},
         .dtypes = floats,
         .ref = [bits](const Arrays& x) { return std::vector<std::vector<double>>{dequantized(x[0], x[1], x[2], 64, bits)}; },
         .diff = {1, 2}});
  }
  // Every other width through the transposed product (the decode layout):
  // w [N=6, K=64], 64 * bits / 32 words a row.
  for (int bits : {2, 3, 5, 6, 8}) {
    add({.op = "quantized_matmul",
         .primitive = "QuantizedMatmul",
         .name = "x (3,64) transposed group 32 bits " + std::to_string(bits),
         .fn = [bits](const Arrays& x) { return Arrays{quantized_matmul(x[0], x[1], x[2], x[3], true, 32, bits)}; },
         .inputs = {in({3, 64}), fixed({6, 2 * bits}, uint32, 0, kWordMax), in({6, 2}, 0.01, 0.2), in({6, 2})},
         .dtypes = floats,
         .ref = [bits](const Arrays& x) {
           auto d = dequantized(x[1], x[2], x[3], 32, bits);
           return std::vector<std::vector<double>>{products(values(x[0]), d, 3, 64, 6, true, {0}, {0})};
         },
         .diff = {0},
         .rtol_scale = 4.0});
  }
  for (bool transpose : {true, false}) {
    std::string t = transpose ? "transposed" : "plain";
    // transposed: w [N=6, K=64]; plain: w [K=5, N=64].
    int64_t K = transpose ? 64 : 5, N = transpose ? 6 : 64;
    Shape wshape = transpose ? Shape{6, 8} : Shape{5, 8};
    Shape gshape = transpose ? Shape{6, 2} : Shape{5, 2};
    add({.op = "quantized_matmul",
         .primitive = "QuantizedMatmul",
         .name = "x (3," + std::to_string(K) + ") " + t + " group 32 bits 4",
         .fn = [transpose](const Arrays& x) {
           return Arrays{quantized_matmul(x[0], x[1], x[2], x[3], transpose, 32, 4)};
         },
         .inputs = {in({3, static_cast<int>(K)}), fixed(wshape, uint32, 0, kWordMax), in(gshape, 0.01, 0.2),
                    in(gshape)},
         .dtypes = floats,
         .ref = [transpose, K, N](const Arrays& x) {
           auto d = dequantized(x[1], x[2], x[3], 32, 4);
           return std::vector<std::vector<double>>{products(values(x[0]), d, 3, K, N, transpose, {0}, {0})};
         },
         .diff = {0},
         .rtol_scale = 4.0});
    add({.op = "gather_qmm",
         .primitive = "GatherQMM",
         .name = "x (3,2," + std::to_string(K) + ") 4 experts " + t,
         .fn = [transpose](const Arrays& x) {
           return Arrays{gather_qmm(x[0], x[1], x[2], x[3], x[4], x[5], transpose, 32, 4)};
         },
         .inputs = {in({3, 2, static_cast<int>(K)}), fixed({4, wshape[0], wshape[1]}, uint32, 0, kWordMax),
                    in({4, gshape[0], gshape[1]}, 0.01, 0.2), in({4, gshape[0], gshape[1]}), fixed({5}, uint32, 0, 3),
                    fixed({5}, int32, 0, 4)},
         .dtypes = floats,
         .ref = [transpose, K, N](const Arrays& x) {
           auto d = dequantized(x[1], x[2], x[3], 32, 4);
           return std::vector<std::vector<double>>{
               products(values(x[0]), d, 2, K, N, transpose, as_indices(x[4]), as_indices(x[5]))};
         },
         .diff = {0},
         .rtol_scale = 4.0});
  }
}

}  // namespace kiln::harness
