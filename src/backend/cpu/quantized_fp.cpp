// MLX's microscaling modes (mxfp4, mxfp8, nvfp4) on the CPU: quantize,
// dequantize, quantized_matmul, gather_qmm. The encodings and MLX's
// rounding steps are backend/common/fp_quant.h, shared with the GPU; this
// file compiles with -ffp-contract=off so that no product and sum fuse into
// an fma where MLX rounds both.
//
// - quantize: a group per task (MLX's chain of rounded steps, bit for bit);
// - dequantize: one pass over the packed bytes, value * scale rounded once
//   to the output dtype;
// - products: QMV (transposed w, M <= 8, K a multiple of 32: decode) in
//   quantized_fp_qmv*.cpp, reading each packed byte once and decoding in
//   registers (`kiln bench` rows qmv_mxfp4, qmv_mxfp8); everything else
//   (prefill, plain w) dequantizes a tile of output columns into a float
//   panel that stays in cache and multiplies with Kiln's GEMM; float64 (the
//   references and the transformation checks) dequantizes in double.
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "backend/common/fp_quant.h"
#include "backend/cpu/cast.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/quantized.h"
#include "backend/cpu/quantized_fp.h"
#include "backend/cpu/threading.h"
#include "core/array_desc.h"

namespace kiln::cpu {
namespace {

// fp_quant.h's rounding policy: a value of the compute type rounded to T.
template <typename T>
struct RoundTo {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  static constexpr uint8_t kNonFiniteByte = is_half_v<T> ? 0 : 0x80;
  static C round(C v) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      return v;
    } else {
      return convert<float>(convert<T>(v));
    }
  }
};

bool is_nvfp4(QuantParams p) { return p.mode == QuantMode::nvfp4; }

// The float32 global scale of an nvfp4 quantize / dequantize at `pos`.
std::optional<float> global_scale(const std::vector<array>& inputs, size_t pos) {
  if (inputs.size() <= pos) return std::nullopt;
  float g;
  cast_contiguous(detail::data_ptr(inputs[pos]), float32, &g, float32, 1);
  return g;
}

// The code of element k of a packed row (bits 4: nibbles LSB first).
inline uint32_t code_at(const uint8_t* row, int64_t k, int bits) {
  return bits == 8 ? row[k] : (row[k >> 1] >> ((k & 1) * 4)) & 15u;
}
inline float code_value(uint32_t code, int bits) { return bits == 8 ? fpq::from_fp8(code) : fpq::fp4_value(code); }

// The value of each scale byte as the products read it: MLX's kernels
// convert the scale to x's dtype first (for float16 the e8m0 range
// overflows to inf or flushes to 0 there).
template <typename T>
std::vector<float> scale_table(QuantParams p) {
  std::vector<float> lut(256);
  for (int b = 0; b < 256; ++b) lut[b] = RoundTo<T>::round(fpq::scale_value(b, is_nvfp4(p)));
  return lut;
}

// ---- quantize / dequantize ----

template <typename T>
void quantize_rows(const T* w, int64_t rows, int64_t K, QuantParams p, float encode, uint8_t* packed,
                   uint8_t* scales) {
  using C = typename RoundTo<T>::C;
  const int64_t groups = rows * (K / p.group_size);
  const int64_t group_bytes = p.group_size * p.bits / 8;
  parallel_for(groups, 256, [&](int64_t g0, int64_t g1) {
    uint8_t codes[32];
    for (int64_t g = g0; g < g1; ++g) {
      const T* x = w + g * p.group_size;
      auto load = [x](int k) { return convert<C>(x[k]); };
      scales[g] = fpq::quantize_group<C, RoundTo<T>>(load, p.group_size, p.bits, is_nvfp4(p), encode, codes);
      uint8_t* out = packed + g * group_bytes;
      if (p.bits == 8) {
        std::memcpy(out, codes, p.group_size);
      } else {
        for (int i = 0; i < p.group_size / 2; ++i) out[i] = static_cast<uint8_t>(codes[2 * i] | (codes[2 * i + 1] << 4));
      }
    }
  });
}

// `factor` (nvfp4 with a global scale): global_scale / 2688, applied in
// float32 as MLX does.
template <typename T>
void dequantize_rows(const uint8_t* w, const uint8_t* scales, int64_t rows, int64_t K, QuantParams p,
                     std::optional<float> factor, T* out) {
  using C = typename RoundTo<T>::C;
  const int64_t G = K / p.group_size, row_bytes = K * p.bits / 8;
  parallel_for(rows * G, 256, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      int64_t r = g / G, gi = g % G;
      const uint8_t* row = w + r * row_bytes;
      T* o = out + g * p.group_size;
      const uint32_t sb = scales[g];
      if (factor) {
        const float s = fpq::from_fp8(sb) * *factor;
        for (int k = 0; k < p.group_size; ++k) {
          o[k] = convert<T>(code_value(code_at(row, gi * p.group_size + k, p.bits), p.bits) * s);
        }
        continue;
      }
      const C s = RoundTo<T>::round(fpq::scale_value(sb, is_nvfp4(p)));
      for (int k = 0; k < p.group_size; ++k) {
        o[k] = convert<T>(static_cast<C>(code_value(code_at(row, gi * p.group_size + k, p.bits), p.bits)) * s);
      }
    }
  });
}

// ---- products ----

// Values [k0, k0 + n) of a packed row in float, scaled (lut: scale_table).
void decode_range(const uint8_t* row, const uint8_t* srow, int64_t k0, int64_t n, QuantParams p, const float* lut,
                  float* out) {
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = k0 + i;
    out[i] = code_value(code_at(row, k, p.bits), p.bits) * lut[srow[k / p.group_size]];
  }
}

// Dequantizes output columns [n0, n0 + nb) of w into a float panel [K, nb]
// and multiplies with Kiln's GEMM (as the affine QMM of quantized.cpp).
void qmm_tiled(const FpQmvArgs& a, QuantParams p, bool transpose) {
  const int64_t inner = a.K, outer = a.N;
  const int64_t packed_len = transpose ? a.K : a.N;
  const int64_t G = packed_len / p.group_size, row_bytes = packed_len * p.bits / 8;
  int64_t tile = std::max<int64_t>(128, (int64_t{4} << 20) / std::max<int64_t>(inner, 1) / 128 * 128);
  tile = std::min(tile, outer);
  std::unique_ptr<float[]> panel(new float[tile * inner]);
  for (int64_t n0 = 0; n0 < outer; n0 += tile) {
    int64_t nb = std::min(tile, outer - n0);
    if (transpose) {
      // Rows of w become columns of the panel, through 16 x 256 blocks.
      constexpr int64_t kRows = 16, kCols = 256;
      const int64_t kblocks = (inner + kCols - 1) / kCols, rblocks = (nb + kRows - 1) / kRows;
      parallel_for(kblocks * rblocks, 4, [&](int64_t b0, int64_t b1) {
        std::vector<float> tmp(kRows * kCols);
        for (int64_t bi = b0; bi < b1; ++bi) {
          int64_t r0 = (bi % rblocks) * kRows, k0 = (bi / rblocks) * kCols;
          int64_t rn = std::min(kRows, nb - r0), kn = std::min(kCols, inner - k0);
          for (int64_t r = 0; r < rn; ++r) {
            int64_t n = n0 + r0 + r;
            decode_range(a.w + n * row_bytes, a.scales + n * G, k0, kn, p, a.scale_lut, tmp.data() + r * kCols);
          }
          for (int64_t k = 0; k < kn; ++k) {
            float* o = panel.get() + (k0 + k) * nb + r0;
            for (int64_t r = 0; r < rn; ++r) o[r] = tmp[r * kCols + k];
          }
        }
      });
    } else {
      parallel_for(inner, 16, [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k) {
          decode_range(a.w + k * row_bytes, a.scales + k * G, n0, nb, p, a.scale_lut, panel.get() + k * nb);
        }
      });
    }
    gemm_f32({a.M, nb, inner, a.x, inner, 1, panel.get(), nb, 1, a.out + n0, a.N, cpu_threads()});
  }
}

// float64: w dequantized in double, then a plain product.
void product_double(const double* x, int64_t M, int64_t N, int64_t K, const uint8_t* w, const uint8_t* s,
                    QuantParams p, bool transpose, double* out) {
  int64_t rows = transpose ? N : K, cols = transpose ? K : N;
  std::vector<double> deq(rows * cols);
  dequantize_rows<double>(w, s, rows, cols, p, std::nullopt, deq.data());
  dense_product_double(x, deq.data(), M, N, K, transpose, out);
}

// One 2-d product: x [M, K] of dtype t (row-major) into out [M, N] of t.
void run_product(const char* x, Dtype t, int64_t M, int64_t N, int64_t K, const uint8_t* w, const uint8_t* s,
                 QuantParams p, bool transpose, char* out) {
  if (M == 0 || N == 0) return;
  if (t == float64) {
    product_double(reinterpret_cast<const double*>(x), M, N, K, w, s, p, transpose, reinterpret_cast<double*>(out));
    return;
  }
  std::vector<float> xf(M * K), of(M * N, 0.0f);
  cast_contiguous(x, t, xf.data(), float32, xf.size());
  std::vector<float> lut = t == float16 ? scale_table<float16_t>(p) : t == bfloat16 ? scale_table<bfloat16_t>(p)
                                                                                    : scale_table<float>(p);
  FpQmvArgs a{xf.data(), M, N, K, w, s, lut.data(), p.bits, p.group_size, of.data()};
  bool done = K == 0;
  if (!done && transpose && M <= kQmvMaxRows) {
    CpuTarget level = cpu_target();
    done = (level >= CpuTarget::avx512_bf16 && t == bfloat16 && fp_qmv_avx512_bf16(a)) ||
           (level >= CpuTarget::avx512 && fp_qmv_avx512(a)) || (level >= CpuTarget::avx2 && fp_qmv_avx2(a));
  }
  if (!done) qmm_tiled(a, p, transpose);
  cast_contiguous(of.data(), float32, out, t, of.size());
}

template <typename F>
void float_dispatch(Dtype t, const char* op, F&& f) {
  switch (t) {
    case float32: return f(TypeTag<float>{});
    case float16: return f(TypeTag<float16_t>{});
    case bfloat16: return f(TypeTag<bfloat16_t>{});
    case float64: return f(TypeTag<double>{});
    default: throw Error(std::string("[") + op + "] unsupported dtype " + dtype_name(t));
  }
}

// qqmm's rounding of an operand: a group per task, every step in float32
// (fp_quant.h's quantize_dequantize_group), the value rounded once to T.
template <typename T>
void quantize_dequantize_rows(const T* x, int64_t groups, QuantParams p, float encode, T* out) {
  parallel_for(groups, 256, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const T* in = x + g * p.group_size;
      T* o = out + g * p.group_size;
      fpq::quantize_dequantize_group([in](int k) { return convert<float>(in[k]); },
                                     [o](int k, float v) { o[k] = convert<T>(v); }, p.group_size, p.bits, is_nvfp4(p),
                                     encode);
    }
  });
}

}  // namespace

void fp_qmv_row_scalar(const FpQmvArgs& a, int64_t n) {
  QuantParams p{a.group_size, a.bits};
  const int64_t G = a.K / a.group_size, row_bytes = a.K * a.bits / 8;
  std::vector<float> row(a.K);
  decode_range(a.w + n * row_bytes, a.scales + n * G, 0, a.K, p, a.scale_lut, row.data());
  for (int64_t m = 0; m < a.M; ++m) {
    float acc = 0.0f;
    for (int64_t k = 0; k < a.K; ++k) acc += row[k] * a.x[m * a.K + k];
    a.out[m * a.N + n] = acc;
  }
}

void fp_quantize(const std::vector<array>& inputs, QuantParams p, std::vector<array>& outputs) {
  const array& w = inputs[0];
  int64_t K = w.shape(-1), rows = K ? static_cast<int64_t>(w.size()) / K : 0;
  if (rows == 0 || K == 0) return;
  Operand wc = inner_contiguous(w, w.ndim());
  std::optional<float> g = global_scale(inputs, 1);
  // MLX: scale_encode = 448 * 6 / global_scale, in float32.
  float encode = g ? 2688.0f / *g : 1.0f;
  auto* packed = reinterpret_cast<uint8_t*>(detail::data_ptr(outputs[0]));
  auto* scales = reinterpret_cast<uint8_t*>(detail::data_ptr(outputs[1]));
  float_dispatch(w.dtype(), "quantize", [&](auto tag) {
    using T = typename decltype(tag)::type;
    quantize_rows<T>(reinterpret_cast<const T*>(wc.ptr), rows, K, p, encode, packed, scales);
  });
}

void fp_dequantize(const std::vector<array>& inputs, QuantParams p, array& out) {
  int nd = out.ndim();
  Operand w = inner_contiguous(inputs[0], nd), s = inner_contiguous(inputs[1], nd);
  std::optional<float> g = global_scale(inputs, 2);
  std::optional<float> factor;
  if (g) factor = *g / 2688.0f;
  int64_t K = out.shape(-1), rows = static_cast<int64_t>(out.size()) / K;
  float_dispatch(out.dtype(), "dequantize", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dequantize_rows<T>(reinterpret_cast<const uint8_t*>(w.ptr), reinterpret_cast<const uint8_t*>(s.ptr), rows, K, p,
                       factor, reinterpret_cast<T*>(detail::data_ptr(out)));
  });
}

void fp_quantized_matmul(const std::vector<array>& inputs, QuantParams p, bool transpose, array& out) {
  const array& x = inputs[0];
  const array& w = inputs[1];
  Dtype t = out.dtype();
  size_t item = size_of(t);
  int64_t K = x.shape(-1), N = out.shape(-1);
  char* o = detail::data_ptr(out);
  if (w.ndim() == 2) {
    Operand xs = inner_contiguous(x, x.ndim()), ws = inner_contiguous(w, 2), ss = inner_contiguous(inputs[2], 2);
    run_product(xs.ptr, t, static_cast<int64_t>(x.size()) / K, N, K, reinterpret_cast<const uint8_t*>(ws.ptr),
                reinterpret_cast<const uint8_t*>(ss.ptr), p, transpose, o);
    return;
  }
  // Batched: x, w and scales share the (broadcast) batch shape.
  int nb = out.ndim() - 2;
  int64_t M = x.shape(-2);
  int64_t batches = static_cast<int64_t>(out.size()) / (M * N);
  Operand xs = inner_contiguous(x, 2), ws = inner_contiguous(w, 2), ss = inner_contiguous(inputs[2], 2);
  for (int64_t bi = 0; bi < batches; ++bi) {
    const char* xp = xs.ptr + batch_offset(bi, out.shape(), nb, xs.strides) * item;
    auto* wp = reinterpret_cast<const uint8_t*>(ws.ptr) + batch_offset(bi, out.shape(), nb, ws.strides) * 4;
    auto* sp = reinterpret_cast<const uint8_t*>(ss.ptr) + batch_offset(bi, out.shape(), nb, ss.strides);
    run_product(xp, t, M, N, K, wp, sp, p, transpose, o + bi * M * N * item);
  }
}

void fp_gather_qmm(const std::vector<array>& inputs, QuantParams p, bool transpose, array& out) {
  const array& x = inputs[0];
  const array& w = inputs[1];
  Dtype t = out.dtype();
  size_t item = size_of(t);
  int64_t M = x.shape(-2), K = x.shape(-1), N = out.shape(-1);
  int64_t x_count = static_cast<int64_t>(x.size()) / std::max<int64_t>(M * K, 1);
  int64_t w_mat = static_cast<int64_t>(w.shape(-2)) * w.shape(-1);
  int64_t w_count = static_cast<int64_t>(w.size()) / std::max<int64_t>(w_mat, 1);
  int64_t g_mat = static_cast<int64_t>(inputs[2].shape(-2)) * inputs[2].shape(-1);
  Operand xs = inner_contiguous(x, x.ndim()), ws = inner_contiguous(w, w.ndim()),
          ss = inner_contiguous(inputs[2], w.ndim()), ls = inner_contiguous(inputs[3], inputs[3].ndim()),
          rs = inner_contiguous(inputs[4], inputs[4].ndim());
  auto* lhs = reinterpret_cast<const uint32_t*>(ls.ptr);
  auto* rhs = reinterpret_cast<const uint32_t*>(rs.ptr);
  int64_t n = static_cast<int64_t>(inputs[3].size());
  char* o = detail::data_ptr(out);
  for (int64_t i = 0; i < n; ++i) {
    if (lhs[i] >= x_count || rhs[i] >= w_count) {
      throw Error("[gather_qmm] index out of range: lhs " + std::to_string(lhs[i]) + " of " + std::to_string(x_count) +
                  " x matrices, rhs " + std::to_string(rhs[i]) + " of " + std::to_string(w_count) + " w matrices");
    }
    run_product(xs.ptr + lhs[i] * M * K * item, t, M, N, K, reinterpret_cast<const uint8_t*>(ws.ptr) + rhs[i] * w_mat * 4,
                reinterpret_cast<const uint8_t*>(ss.ptr) + rhs[i] * g_mat, p, transpose, o + i * M * N * item);
  }
}

void fp_quantize_dequantize(const std::vector<array>& inputs, QuantParams p, array& out) {
  const array& x = inputs[0];
  const int64_t groups = static_cast<int64_t>(x.size()) / p.group_size;
  if (groups == 0) return;
  Operand xs = inner_contiguous(x, x.ndim());
  std::optional<float> g = global_scale(inputs, 1);
  const float encode = g ? 2688.0f / *g : 1.0f;
  float_dispatch(x.dtype(), "qqmm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    quantize_dequantize_rows(reinterpret_cast<const T*>(xs.ptr), groups, p, encode,
                             reinterpret_cast<T*>(detail::data_ptr(out)));
  });
}

}  // namespace kiln::cpu

namespace kiln {

void QuantizeDequantize::eval_cpu(const std::vector<array>& inputs, array& out) {
  detail::allocate(out, name());
  cpu::fp_quantize_dequantize(inputs, p_, out);
}

}  // namespace kiln
