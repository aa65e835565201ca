// Affine quantization on the CPU: quantize and dequantize (MLX's rounding,
// bit for bit), and quantized_matmul / gather_qmm. The primitives hand the
// microscaling modes to quantized_fp.cpp.
//
// quantized_matmul picks one of three paths per 2-d product:
// - QMV (transposed w, M <= 8, bits 2 / 4 / 8: decode): the SIMD kernels
//   of quantized_qmv*.cpp (4-bit with bf16 x through vdpbf16ps where the
//   CPU has AVX512-BF16), reading the packed words once, dequantizing in
//   registers (`kiln bench` rows qmv_affine4, qmv_affine8);
// - QMM (M >= 24, either orientation: prefill): w is dequantized one tile
//   of output columns at a time (AVX-512: quantized_dequant_avx512.cpp)
//   into a panel that stays in the last-level cache (bf16 for bf16 x, else
//   float32) and multiplied by Kiln's GEMM kernels (gemm.h: AMX /
//   AVX512-BF16 for bf16), so the full-size dequantized weights never exist
//   in memory (`kiln bench` row qmm_affine4); 9 to 23 rows of x take the
//   QMV kernels in passes of 8 rows;
// - float64 (references, transformation checks): dequantize in double and
//   a plain product;
// - generic (everything else: bits 3, 5, 6 at small M, w not transposed at
//   small M, CPUs without AVX2): unpack a group to float, dot, scale.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "backend/cpu/cast.h"
#include "backend/cpu/copy.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/quantized.h"
#include "backend/cpu/quantized_fp.h"
#include "backend/cpu/threading.h"
#include "core/array_desc.h"
#include "core/primitives.h"

namespace kiln {
namespace {

// Value k of a row's bit stream.
inline uint32_t unpack_at(const uint32_t* row, int64_t k, int bits) {
  int64_t bit = k * bits;
  int64_t word = bit >> 5;
  int off = static_cast<int>(bit & 31);
  uint64_t v = row[word] >> off;
  if (off + bits > 32) v |= static_cast<uint64_t>(row[word + 1]) << (32 - off);
  return static_cast<uint32_t>(v) & ((1u << bits) - 1u);
}

template <int BITS>
void unpack_words(const uint32_t* w, int64_t words, float* out) {
  constexpr int kPer = 32 / BITS;
  constexpr uint32_t kMask = (1u << BITS) - 1u;
  for (int64_t j = 0; j < words; ++j) {
    uint32_t v = w[j];
    for (int e = 0; e < kPer; ++e) out[j * kPer + e] = static_cast<float>((v >> (e * BITS)) & kMask);
  }
}

// Values [k0, k0 + n) of a row as float; k0 and n are multiples of a group
// (whole words) for bits 2, 4, 8.
void unpack_range(const uint32_t* row, int64_t k0, int64_t n, int bits, float* out) {
  switch (bits) {
    case 2: return unpack_words<2>(row + k0 / 16, n / 16, out);
    case 4: return unpack_words<4>(row + k0 / 8, n / 8, out);
    case 8: return unpack_words<8>(row + k0 / 4, n / 4, out);
    default:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(unpack_at(row, k0 + i, bits));
  }
}

// out[i] = out[i] * s + b over [k0, k0 + n) of a row, group by group.
template <typename T>
void scale_groups(float* out, int64_t k0, int64_t n, int group_size, const T* scales, const T* biases) {
  for (int64_t g0 = 0; g0 < n; g0 += group_size) {
    int64_t g = (k0 + g0) / group_size;
    float s = cpu::convert<float>(scales[g]), b = cpu::convert<float>(biases[g]);
    for (int k = 0; k < group_size; ++k) out[g0 + k] = out[g0 + k] * s + b;
  }
}

// Keeps the compiler from fusing a product and the sum that follows into
// an fma: MLX rounds both, and dequantize matches it bit for bit.
inline float no_contract(float v) {
  asm("" : "+x"(v));
  return v;
}

// ---- quantize / dequantize ----

template <typename T>
void quantize_rows(const T* w, int64_t rows, int64_t K, QuantParams p, uint32_t* packed, T* scales, T* biases) {
  const int64_t groups = rows * (K / p.group_size);
  const float n_bins = static_cast<float>((1 << p.bits) - 1);
  const int64_t words_per_group = static_cast<int64_t>(p.group_size) * p.bits / 32;
  cpu::parallel_for(groups, 256, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const T* x = w + g * p.group_size;
      float lo = std::numeric_limits<float>::infinity(), hi = -lo;
      for (int k = 0; k < p.group_size; ++k) {
        float v = cpu::convert<float>(x[k]);
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      // MLX's rule: the edge of larger magnitude maps exactly to a level
      // (0 or 2^bits - 1), and the scale is refit so that it does.
      bool low_edge = std::abs(lo) > std::abs(hi);
      float scale = std::max((hi - lo) / n_bins, 1e-7f);
      scale = low_edge ? scale : -scale;
      float edge = low_edge ? lo : hi;
      float q0 = std::rint(edge / scale);
      float bias = 0.0f;
      if (q0 != 0.0f) {
        scale = edge / q0;
        bias = edge;
      }
      uint32_t* out = packed + g * words_per_group;
      uint64_t acc = 0;
      int filled = 0;
      for (int k = 0; k < p.group_size; ++k) {
        float q = std::rint((cpu::convert<float>(x[k]) - bias) / scale);
        q = std::min(std::max(q, 0.0f), n_bins);
        acc |= static_cast<uint64_t>(q) << filled;
        filled += p.bits;
        if (filled >= 32) {
          *out++ = static_cast<uint32_t>(acc);
          acc >>= 32;
          filled -= 32;
        }
      }
      scales[g] = cpu::convert<T>(scale);
      biases[g] = cpu::convert<T>(bias);
    }
  });
}

// Rows [r0, r1) of w (K values each) into out (row r0 first, row stride
// ldo), rounded as MLX rounds: the product s * q in T, then the sum with
// the bias in T (double: one fma). One thread; AVX-512 where the CPU has it.
template <typename T>
void dequantize_range(const uint32_t* w, const T* scales, const T* biases, int64_t r0, int64_t r1, int64_t K,
                      QuantParams p, T* out, int64_t ldo) {
  const int64_t G = K / p.group_size;
  const int64_t words = K * p.bits / 32;
  if constexpr (!std::is_same_v<T, double>) {
    if (cpu::cpu_target() >= cpu::CpuTarget::avx512 &&
        cpu::dequantize_rows_avx512<T>(w + r0 * words, scales + r0 * G, biases + r0 * G, r1 - r0, K, p.bits,
                                       p.group_size, out, ldo))
      return;
  }
  std::vector<float> q(p.group_size);
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t gi = 0; gi < G; ++gi) {
      const int64_t g = r * G + gi;
      unpack_range(w + r * words, gi * p.group_size, p.group_size, p.bits, q.data());
      T* o = out + (r - r0) * ldo + gi * p.group_size;
      if constexpr (std::is_same_v<T, double>) {
        // One rounding (an fma), the same on the GPU whatever the compiler contracts.
        for (int k = 0; k < p.group_size; ++k) o[k] = std::fma(static_cast<double>(q[k]), scales[g], biases[g]);
      } else {
        float s = cpu::convert<float>(scales[g]), b = cpu::convert<float>(biases[g]);
        for (int k = 0; k < p.group_size; ++k) {
          // In T, rounded after the product and after the sum (MLX's
          // dequantize is multiply then add in the scales' dtype).
          float prod = cpu::convert<float>(cpu::convert<T>(no_contract(q[k] * s)));
          o[k] = cpu::convert<T>(prod + b);
        }
      }
    }
  }
}

template <typename T>
void dequantize_rows(const uint32_t* w, const T* scales, const T* biases, int64_t rows, int64_t K, QuantParams p,
                     T* out) {
  // ~64 K values per piece.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(K, 1));
  cpu::parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    dequantize_range<T>(w, scales, biases, r0, r1, K, p, out + r0 * K, K);
  });
}

// ---- products ----

// A float32 row-major copy of n elements of dtype t.
std::vector<float> to_float(const void* p, Dtype t, int64_t n) {
  std::vector<float> out(n);
  cpu::cast_contiguous(p, t, out.data(), float32, n);
  return out;
}

template <typename T>
void generic_transposed(const cpu::QmvArgs& a) {
  const int64_t G = a.K / a.group_size, words = a.K * a.bits / 32;
  const T* scales = static_cast<const T*>(a.scales);
  const T* biases = static_cast<const T*>(a.biases);
  std::vector<float> xsum(a.M * G);
  for (int64_t m = 0; m < a.M; ++m)
    for (int64_t g = 0; g < G; ++g) {
      float s = 0.0f;
      for (int k = 0; k < a.group_size; ++k) s += a.x[m * a.K + g * a.group_size + k];
      xsum[m * G + g] = s;
    }
  cpu::parallel_for(a.N, 16, [&](int64_t n0, int64_t n1) {
    std::vector<float> q(a.group_size), acc(a.M);
    for (int64_t n = n0; n < n1; ++n) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t g = 0; g < G; ++g) {
        unpack_range(a.w + n * words, g * a.group_size, a.group_size, a.bits, q.data());
        float s = cpu::convert<float>(scales[n * G + g]), b = cpu::convert<float>(biases[n * G + g]);
        for (int64_t m = 0; m < a.M; ++m) {
          const float* x = a.x + m * a.K + g * a.group_size;
          float d = 0.0f;
          for (int k = 0; k < a.group_size; ++k) d += q[k] * x[k];
          acc[m] += s * d + b * xsum[m * G + g];
        }
      }
      for (int64_t m = 0; m < a.M; ++m) a.out[m * a.N + n] = acc[m];
    }
  });
}

// w [K, N] packed along N: each thread owns a block of output columns and
// adds x[m, k] times row k of the block, dequantized.
template <typename T>
void generic_plain(const cpu::QmvArgs& a) {
  const int64_t G = a.N / a.group_size, words = a.N * a.bits / 32;
  const T* scales = static_cast<const T*>(a.scales);
  const T* biases = static_cast<const T*>(a.biases);
  const int64_t block = std::max<int64_t>(a.group_size, 256 / a.group_size * a.group_size);
  const int64_t blocks = (a.N + block - 1) / block;
  cpu::parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> deq(block), acc(a.M * block);
    for (int64_t bi = b0; bi < b1; ++bi) {
      int64_t n0 = bi * block, nb = std::min(block, a.N - n0);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t k = 0; k < a.K; ++k) {
        unpack_range(a.w + k * words, n0, nb, a.bits, deq.data());
        scale_groups(deq.data(), n0, nb, a.group_size, scales + k * G, biases + k * G);
        for (int64_t m = 0; m < a.M; ++m) {
          float xv = a.x[m * a.K + k];
          float* o = acc.data() + m * block;
          for (int64_t j = 0; j < nb; ++j) o[j] += xv * deq[j];
        }
      }
      for (int64_t m = 0; m < a.M; ++m) std::memcpy(a.out + m * a.N + n0, acc.data() + m * block, nb * sizeof(float));
    }
  });
}

// Dequantizes output columns [n0, n0 + nb) of w into a panel of P and
// multiplies by Kiln's GEMM. P is bfloat16 for bfloat16 x: the product
// then runs in the bf16 GEMM (AMX tiles or AVX512-BF16 where the CPU has
// them, fp32 accumulation). Transposed w (the Linear layout, [N, K]): rows
// n of w are dequantized as rows of the panel [nb, K], with the values
// `dequantize` gives (MLX's rounding in the scales' dtype), and the GEMM
// reads the panel as a column-major B. Plain w ([K, N]): a column block of
// every row, scaled in float.
template <typename T, typename P>
void qmm_tiled(const cpu::QmvArgs& a, bool transpose) {
  const int64_t inner = a.K, outer = a.N;
  const int64_t packed_len = transpose ? a.K : a.N;
  const int64_t G = packed_len / a.group_size, words = packed_len * a.bits / 32;
  const T* scales = static_cast<const T*>(a.scales);
  const T* biases = static_cast<const T*>(a.biases);
  const QuantParams qp{a.group_size, a.bits};
  if constexpr (std::is_same_v<P, bfloat16_t>) {
    // On AMX a transposed w's rows are dequantized 32 at a time straight
    // into the GEMM's packed panels: no panel through memory, x packed once
    // (AMX Xeon, 2 threads, 4-bit 14336 x 4096, ms, panels / fused /
    // dequantize-then-matmul: M = 512 37.0 / 32.8-34.8 / 37.5-38.5, M = 24
    // - / 12.6 / 16.6, M = 128 - / 14.8 / 21.0). Up to 32 rows of x the rows
    // go one at a time into an L2 buffer read in place by the tiles (M = 16
    // 11.2 -> 5.0-5.5 ms, M = 24 12.6 -> 5.7-6.0).
    if (transpose) {
      void* c = a.out_bf16 ? static_cast<void*>(a.out_bf16) : static_cast<void*>(a.out);
      const cpu::BColumnsFn columns = [&](int64_t n0, int64_t len, bfloat16_t* rows) {
        dequantize_range<T>(a.w, scales, biases, n0, n0 + len, inner, qp, rows, inner);
      };
      if (cpu::gemm_bf16_columns({a.M, outer, inner, a.x_raw, inner, 1, nullptr, 0, 0, c, a.N, cpu_threads()},
                                 a.out_bf16 ? bfloat16 : float32, columns))
        return;
    }
  }
  // About 4 M values of panel: big enough that the GEMM's packing of x is
  // amortized, small enough to stay in the last-level cache. On AMX, whose
  // products are ~8x faster, x's packing per panel cost as much again: 16 M
  // (AMX Xeon, 512 x 4096 x 14336 bf16, 4-bit, measured on the transposed
  // product before it took the fused path above: 41.9 -> 37.0 ms; the GEMM
  // alone 30.0; dequantize-then-matmul 36.9-37.4; session 38). A plain
  // (not transposed) w still takes these panels.
  const bool amx = std::is_same_v<P, bfloat16_t> && cpu::cpu_target() >= cpu::CpuTarget::amx_bf16;
  const int64_t values = (amx ? int64_t{16} : int64_t{4}) << 20;
  int64_t tile = std::max<int64_t>(128, values / std::max<int64_t>(inner, 1) / 128 * 128);
  tile = std::min(tile, outer);
  // Every element is written before the GEMM reads it: no zero fill. The
  // panel (~8 MB) is kept by the calling thread for its next product: fresh
  // pages cost ~15% of a 512 x 4096 x 14336 product in page faults (AMX Xeon).
  // (A plain pointer below: the lambdas run on other threads, where the
  // name of a thread_local means their own.)
  thread_local std::unique_ptr<P[]> kept;
  thread_local int64_t kept_size = 0;
  if (tile * inner > kept_size) {
    kept.reset(new P[tile * inner]);
    kept_size = tile * inner;
  }
  P* const panel = kept.get();
  for (int64_t n0 = 0; n0 < outer; n0 += tile) {
    int64_t nb = std::min(tile, outer - n0);
    if (transpose) {
      cpu::parallel_for(nb, 4, [&](int64_t r0, int64_t r1) {
        if constexpr (std::is_same_v<T, P>) {
          dequantize_range<T>(a.w, scales, biases, n0 + r0, n0 + r1, inner, qp, panel + r0 * inner, inner);
        } else {
          std::vector<T> row(inner);
          for (int64_t r = r0; r < r1; ++r) {
            dequantize_range<T>(a.w, scales, biases, n0 + r, n0 + r + 1, inner, qp, row.data(), inner);
            P* o = panel + r * inner;
            for (int64_t k = 0; k < inner; ++k) o[k] = cpu::convert<P>(row[k]);
          }
        }
      });
    } else {
      cpu::parallel_for(inner, 16, [&](int64_t k0, int64_t k1) {
        std::vector<float> row(nb);
        for (int64_t k = k0; k < k1; ++k) {
          unpack_range(a.w + k * words, n0, nb, a.bits, row.data());
          scale_groups(row.data(), n0, nb, a.group_size, scales + k * G, biases + k * G);
          P* o = panel + k * nb;
          for (int64_t j = 0; j < nb; ++j) o[j] = cpu::convert<P>(row[j]);
        }
      });
    }
    // B [inner, nb]: the panel read column-major (transposed w) or row-major.
    const int64_t b_row = transpose ? 1 : nb, b_col = transpose ? inner : 1;
    if constexpr (std::is_same_v<P, bfloat16_t>) {
      void* c = a.out_bf16 ? static_cast<void*>(a.out_bf16 + n0) : static_cast<void*>(a.out + n0);
      cpu::gemm_bf16({a.M, nb, inner, a.x_raw, inner, 1, panel, b_row, b_col, c, a.N, cpu_threads()},
                     a.out_bf16 ? bfloat16 : float32);
    } else {
      cpu::gemm_f32({a.M, nb, inner, a.x, inner, 1, panel, b_row, b_col, a.out + n0, a.N, cpu_threads()});
    }
  }
}

// The smallest M that takes the tiled GEMM path. Below it, transposed w
// goes through the QMV kernels, 8 rows of x per pass over w: 4-bit 14336 x
// 4096 on 2 Zen cores, one pass 7.5 ms (bf16 x) / 13 ms (float32 x), the
// GEMM path 10 ms of dequantization plus 16-35 ms of GEMM at M = 16-32.
// bf16 x on AMX takes the fused GEMM of qmm_tiled, which for M <= 32 streams
// w's dequantized rows through AMX tiles (try_amx_small_m), from 7 rows
// (8 for 8-bit w, whose dequantization is slower): AMX Xeon, 2 threads,
// 14336 x 4096, ms, QMV passes / fused; 4-bit M = 5 5.1-5.4 / 5.1-5.6, 6
// 5.5-5.6 / 5.0-5.4, 7 6.5-6.7 / 4.9-5.6, 8 6.9-7.3 / 5.1-5.4, 9 8.3 / 5.7;
// 8-bit M = 7 11.6 / 12.7, 8 13.5 / 12.2; 2-bit M = 7 8.4 / 5.2.
int64_t qmm_min_rows(Dtype t, int bits) {
  if (t == bfloat16 && cpu::cpu_target() >= cpu::CpuTarget::amx_bf16) return bits <= 4 ? 7 : 8;
  return 24;
}

void product_2d(const cpu::QmvArgs& a, bool transpose) {
  if (a.M == 0 || a.N == 0) return;
  if (a.K == 0) {
    std::fill(a.out, a.out + a.M * a.N, 0.0f);
    return;
  }
  if (transpose && a.M > cpu::kQmvMaxRows && a.M < qmm_min_rows(a.t, a.bits)) {
    for (int64_t m0 = 0; m0 < a.M; m0 += cpu::kQmvMaxRows) {
      cpu::QmvArgs part = a;
      part.M = std::min<int64_t>(cpu::kQmvMaxRows, a.M - m0);
      part.x = a.x + m0 * a.K;
      part.x_raw = static_cast<const char*>(a.x_raw) + m0 * a.K * static_cast<int64_t>(size_of(a.t));
      part.out = a.out + m0 * a.N;
      product_2d(part, transpose);
    }
    return;
  }
  auto typed = [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (a.M >= qmm_min_rows(a.t, a.bits)) {
      if constexpr (std::is_same_v<T, bfloat16_t>) return qmm_tiled<T, bfloat16_t>(a, transpose);
      return qmm_tiled<T, float>(a, transpose);
    }
    if (!transpose) return generic_plain<T>(a);
    cpu::CpuTarget level = cpu::cpu_target();
    if (level >= cpu::CpuTarget::avx512_bf16 && cpu::qmv4_avx512_bf16(a)) return;
    if (level >= cpu::CpuTarget::avx512 && cpu::qmv_avx512(a)) return;
    if (level >= cpu::CpuTarget::avx2 && cpu::qmv_avx2(a)) return;
    generic_transposed<T>(a);
  };
  switch (a.t) {
    case float32: return typed(cpu::TypeTag<float>{});
    case float16: return typed(cpu::TypeTag<float16_t>{});
    case bfloat16: return typed(cpu::TypeTag<bfloat16_t>{});
    default: throw Error(std::string("[quantized_matmul] unsupported dtype ") + dtype_name(a.t));
  }
}

// float64: w dequantized in double, then a plain product (float64 is for
// references and the transformation checks, not speed).
void product_double(const double* x, int64_t M, int64_t N, int64_t K, const uint32_t* w, const double* s,
                    const double* b, QuantParams p, bool transpose, double* out) {
  int64_t rows = transpose ? N : K, cols = transpose ? K : N;
  std::vector<double> deq(rows * cols);
  dequantize_rows<double>(w, s, b, rows, cols, p, deq.data());
  cpu::dense_product_double(x, deq.data(), M, N, K, transpose, out);
}

// Runs product_2d with x converted to float and the result cast to out.
void run_product(const char* x, Dtype t, int64_t M, int64_t N, int64_t K, const uint32_t* w, const char* s,
                 const char* b, QuantParams p, bool transpose, char* out) {
  if (t == float64) {
    product_double(reinterpret_cast<const double*>(x), M, N, K, w, reinterpret_cast<const double*>(s),
                   reinterpret_cast<const double*>(b), p, transpose, reinterpret_cast<double*>(out));
    return;
  }
  if (t == bfloat16 && M >= qmm_min_rows(t, p.bits) && N > 0 && K > 0) {
    // The tiled GEMM reads x as bf16 and writes bf16: no float copies of x
    // or of the result (a 512 x 14336 result was 29 MB of fresh pages and a
    // cast pass).
    cpu::QmvArgs a{nullptr, x, M, N, K, w, s, b, t, p.bits, p.group_size, nullptr};
    a.out_bf16 = reinterpret_cast<bfloat16_t*>(out);
    qmm_tiled<bfloat16_t, bfloat16_t>(a, transpose);
    return;
  }
  std::vector<float> xf = to_float(x, t, M * K), of(M * N);
  product_2d({xf.data(), x, M, N, K, w, s, b, t, p.bits, p.group_size, of.data()}, transpose);
  cpu::cast_contiguous(of.data(), float32, out, t, of.size());
}

}  // namespace

namespace cpu {

void dense_product_double(const double* x, const double* w, int64_t M, int64_t N, int64_t K, bool transpose,
                          double* out) {
  parallel_for(M * N, 64, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      int64_t m = i / N, n = i % N;
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) acc += x[m * K + k] * (transpose ? w[n * K + k] : w[k * N + n]);
      out[i] = acc;
    }
  });
}
Operand inner_contiguous(const array& a, int inner) {
  const auto& d = *a.desc();
  cpu::Operand o{detail::data_ptr(a), d.strides, {}};
  int nd = a.ndim();
  int64_t expect = 1;
  bool ok = true;
  for (int i = nd - 1; i >= std::max(0, nd - inner); --i) {
    if (a.shape(i) != 1 && d.strides[i] != expect) ok = false;
    expect *= a.shape(i);
  }
  if (ok) return o;
  o.strides = row_major_strides(a.shape());
  o.store.resize(a.nbytes());
  cpu::copy_strided(detail::data_ptr(a), a.dtype(), a.shape(), d.strides, o.store.data(), a.dtype(), o.strides);
  o.ptr = o.store.data();
  return o;
}
int64_t batch_offset(int64_t b, const Shape& shape, int nbatch, const Strides& strides) {
  int64_t off = 0;
  for (int d = nbatch - 1; d >= 0; --d) {
    off += (b % shape[d]) * strides[d];
    b /= shape[d];
  }
  return off;
}
}  // namespace cpu

void Quantize::eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  for (auto& o : outputs) detail::allocate(o, name());
  if (!p_.affine()) return cpu::fp_quantize(inputs, p_, outputs);
  cpu::Operand w = cpu::inner_contiguous(inputs[0], inputs[0].ndim());
  int64_t K = inputs[0].shape(-1), rows = K ? static_cast<int64_t>(inputs[0].size()) / K : 0;
  if (rows == 0 || K == 0) return;
  auto* packed = reinterpret_cast<uint32_t*>(detail::data_ptr(outputs[0]));
  cpu::dispatch_all(inputs[0].dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T> || cpu::is_half_v<T>) {
      quantize_rows<T>(reinterpret_cast<const T*>(w.ptr), rows, K, p_, packed,
                       reinterpret_cast<T*>(detail::data_ptr(outputs[1])),
                       reinterpret_cast<T*>(detail::data_ptr(outputs[2])));
      return;
    }
    throw Error(std::string("[quantize] unsupported dtype ") + dtype_name(inputs[0].dtype()));
  });
}

void Dequantize::eval_cpu(const std::vector<array>& inputs, array& out) {
  detail::allocate(out, name());
  if (out.size() == 0) return;
  if (!p_.affine()) return cpu::fp_dequantize(inputs, p_, out);
  int nd = out.ndim();
  cpu::Operand w = cpu::inner_contiguous(inputs[0], nd), s = cpu::inner_contiguous(inputs[1], nd), b = cpu::inner_contiguous(inputs[2], nd);
  int64_t K = out.shape(-1), rows = static_cast<int64_t>(out.size()) / K;
  cpu::dispatch_all(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (cpu::is_half_v<T> || std::is_floating_point_v<T>) {
      dequantize_rows<T>(reinterpret_cast<const uint32_t*>(w.ptr), reinterpret_cast<const T*>(s.ptr),
                         reinterpret_cast<const T*>(b.ptr), rows, K, p_, reinterpret_cast<T*>(detail::data_ptr(out)));
    } else {
      throw Error(std::string("[dequantize] unsupported dtype ") + dtype_name(out.dtype()));
    }
  });
}

void QuantizedMatmul::eval_cpu(const std::vector<array>& inputs, array& out) {
  detail::allocate(out, name());
  if (out.size() == 0) return;
  if (!p_.affine()) return cpu::fp_quantized_matmul(inputs, p_, transpose_, out);
  const array& x = inputs[0];
  const array& w = inputs[1];
  Dtype t = out.dtype();
  size_t item = size_of(t);
  int64_t K = x.shape(-1), N = out.shape(-1);
  char* o = detail::data_ptr(out);
  if (w.ndim() == 2) {
    // Every row of x (all leading axes) against one matrix.
    cpu::Operand xs = cpu::inner_contiguous(x, x.ndim());
    cpu::Operand ws = cpu::inner_contiguous(w, 2), ss = cpu::inner_contiguous(inputs[2], 2), bs = cpu::inner_contiguous(inputs[3], 2);
    run_product(xs.ptr, t, static_cast<int64_t>(x.size()) / K, N, K, reinterpret_cast<const uint32_t*>(ws.ptr),
                ss.ptr, bs.ptr, p_, transpose_, o);
    return;
  }
  // Batched: x, w, scales, biases share the (broadcast) batch shape.
  int nb = out.ndim() - 2;
  int64_t M = x.shape(-2);
  int64_t batches = static_cast<int64_t>(out.size()) / (M * N);
  cpu::Operand xs = cpu::inner_contiguous(x, 2), ws = cpu::inner_contiguous(w, 2), ss = cpu::inner_contiguous(inputs[2], 2),
          bs = cpu::inner_contiguous(inputs[3], 2);
  for (int64_t bi = 0; bi < batches; ++bi) {
    const char* xp = xs.ptr + cpu::batch_offset(bi, out.shape(), nb, xs.strides) * item;
    auto* wp = reinterpret_cast<const uint32_t*>(ws.ptr) + cpu::batch_offset(bi, out.shape(), nb, ws.strides);
    const char* sp = ss.ptr + cpu::batch_offset(bi, out.shape(), nb, ss.strides) * item;
    const char* bp = bs.ptr + cpu::batch_offset(bi, out.shape(), nb, bs.strides) * item;
    run_product(xp, t, M, N, K, wp, sp, bp, p_, transpose_, o + bi * M * N * item);
  }
}

void GatherQMM::eval_cpu(const std::vector<array>& inputs, array& out) {
  detail::allocate(out, name());
  if (out.size() == 0) return;
  if (!p_.affine()) return cpu::fp_gather_qmm(inputs, p_, transpose_, out);
  const array& x = inputs[0];
  const array& w = inputs[1];
  Dtype t = out.dtype();
  size_t item = size_of(t);
  int64_t M = x.shape(-2), K = x.shape(-1), N = out.shape(-1);
  int64_t x_count = static_cast<int64_t>(x.size()) / std::max<int64_t>(M * K, 1);
  int64_t w_mat = static_cast<int64_t>(w.shape(-2)) * w.shape(-1);
  int64_t w_count = static_cast<int64_t>(w.size()) / std::max<int64_t>(w_mat, 1);
  int64_t g_mat = static_cast<int64_t>(inputs[2].shape(-2)) * inputs[2].shape(-1);
  cpu::Operand xs = cpu::inner_contiguous(x, x.ndim()), ws = cpu::inner_contiguous(w, w.ndim()),
          ss = cpu::inner_contiguous(inputs[2], w.ndim()), bs = cpu::inner_contiguous(inputs[3], w.ndim()),
          ls = cpu::inner_contiguous(inputs[4], inputs[4].ndim()), rs = cpu::inner_contiguous(inputs[5], inputs[5].ndim());
  auto* lhs = reinterpret_cast<const uint32_t*>(ls.ptr);
  auto* rhs = reinterpret_cast<const uint32_t*>(rs.ptr);
  int64_t n = static_cast<int64_t>(inputs[4].size());
  char* o = detail::data_ptr(out);
  for (int64_t i = 0; i < n; ++i) {
    if (lhs[i] >= x_count || rhs[i] >= w_count) {
      throw Error("[gather_qmm] index out of range: lhs " + std::to_string(lhs[i]) + " of " + std::to_string(x_count) +
                  " x matrices, rhs " + std::to_string(rhs[i]) + " of " + std::to_string(w_count) + " w matrices");
    }
    run_product(xs.ptr + lhs[i] * M * K * item, t, M, N, K,
                reinterpret_cast<const uint32_t*>(ws.ptr) + rhs[i] * w_mat, ss.ptr + rhs[i] * g_mat * item,
                bs.ptr + rhs[i] * g_mat * item, p_, transpose_, o + i * M * N * item);
  }
}

}  // namespace kiln
