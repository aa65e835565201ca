// Affine quantization on the GPU (packing: core/primitives_quant.h); the
// microscaling modes are quantized_fp.cu.
//
// - quantize: a thread per group, the CPU's arithmetic step for step
//   (IEEE division and rint), so both backends give the same words, scales
//   and biases (checked by tests/cuda/test_cuda_quant.cpp).
// - dequantize: a thread per packed word for 2 / 4 / 8 bits (16-byte
//   stores), a thread per value for 3 / 5 / 6; product and sum rounded
//   separately (MLX's multiply then add in the scales' dtype).
// - QMV, bf16 / fp16 x, bits 4 / 8, groups of 32 / 64 / 128 (transposed w,
//   M <= 8: decode; `kiln bench` rows qmv_affine4 / qmv_affine8):
//   qmv_mma_kernel, on the tensor cores (mma.sync m16n8k16, fp32
//   accumulation). A = 16 rows of w straight from the packed words: one
//   LOP3 makes two values (magic | q is the half-precision number magic + q,
//   magic = 128 in bf16 and 1024 in fp16; fp16 8-bit takes bytes with a
//   PRMT; bf16 has too few mantissa bits for a byte, so 8-bit bf16 is two
//   nibble mmas, lo + 16 hi). B = x, column m = row m of x (M <= 8 columns,
//   unused columns zero), its k order permuted (PRMT) to match the pairs.
//   The mma of a k16 slice stays inside one group, so C per group is
//   sum (magic + q) x, and y += s C + (b - magic s) X with X the group's sum
//   of x, from a second mma with A = ones. Each lane of a quad loads its
//   gs * bits / 128 bytes of a row per group; a CTA owns 16 or 32 rows and
//   its warps split K (reduced in shared memory). About 1 instruction per
//   4-bit value instead of 4, and the time no longer grows with M.
//   Measured on the H200 (.qmvlab in the lead's checkout; N 14336, K 4096,
//   gs 64, rotating sets past the L2, back-to-back launches; copy 4244 GB/s):
//     bits  x     M=1      M=2      M=4      M=8     (old kernel M=1 / M=8)
//     4     bf16  20.3 us  20.3 us  20.4 us  20.6 us (26.1 / 125.2 us)
//     4     fp16  20.2     20.3     20.4     20.6    (25.3 / 125.1)
//     8     bf16  29.5     29.5     29.7     30.2    (31.7 / 133.8)
//     8     fp16  22.0     22.1     22.4     24.6    (31.0 / 134.7)
//   i.e. 1.62 TB/s (0.38 of copy) for 4 bits and 2.1 / 2.8 TB/s for 8 bits:
//   short of the 0.85 target. Its time is its own instructions, not
//   memory: with the loads removed it still took 17.5 of its 20 us, and a
//   cp.async ring with more bytes in flight was no faster. One row of x
//   (decode) therefore goes to quantized_qmv.cu, which does less per
//   weight (15.3 us 4-bit, 23.2 us 8-bit on this shape); this kernel keeps
//   M = 2..8 and the shapes that one does not take.
// - QMV otherwise (float32 x, bits 2, odd alignment): qmv_kernel, a warp
//   owns R rows of w (R = 4 for M <= 2) and each lane streams every 32nd
//   16-byte vector of them, R loads in flight. A value is unpacked with a
//   shift, a mask and the 2^23 trick, and the dot is arranged per word:
//   t = sum_e q_e x_e, acc += s t + b sum_e x_e (about 4 instructions per
//   4-bit value: instruction-bound near 1.3 TB/s, and the cost grows with M).
// - QMM (everything else; `kiln bench` row qmm_affine4): w is dequantized
//   into a scratch buffer of x's dtype, then cuBLASLt multiplies
//   (cuda::gemm_rowmajor in matmul.cpp). Not yet the fused shared-memory +
//   mma kernel: the dequantized copy costs one extra write and read of the
//   weights in the x dtype, which is small next to an M >= 16 GEMM.
// - float64 (for references and the transformation checks): dequantize
//   in double, then cuBLASLt's double GEMM.
// - gather_qmm: a warp per output element (correct, not fast: the MoE
//   prefill path is future work).
#include "backend/cuda/index_read.cuh"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/quantized_fp.h"
#include "backend/cuda/quantized_qmv.cuh"
#include "core/ops_util.h"
#include "core/primitives.h"

namespace kiln {
namespace cuda {

namespace {

__device__ __forceinline__ uint32_t unpack_at(const uint32_t* row, int64_t k, int bits) {
  int64_t bit = k * bits;
  int64_t word = bit >> 5;
  int off = static_cast<int>(bit & 31);
  uint64_t v = row[word] >> off;
  if (off + bits > 32) v |= static_cast<uint64_t>(row[word + 1]) << (32 - off);
  return static_cast<uint32_t>(v) & ((1u << bits) - 1u);
}

template <typename T>
__device__ __forceinline__ float f32(T v) {
  return static_cast<float>(v);
}

template <typename T>
__global__ void quantize_kernel(const T* __restrict__ w, int64_t groups, int gs, int bits, uint32_t* __restrict__ packed,
                                T* __restrict__ scales, T* __restrict__ biases) {
  const float n_bins = static_cast<float>((1 << bits) - 1);
  const int64_t words = static_cast<int64_t>(gs) * bits / 32;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T* x = w + g * gs;
    float lo = INFINITY, hi = -INFINITY;
    for (int k = 0; k < gs; ++k) {
      float v = f32(x[k]);
      lo = fminf(lo, v);
      hi = fmaxf(hi, v);
    }
    bool low_edge = fabsf(lo) > fabsf(hi);
    float scale = fmaxf(__fdiv_rn(__fsub_rn(hi, lo), n_bins), 1e-7f);
    scale = low_edge ? scale : -scale;
    float edge = low_edge ? lo : hi;
    float q0 = rintf(__fdiv_rn(edge, scale));
    float bias = 0.0f;
    if (q0 != 0.0f) {
      scale = __fdiv_rn(edge, q0);
      bias = edge;
    }
    uint32_t* out = packed + g * words;
    uint64_t acc = 0;
    int filled = 0;
    for (int k = 0; k < gs; ++k) {
      float q = rintf(__fdiv_rn(__fsub_rn(f32(x[k]), bias), scale));
      q = fminf(fmaxf(q, 0.0f), n_bins);
      acc |= static_cast<uint64_t>(q) << filled;
      filled += bits;
      if (filled >= 32) {
        *out++ = static_cast<uint32_t>(acc);
        acc >>= 32;
        filled -= 32;
      }
    }
    scales[g] = static_cast<T>(scale);
    biases[g] = static_cast<T>(bias);
  }
}

template <typename T>
__global__ void dequantize_kernel(const uint32_t* __restrict__ w, const T* __restrict__ scales,
                                  const T* __restrict__ biases, int64_t total, int64_t K, int gs, int bits,
                                  T* __restrict__ out) {
  const int64_t words = K * bits / 32, G = K / gs;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r = i / K, k = i % K;
    int64_t g = r * G + k / gs;
    uint32_t q = unpack_at(w + r * words, k, bits);
    if constexpr (std::is_same_v<T, double>) {
      out[i] = __fma_rn(static_cast<double>(q), scales[g], biases[g]);  // as the CPU: one rounding
    } else {
      T prod = static_cast<T>(__fmul_rn(static_cast<float>(q), f32(scales[g])));
      out[i] = static_cast<T>(__fadd_rn(f32(prod), f32(biases[g])));
    }
  }
}

// The same values a packed word at a time, for widths that divide 32 (2, 4,
// 8 bits): word i holds values i * V .. i * V + V - 1 (V = 32 / BITS) of the
// row-major output, all in group (i * V) >> log2(gs), and they go out in
// 16-byte stores. (The value-per-thread kernel above, with its 64-bit
// divisions, dequantized the 4096x14336 4-bit weight of the qmm_affine4 row
// in ~245 us on the H200, three times the GEMM it feeds.)
template <typename T, int BITS>
__global__ void dequantize_words_kernel(const uint32_t* __restrict__ w, const T* __restrict__ scales,
                                        const T* __restrict__ biases, int64_t words, int gs_shift,
                                        T* __restrict__ out) {
  constexpr int V = 32 / BITS;
  constexpr uint32_t kMask = (1u << BITS) - 1u;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t word = __ldg(w + i);
    const int64_t g = (i * V) >> gs_shift;
    const float sc = f32(scales[g]), bi = f32(biases[g]);
    T v[V];
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float q = static_cast<float>((word >> (e * BITS)) & kMask);
      if constexpr (std::is_same_v<T, double>) {
        v[e] = __fma_rn(static_cast<double>(q), scales[g], biases[g]);
      } else {
        T prod = static_cast<T>(__fmul_rn(q, sc));
        v[e] = static_cast<T>(__fadd_rn(f32(prod), bi));
      }
    }
    constexpr int kBytes = V * static_cast<int>(sizeof(T));
    if constexpr (kBytes % 16 == 0) {
#pragma unroll
      for (int c = 0; c < kBytes / 16; ++c) {
        uint4 u;
        memcpy(&u, reinterpret_cast<const char*>(v) + 16 * c, 16);
        reinterpret_cast<uint4*>(out + i * V)[c] = u;
      }
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) out[i * V + e] = v[e];
    }
  }
}

// out [rows, K] = dequantize(w); the word kernel where the width divides 32
// and the group is a power of two (always, for MLX's 32 / 64 / 128).
template <typename T>
void launch_dequantize(const uint32_t* w, const T* scales, const T* biases, int64_t total, int64_t K, int gs,
                       int bits, T* out, cudaStream_t st) {
  const int gs_shift = __builtin_ctz(static_cast<unsigned>(gs));
  const bool words_ok = (bits == 2 || bits == 4 || bits == 8) && (1 << gs_shift) == gs;
  const int64_t words = total / (32 / bits);
  if (words_ok && bits == 2) {
    dequantize_words_kernel<T, 2><<<quant_grid(words, 256), 256, 0, st>>>(w, scales, biases, words, gs_shift, out);
  } else if (words_ok && bits == 4) {
    dequantize_words_kernel<T, 4><<<quant_grid(words, 256), 256, 0, st>>>(w, scales, biases, words, gs_shift, out);
  } else if (words_ok && bits == 8) {
    dequantize_words_kernel<T, 8><<<quant_grid(words, 256), 256, 0, st>>>(w, scales, biases, words, gs_shift, out);
  } else {
    dequantize_kernel<T><<<quant_grid(total, 256), 256, 0, st>>>(w, scales, biases, total, K, gs, bits, out);
  }
}

constexpr int kQmvWarps = 8;

// n consecutive values of x as float, in 16-byte (or 8-byte) loads through
// the read-only cache; p is aligned to min(16, n * sizeof(T)) bytes.
template <typename T, int N>
__device__ __forceinline__ void load_floats(const T* p, float (&out)[N]) {
  constexpr int kBytes = N * static_cast<int>(sizeof(T));
  if constexpr (kBytes % 16 == 0) {
    constexpr int kPer = 16 / sizeof(T);
#pragma unroll
    for (int c = 0; c < kBytes / 16; ++c) {
      uint4 u = __ldg(reinterpret_cast<const uint4*>(p) + c);
      T tmp[kPer];
      memcpy(tmp, &u, 16);
#pragma unroll
      for (int e = 0; e < kPer; ++e) out[c * kPer + e] = f32(tmp[e]);
    }
  } else if constexpr (kBytes == 8) {
    uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
    T tmp[N];
    memcpy(tmp, &u, 8);
#pragma unroll
    for (int e = 0; e < N; ++e) out[e] = f32(tmp[e]);
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) out[e] = f32(p[e]);
  }
}

// Value e of a packed word as float without an int->float conversion
// (a quarter-rate instruction): 2^23 + q has q in its mantissa bits.
template <int BITS>
__device__ __forceinline__ float unpack_float(uint32_t word, int e) {
  constexpr uint32_t kMask = (1u << BITS) - 1u;
  return __uint_as_float(0x4B000000u | ((word >> (e * BITS)) & kMask)) - 8388608.0f;
}

// Needs 16-byte aligned w with words % 4 == 0, and x aligned for
// load_floats (16-byte aligned rows). A warp owns R rows of w; each lane
// takes every 32nd 16-byte vector of them (R loads in flight), and each
// slice of x it loads serves all R rows: per word, t = sum_e q_e x_e and
// acc += s t + b sum_e x_e.
template <typename T, int M, int BITS, int R>
__global__ void __launch_bounds__(kQmvWarps * 32) qmv_kernel(const T* __restrict__ x, const uint32_t* __restrict__ w,
                                                              const T* __restrict__ scales, const T* __restrict__ biases,
                                                              T* __restrict__ y, int64_t N, int64_t K, int log2_gs) {
  constexpr int EPW = 32 / BITS;
  const int lane = threadIdx.x % 32;
  const int64_t words = K * BITS / 32, vecs = words / 4, G = K >> log2_gs;
  for (int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kQmvWarps + threadIdx.x / 32) * R; n0 < N;
       n0 += static_cast<int64_t>(gridDim.x) * kQmvWarps * R) {
    // Rows past N read row n0 (no branch around the loads) and are dropped.
    int64_t rows[R];
#pragma unroll
    for (int r = 0; r < R; ++r) rows[r] = n0 + r < N ? n0 + r : n0;
    float acc[R][M];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int m = 0; m < M; ++m) acc[r][m] = 0.f;
    for (int64_t i = lane; i < vecs; i += 32) {
      uint4 v[R];
#pragma unroll
      for (int r = 0; r < R; ++r) v[r] = __ldcs(reinterpret_cast<const uint4*>(w + rows[r] * words) + i);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t k0 = (i * 4 + j) * EPW;
        const int64_t g = k0 >> log2_gs;  // group sizes are powers of two: no division per word
        float q[R][EPW];
        float s[R], b[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          uint32_t word = j == 0 ? v[r].x : j == 1 ? v[r].y : j == 2 ? v[r].z : v[r].w;
#pragma unroll
          for (int e = 0; e < EPW; ++e) q[r][e] = unpack_float<BITS>(word, e);
          s[r] = f32(scales[rows[r] * G + g]);
          b[r] = f32(biases[rows[r] * G + g]);
        }
#pragma unroll
        for (int m = 0; m < M; ++m) {
          float xv[EPW];
          load_floats<T, EPW>(x + m * K + k0, xv);
          float xsum = 0.f;
#pragma unroll
          for (int e = 0; e < EPW; ++e) xsum += xv[e];
#pragma unroll
          for (int r = 0; r < R; ++r) {
            float t = 0.f;
#pragma unroll
            for (int e = 0; e < EPW; ++e) t = fmaf(q[r][e], xv[e], t);
            acc[r][m] = fmaf(s[r], t, fmaf(b[r], xsum, acc[r][m]));
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int m = 0; m < M; ++m) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[r][m] += __shfl_xor_sync(0xffffffffu, acc[r][m], o);
      }
      if (lane < M && n0 + r < N) {
        float out = acc[r][0];
#pragma unroll
        for (int m = 1; m < M; ++m) out = lane == m ? acc[r][m] : out;
        y[lane * N + n0 + r] = static_cast<T>(out);
      }
    }
  }
}

// ---- QMV on the tensor cores (bf16 / fp16 x, bits 4 / 8; header comment).

// NW consecutive words, evict-first.
template <int NW>
__device__ __forceinline__ void load_words(const uint32_t* p, uint32_t (&v)[NW]) {
  if constexpr (NW == 1) {
    v[0] = __ldcs(p);
  } else if constexpr (NW == 2) {
    uint2 u = __ldcs(reinterpret_cast<const uint2*>(p));
    v[0] = u.x, v[1] = u.y;
  } else {
#pragma unroll
    for (int c = 0; c < NW / 4; ++c) {
      uint4 u = __ldcs(reinterpret_cast<const uint4*>(p) + c);
      v[4 * c] = u.x, v[4 * c + 1] = u.y, v[4 * c + 2] = u.z, v[4 * c + 3] = u.w;
    }
  }
}

// A CTA owns 16 * TILES rows; warp wi takes a contiguous range of groups
// and streams it U groups at a time. Lane (gid, tq) holds rows gid and
// gid + 8 of each tile and the tq-th quarter of every group (TW words).
// Needs 16-byte aligned w and x, K % gs == 0, N * K * BITS / 32 < 2^31.
template <typename T, int BITS, int GS, int TILES, int WARPS, int U, int MINB>
__global__ void __launch_bounds__(WARPS * 32, MINB)
    qmv_mma_kernel(const T* __restrict__ x, const uint32_t* __restrict__ w, const T* __restrict__ scales,
                   const T* __restrict__ biases, T* __restrict__ y, int M, int N, int K) {
  using H = MmaHalf<T>;
  constexpr bool kNibbles8 = BITS == 8 && H::bf;  // 8-bit bf16: lo and hi nibbles, two mmas
  constexpr int WPG = GS * BITS / 32;             // words per row and group
  constexpr int TW = WPG / 4;                     // of them per lane
  constexpr int VPW = 32 / BITS;
  constexpr int SL = (U + 3) / 4;                 // scale|bias words per lane and chunk
  constexpr float kOff = kNibbles8 ? 17.f * 128.f : H::magic;
  __shared__ float red[WARPS][16 * TILES][9];
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
  const int gid = lane >> 2, tq = lane & 3;
  const int G = K / GS, words = K * BITS / 32;
  const int row0 = blockIdx.x * 16 * TILES;
  const uint16_t* sp = reinterpret_cast<const uint16_t*>(scales);
  const uint16_t* bp = reinterpret_cast<const uint16_t*>(biases);
  int woff[TILES][2], soff[TILES][2];  // rows past N read row N - 1 and are dropped
#pragma unroll
  for (int t = 0; t < TILES; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = min(row0 + t * 16 + gid + 8 * h, N - 1);
      woff[t][h] = r * words + tq * TW;
      soff[t][h] = r * G;
    }
  const bool xrow = gid < M;  // B column gid is row gid of x; the others are zero
  const T* xp = x + (xrow ? gid : 0) * K + tq * (GS / 4);
  const int gper = (G + WARPS - 1) / WARPS;
  const int g0 = wi * gper, g1 = min(G, g0 + gper);
  float acc[TILES][4] = {};
  for (int gb = g0; gb < g1; gb += U) {
    uint32_t wv[U][TILES][2][TW];
    uint32_t sb[TILES][2][SL];  // lane tq holds groups gb + tq + 4 i (scale | bias << 16)
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int g = min(gb + u, g1 - 1);
#pragma unroll
      for (int t = 0; t < TILES; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) load_words<TW>(w + woff[t][h] + g * WPG, wv[u][t][h]);
    }
#pragma unroll
    for (int i = 0; i < SL; ++i) {
      const int g = min(gb + tq + 4 * i, g1 - 1);
#pragma unroll
      for (int t = 0; t < TILES; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          sb[t][h][i] = static_cast<uint32_t>(__ldg(sp + soff[t][h] + g)) |
                        (static_cast<uint32_t>(__ldg(bp + soff[t][h] + g)) << 16);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (gb + u >= g1) break;
      const int g = gb + u;
      float cw[TILES][4] = {}, ch[TILES][4] = {}, cx[4] = {};
#pragma unroll
      for (int j = 0; j < TW; ++j) {
        const T* xk = xp + g * GS + j * VPW;
        if constexpr (BITS == 4) {  // pairs (q0, q4) (q1, q5) (q2, q6) (q3, q7) of a word
          uint4 xv = make_uint4(0, 0, 0, 0);
          if (xrow) xv = __ldg(reinterpret_cast<const uint4*>(xk));
          const uint32_t b00 = __byte_perm(xv.x, xv.z, 0x5410), b01 = __byte_perm(xv.x, xv.z, 0x7632);
          const uint32_t b10 = __byte_perm(xv.y, xv.w, 0x5410), b11 = __byte_perm(xv.y, xv.w, 0x7632);
          mma16816<T>(cx, H::one2, H::one2, H::one2, H::one2, b00, b01);
          mma16816<T>(cx, H::one2, H::one2, H::one2, H::one2, b10, b11);
#pragma unroll
          for (int t = 0; t < TILES; ++t) {
            uint32_t p0[4], p1[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              p0[e] = ((wv[u][t][0][j] >> (4 * e)) & 0x000F000Fu) | H::magic2;
              p1[e] = ((wv[u][t][1][j] >> (4 * e)) & 0x000F000Fu) | H::magic2;
            }
            mma16816<T>(cw[t], p0[0], p1[0], p0[1], p1[1], b00, b01);
            mma16816<T>(cw[t], p0[2], p1[2], p0[3], p1[3], b10, b11);
          }
        } else if constexpr (kNibbles8) {  // (lo b0, lo b2) (hi b0, hi b2) (lo b1, lo b3) (hi b1, hi b3)
          uint2 xv = make_uint2(0, 0);
          if (xrow) xv = __ldg(reinterpret_cast<const uint2*>(xk));
          const uint32_t b0 = __byte_perm(xv.x, xv.y, 0x5410), b1 = __byte_perm(xv.x, xv.y, 0x7632);
          mma16816<T>(cx, H::one2, H::one2, H::one2, H::one2, b0, b1);
#pragma unroll
          for (int t = 0; t < TILES; ++t) {
            uint32_t p0[4], p1[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              p0[e] = ((wv[u][t][0][j] >> (4 * e)) & 0x000F000Fu) | H::magic2;
              p1[e] = ((wv[u][t][1][j] >> (4 * e)) & 0x000F000Fu) | H::magic2;
            }
            mma16816<T>(cw[t], p0[0], p1[0], p0[2], p1[2], b0, b1);
            mma16816<T>(ch[t], p0[1], p1[1], p0[3], p1[3], b0, b1);
          }
        } else {  // fp16, 8 bits: 0x64 | byte, bytes in order
          uint2 xv = make_uint2(0, 0);
          if (xrow) xv = __ldg(reinterpret_cast<const uint2*>(xk));
          mma16816<T>(cx, H::one2, H::one2, H::one2, H::one2, xv.x, xv.y);
#pragma unroll
          for (int t = 0; t < TILES; ++t) {
            const uint32_t w0 = wv[u][t][0][j], w1 = wv[u][t][1][j];
            mma16816<T>(cw[t], __byte_perm(w0, 0x64646464u, 0x4140), __byte_perm(w1, 0x64646464u, 0x4140),
                        __byte_perm(w0, 0x64646464u, 0x4342), __byte_perm(w1, 0x64646464u, 0x4342), xv.x, xv.y);
          }
        }
      }
      // C element 2 h + i: row gid + 8 h, column (row of x) 2 tq + i.
#pragma unroll
      for (int t = 0; t < TILES; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t v = __shfl_sync(0xffffffffu, sb[t][h][u / 4], (lane & ~3) | (u & 3));
          const float s = half_bits_to_float<T>(v & 0xffffu), b = half_bits_to_float<T>(v >> 16);
          const float bo = fmaf(-kOff, s, b);
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            float c = cw[t][2 * h + i];
            if constexpr (kNibbles8) c = fmaf(16.f, ch[t][2 * h + i], c);
            acc[t][2 * h + i] = fmaf(s, c, fmaf(bo, cx[i], acc[t][2 * h + i]));
          }
        }
    }
  }
#pragma unroll
  for (int t = 0; t < TILES; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 2; ++i) red[wi][t * 16 + gid + 8 * h][2 * tq + i] = acc[t][2 * h + i];
  __syncthreads();
  for (int o = threadIdx.x; o < 16 * TILES * M; o += WARPS * 32) {
    const int m = o / (16 * TILES), r = o % (16 * TILES);
    float v = 0.f;
#pragma unroll
    for (int k = 0; k < WARPS; ++k) v += red[k][r][m];
    if (row0 + r < N) y[static_cast<int64_t>(m) * N + row0 + r] = static_cast<T>(v);
  }
}

template <typename T, int BITS, int GS, int TILES, int WARPS, int U, int MINB>
void launch_qmv_mma_cfg(const T* x, const uint32_t* w, const T* s, const T* b, T* y, int M, int N, int K,
                        cudaStream_t st) {
  const unsigned grid = static_cast<unsigned>((N + 16 * TILES - 1) / (16 * TILES));
  qmv_mma_kernel<T, BITS, GS, TILES, WARPS, U, MINB><<<grid, WARPS * 32, 0, st>>>(x, w, s, b, y, M, N, K);
}

// The configuration per (bits, group size) is the one checked and timed in
// the lab: 4-bit 32 rows x 4 warps (16 rows x 8 warps is as fast within
// 3%), 8-bit 16 rows x 8 warps; U groups per chunk keep 16-32 words per lane.
template <typename T>
void launch_qmv_mma(const T* x, const uint32_t* w, const T* s, const T* b, T* y, int64_t M, int64_t N, int64_t K,
                    int bits, int gs, cudaStream_t st) {
  const int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);
  if (bits == 4) {
    if (gs == 32) launch_qmv_mma_cfg<T, 4, 32, 2, 8, 4, 2>(x, w, s, b, y, m, n, k, st);
    if (gs == 64) launch_qmv_mma_cfg<T, 4, 64, 2, 4, 4, 4>(x, w, s, b, y, m, n, k, st);
    if (gs == 128) launch_qmv_mma_cfg<T, 4, 128, 2, 8, 2, 2>(x, w, s, b, y, m, n, k, st);
  } else {
    if (gs == 32) launch_qmv_mma_cfg<T, 8, 32, 1, 8, 4, 2>(x, w, s, b, y, m, n, k, st);
    if (gs == 64) launch_qmv_mma_cfg<T, 8, 64, 1, 8, 2, 3>(x, w, s, b, y, m, n, k, st);
    if (gs == 128) launch_qmv_mma_cfg<T, 8, 128, 1, 8, 1, 3>(x, w, s, b, y, m, n, k, st);
  }
}

// Any bits, any alignment: a warp per (row of x, row of w), value by value.
template <typename T>
__global__ void qmv_generic(const T* __restrict__ x, const uint32_t* __restrict__ w, const T* __restrict__ scales,
                            const T* __restrict__ biases, T* __restrict__ y, int64_t M, int64_t N, int64_t K, int gs,
                            int bits) {
  const int lane = threadIdx.x % 32;
  const int64_t words = K * bits / 32, G = K / gs;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; o < M * N; o += warps) {
    int64_t m = o / N, n = o % N;
    float acc = 0.f;
    for (int64_t k = lane; k < K; k += 32) {
      int64_t g = n * G + k / gs;
      float val = fmaf(static_cast<float>(unpack_at(w + n * words, k, bits)), f32(scales[g]), f32(biases[g]));
      acc = fmaf(val, f32(x[m * K + k]), acc);
    }
    for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
    if (lane == 0) y[m * N + n] = static_cast<T>(acc);
  }
}

// out[i] = x[lhs[i]] @ dequantize(w[rhs[i]]): a warp per output element.
template <typename T>
__global__ void gather_qmm_kernel(const T* __restrict__ x, const uint32_t* __restrict__ w, const T* __restrict__ scales,
                                  const T* __restrict__ biases, const uint32_t* __restrict__ lhs,
                                  const uint32_t* __restrict__ rhs, T* __restrict__ y, int64_t count, int64_t x_count,
                                  int64_t w_count, int64_t M, int64_t N, int64_t K, int gs, int bits, bool transpose,
                                  IndexErrorSlot* err) {
  const int lane = threadIdx.x % 32;
  const int64_t packed_len = transpose ? K : N;
  const int64_t words = packed_len * bits / 32, G = packed_len / gs;
  const int64_t w_mat = (transpose ? N : K) * words, g_mat = (transpose ? N : K) * G;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; o < count * M * N;
       o += warps) {
    int64_t i = o / (M * N), m = (o / N) % M, n = o % N;
    const int64_t li = clamp_unsigned_index(lhs[i], x_count, lane == 0 ? err : nullptr);
    const int64_t ri = clamp_unsigned_index(rhs[i], w_count, lane == 0 ? err : nullptr);
    const uint32_t* wm = w + ri * w_mat;
    const T* sm = scales + ri * g_mat;
    const T* bm = biases + ri * g_mat;
    const T* xr = x + (li * M + m) * K;
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    C acc = 0;
    for (int64_t k = lane; k < K; k += 32) {
      int64_t row = transpose ? n : k, col = transpose ? k : n;
      int64_t g = row * G + col / gs;
      C val = static_cast<C>(unpack_at(wm + row * words, col, bits)) * static_cast<C>(sm[g]) + static_cast<C>(bm[g]);
      acc += val * static_cast<C>(xr[k]);
    }
    for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
    if (lane == 0) y[o] = static_cast<T>(acc);
  }
}

template <typename F>
void float_dispatch(Dtype t, const char* op, F&& f) {
  switch (t) {
    case Dtype::float32: return f(Tag<float>{});
    case Dtype::float16: return f(Tag<__half>{});
    case Dtype::bfloat16: return f(Tag<__nv_bfloat16>{});
    case Dtype::float64: return f(Tag<double>{});
    default: throw Error(std::string("[") + op + "] unsupported dtype " + dtype_name(t));
  }
}

// Rows of w per warp: more rows share each load of x, fewer leave room
// for the M rows of x in registers.
template <int M>
constexpr int qmv_rows_per_warp() {
  return M <= 2 ? 4 : M <= 4 ? 2 : 1;
}

template <typename T, int BITS>
void launch_qmv(const T* x, const uint32_t* w, const T* s, const T* b, T* y, int64_t M, int64_t N, int64_t K, int gs,
                cudaStream_t st) {
  auto grid = [N](int rows) {
    return static_cast<unsigned>(std::max<int64_t>(1, (N + kQmvWarps * rows - 1) / (kQmvWarps * rows)));
  };
  switch (M) {
#define KILN_QMV_CASE(m)                                                                        \
  case m:                                                                                       \
    qmv_kernel<T, m, BITS, qmv_rows_per_warp<m>()>                                              \
        <<<grid(qmv_rows_per_warp<m>()), kQmvWarps * 32, 0, st>>>(x, w, s, b, y, N, K,           \
                                                                  __builtin_ctz(static_cast<unsigned>(gs)));  \
    break;
    KILN_QMV_CASE(1) KILN_QMV_CASE(2) KILN_QMV_CASE(3) KILN_QMV_CASE(4)
    KILN_QMV_CASE(5) KILN_QMV_CASE(6) KILN_QMV_CASE(7) KILN_QMV_CASE(8)
#undef KILN_QMV_CASE
  }
}

// One 2-d product on row-major device operands.
template <typename T>
void product_2d(Dtype t, const T* x, const uint32_t* w, const T* s, const T* b, T* y, int64_t M, int64_t N,
                int64_t K, QuantParams p, bool transpose, cudaStream_t st) {
  const int64_t words = (transpose ? K : N) * p.bits / 32;
  // float64 (references, transformation checks) takes the dense path in double.
  bool vec_ok = words % 4 == 0 && aligned16(w) && aligned16(x) && (K * sizeof(T)) % 16 == 0 &&
                !std::is_same_v<T, double>;
  constexpr bool kHalf = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
  if constexpr (kHalf) {
    // Tensor-core QMV: 32-bit offsets into w and scales.
    bool mma_ok = transpose && M <= 8 && vec_ok && (p.bits == 4 || p.bits == 8) &&
                  (p.group_size == 32 || p.group_size == 64 || p.group_size == 128) && K % p.group_size == 0 &&
                  N * words < (int64_t{1} << 31) && M * K < (int64_t{1} << 31);
    // One row of x: the streaming kernel (quantized_qmv.cu) where it takes the shape.
    if (mma_ok && M == 1 && aligned16(s) && aligned16(b) &&
        launch_qmv_stream<T>(x, w, s, b, y, static_cast<int>(N), static_cast<int>(K), p.bits, p.group_size, st)) {
      KILN_CUDA_CHECK_LAUNCH("quantized_matmul");
      return;
    }
    if (mma_ok) {
      launch_qmv_mma<T>(x, w, s, b, y, M, N, K, p.bits, p.group_size, st);
      KILN_CUDA_CHECK_LAUNCH("quantized_matmul");
      return;
    }
  }
  if (!std::is_same_v<T, double> && transpose && M <= 8 && vec_ok && (p.bits == 2 || p.bits == 4 || p.bits == 8)) {
    if (p.bits == 2) launch_qmv<T, 2>(x, w, s, b, y, M, N, K, p.group_size, st);
    if (p.bits == 4) launch_qmv<T, 4>(x, w, s, b, y, M, N, K, p.group_size, st);
    if (p.bits == 8) launch_qmv<T, 8>(x, w, s, b, y, M, N, K, p.group_size, st);
    KILN_CUDA_CHECK_LAUNCH("quantized_matmul");
    return;
  }
  if (!std::is_same_v<T, double> && transpose && M <= 8) {
    qmv_generic<T><<<quant_grid(M * N * 32, 256), 256, 0, st>>>(x, w, s, b, y, M, N, K, p.group_size, p.bits);
    KILN_CUDA_CHECK_LAUNCH("quantized_matmul");
    return;
  }
  // Dequantize w ([N, K] or [K, N]) into x's dtype, then the dense GEMM.
  T* dense = static_cast<T*>(scratch(static_cast<size_t>(N * K) * sizeof(T), "quantized_matmul"));
  int64_t packed_len = transpose ? K : N;
  launch_dequantize<T>(w, s, b, N * K, packed_len, p.group_size, p.bits, dense, st);
  KILN_CUDA_CHECK_LAUNCH("quantized_matmul");
  gemm_rowmajor(t, reinterpret_cast<const char*>(x), reinterpret_cast<const char*>(dense), transpose,
                reinterpret_cast<char*>(y), M, N, K);
}

}  // namespace

unsigned quant_grid(int64_t items, int block) {
  int64_t blocks = (items + block - 1) / block;
  int64_t cap = static_cast<int64_t>(device_sm_count() > 0 ? device_sm_count() : 132) * 32;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(blocks, cap)));
}

// A row-major device copy of a (or a itself when it already is).
const char* row_major(const array& a, const char* op) {
  const char* p = in_ptr(a);
  const auto& d = *a.desc();
  if (detail::is_row_contiguous(d.shape, d.strides)) return p;
  char* tmp = static_cast<char*>(scratch(a.nbytes(), op));
  copy_strided(p, d.dtype, d.shape, d.strides, tmp, d.dtype, row_major_strides(d.shape), op);
  return tmp;
}

}  // namespace cuda

void Quantize::eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  if (!p_.affine()) return cuda::fp_quantize(inputs, p_, outputs);
  for (auto& o : outputs) cuda::allocate(o, "quantize");
  const array& w = inputs[0];
  int64_t groups = static_cast<int64_t>(w.size()) / p_.group_size;
  if (groups == 0) return;
  const char* pw = cuda::row_major(w, "quantize");
  auto* packed = reinterpret_cast<uint32_t*>(cuda::out_ptr(outputs[0]));
  char* ps = cuda::out_ptr(outputs[1]);
  char* pb = cuda::out_ptr(outputs[2]);
  cudaStream_t st = cuda::current_stream();
  cuda::float_dispatch(w.dtype(), "quantize", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::quantize_kernel<T><<<cuda::quant_grid(groups, 128), 128, 0, st>>>(
        reinterpret_cast<const T*>(pw), groups, p_.group_size, p_.bits, packed, reinterpret_cast<T*>(ps),
        reinterpret_cast<T*>(pb));
  });
  KILN_CUDA_CHECK_LAUNCH("quantize");
}

void Dequantize::eval_gpu(const std::vector<array>& inputs, array& out) {
  if (!p_.affine()) return cuda::fp_dequantize(inputs, p_, out);
  cuda::allocate(out, "dequantize");
  if (out.size() == 0) return;
  const char* pw = cuda::row_major(inputs[0], "dequantize");
  const char* ps = cuda::row_major(inputs[1], "dequantize");
  const char* pb = cuda::row_major(inputs[2], "dequantize");
  char* po = cuda::out_ptr(out);
  int64_t total = static_cast<int64_t>(out.size()), K = out.shape(-1);
  cudaStream_t st = cuda::current_stream();
  cuda::float_dispatch(out.dtype(), "dequantize", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::launch_dequantize<T>(reinterpret_cast<const uint32_t*>(pw), reinterpret_cast<const T*>(ps),
                               reinterpret_cast<const T*>(pb), total, K, p_.group_size, p_.bits,
                               reinterpret_cast<T*>(po), st);
  });
  KILN_CUDA_CHECK_LAUNCH("dequantize");
}

void QuantizedMatmul::eval_gpu(const std::vector<array>& inputs, array& out) {
  if (!p_.affine()) return cuda::fp_quantized_matmul(inputs, p_, transpose_, out);
  cuda::allocate(out, "quantized_matmul");
  if (out.size() == 0) return;
  const array& x = inputs[0];
  const array& w = inputs[1];
  int64_t K = x.shape(-1), N = out.shape(-1);
  // Broadcast batch axes are materialized by the row-major copies.
  const char* px = cuda::row_major(x, "quantized_matmul");
  const char* pw = cuda::row_major(w, "quantized_matmul");
  const char* ps = cuda::row_major(inputs[2], "quantized_matmul");
  const char* pb = cuda::row_major(inputs[3], "quantized_matmul");
  char* po = cuda::out_ptr(out);
  cudaStream_t st = cuda::current_stream();
  int64_t M = w.ndim() == 2 ? static_cast<int64_t>(x.size()) / K : x.shape(-2);
  int64_t batches = static_cast<int64_t>(out.size()) / (M * N);
  int64_t w_mat = static_cast<int64_t>(w.shape(-2)) * w.shape(-1);
  int64_t g_mat = static_cast<int64_t>(inputs[2].shape(-2)) * inputs[2].shape(-1);
  cuda::float_dispatch(out.dtype(), "quantized_matmul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t bi = 0; bi < batches; ++bi) {
      int64_t wb = w.ndim() == 2 ? 0 : bi;
      cuda::product_2d<T>(out.dtype(), reinterpret_cast<const T*>(px) + bi * M * K,
                          reinterpret_cast<const uint32_t*>(pw) + wb * w_mat, reinterpret_cast<const T*>(ps) + wb * g_mat,
                          reinterpret_cast<const T*>(pb) + wb * g_mat, reinterpret_cast<T*>(po) + bi * M * N, M, N, K,
                          p_, transpose_, st);
    }
  });
}

void GatherQMM::eval_gpu(const std::vector<array>& inputs, array& out) {
  if (!p_.affine()) return cuda::fp_gather_qmm(inputs, p_, transpose_, out);
  cuda::allocate(out, "gather_qmm");
  if (out.size() == 0) return;
  const array& x = inputs[0];
  const array& w = inputs[1];
  int64_t M = x.shape(-2), K = x.shape(-1), N = out.shape(-1);
  int64_t x_count = static_cast<int64_t>(x.size()) / std::max<int64_t>(M * K, 1);
  int64_t w_count = static_cast<int64_t>(w.size()) / std::max<int64_t>(static_cast<int64_t>(w.shape(-2)) * w.shape(-1), 1);
  const char* px = cuda::row_major(x, "gather_qmm");
  const char* pw = cuda::row_major(w, "gather_qmm");
  const char* ps = cuda::row_major(inputs[2], "gather_qmm");
  const char* pb = cuda::row_major(inputs[3], "gather_qmm");
  const char* pl = cuda::row_major(inputs[4], "gather_qmm");
  const char* pr = cuda::row_major(inputs[5], "gather_qmm");
  char* po = cuda::out_ptr(out);
  int64_t count = static_cast<int64_t>(inputs[4].size());
  cuda::IndexErrorSlot* err = cuda::index_error_slot([x_count, w_count](int64_t v) {
    return "[gather_qmm] index " + std::to_string(v) + " out of range: " + std::to_string(x_count) +
           " x matrices, " + std::to_string(w_count) + " w matrices (found on the GPU)";
  });
  cudaStream_t st = cuda::current_stream();
  cuda::float_dispatch(out.dtype(), "gather_qmm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::gather_qmm_kernel<T><<<cuda::quant_grid(count * M * N * 32, 256), 256, 0, st>>>(
        reinterpret_cast<const T*>(px), reinterpret_cast<const uint32_t*>(pw), reinterpret_cast<const T*>(ps),
        reinterpret_cast<const T*>(pb), reinterpret_cast<const uint32_t*>(pl), reinterpret_cast<const uint32_t*>(pr),
        reinterpret_cast<T*>(po), count, x_count, w_count, M, N, K, p_.group_size, p_.bits, transpose_, err);
  });
  KILN_CUDA_CHECK_LAUNCH("gather_qmm");
}

}  // namespace kiln
