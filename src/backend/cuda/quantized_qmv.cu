// Affine QMV for one row of x (decode: y = x . dequantize(w)^T, M = 1),
// bf16 / fp16 x, 4 / 8 bits, groups of 32 / 64 / 128.
//
// Why a second QMV kernel. The general tensor-core QMV (qmv_mma_kernel in
// quantized.cu) took 20.2 us on the 14336 x 4096 4-bit weight of the
// `qmv_affine4` row, 1.6 TB/s, while a plain streaming read of the same
// bytes takes 10.1 us on the H200. Timing it with its loads removed (the
// same kernel on data already in shared memory) gave 17.5 us: the kernel
// was bound by its own instructions and their latency, not by memory, and
// more bytes in flight (deeper cp.async rings, more warps) changed nothing.
// This kernel removes work per weight:
// - x is staged once per warp into shared memory already in mma B-fragment
//   order (the PRMTs done once, not once per 16 rows), together with each
//   group's sum of x, which replaces the second mma (A = ones) that the
//   general kernel spends on the bias term;
// - a packed pair becomes a fragment register in one LOP3, (w & 0x000F000F)
//   | magic (nvcc otherwise emits an AND and an OR: two immediates);
// - every address is fixed at compile time but for a per-chunk offset: a
//   warp streams 16 rows x U groups at a time through a 2-slot cp.async
//   ring (16-byte copies; scales and biases ride in the same slots), rows
//   padded so the fragment loads are free of bank conflicts.
// A CTA owns 16 rows; its warps split K, each a contiguous run of groups,
// and are summed in shared memory at the end. The SASS main loop is ~79
// instructions per 16 rows x 64 values (the general kernel's: 127).
// Measured on the H200 (.qmvlab lab, back-to-back launches over weight sets
// larger than the L2; bf16 x, groups of 64; us):
//   shape (N x K)    bits  general  this   streaming read of the same bytes
//   14336 x 4096      4     20.2    15.3   10.1
//   4096 x 14336      4     39.2    14.2   10.1
//   4096 x 4096       4     12.7     7.2    4.8
//   14336 x 4096      8     29.5    23.2   16.1
//   4096 x 14336      8     33.9    23.2   16.1
// For M > 1 the x staging costs more than it saves (M = 4: 26 us against
// the general kernel's 20.4), so only M = 1 comes here. Shapes whose group
// count is not a multiple of warps x U go to the general kernel.
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/quantized_qmv.cuh"

namespace kiln::cuda {
namespace {

// Geometry of one ring slot: 16 rows x U groups of packed words, each row
// padded so that lane (gid, tq) reading TW words of row gid hits distinct
// banks (row stride = 4 TW mod 32 words for TW <= 4, 4 mod 8 for TW = 8),
// then U scales and U biases per row.
template <int BITS, int GS, int U>
struct Slot {
  static constexpr int WPG = GS * BITS / 32, TW = WPG / 4, CW = U * WPG;
  static constexpr int PAD_TO = TW == 1 ? 4 : TW == 2 ? 8 : TW == 4 ? 16 : 4;
  static constexpr int RS = CW + ((PAD_TO - CW % 32) % 32 + 32) % 32;
  static constexpr int WORDS = 16 * RS;              // packed weights
  static constexpr int SIZE = WORDS + 16 * U;        // + scales and biases (16 x U halves each)
  static constexpr int PPR = CW / 4;                 // 16-byte copies per row
  static constexpr int PW = 16 * PPR / 32;           // of them per lane
  static constexpr int FB = BITS == 4 ? 4 : 2;       // x fragment words per (group, k slice, lane)
  static_assert(PW >= 1 && (16 * PPR) % 32 == 0 && U >= 2, "chunk shape");
};

template <int BITS, int GS, int U>
constexpr int warp_smem_words(int gper) {
  using S = Slot<BITS, GS, U>;
  return 2 * S::SIZE + gper * S::TW * 4 * S::FB + gper * 8;
}

template <typename T, int BITS, int GS, int WARPS, int U, int MINB>
__global__ void __launch_bounds__(WARPS * 32, MINB)
    qmv_stream_kernel(const T* __restrict__ x, const uint32_t* __restrict__ w, const T* __restrict__ scales,
                      const T* __restrict__ biases, T* __restrict__ y, int N, int K) {
  using H = MmaHalf<T>;
  using S = Slot<BITS, GS, U>;
  constexpr int WPG = S::WPG, TW = S::TW, RS = S::RS, FB = S::FB;
  constexpr bool kNibbles8 = BITS == 8 && H::bf;  // bf16 8-bit: lo and hi nibbles, two mmas
  constexpr int VPW = 32 / BITS;
  constexpr float kOff = kNibbles8 ? 17.f * 128.f : H::magic;
  extern __shared__ __align__(16) uint32_t smem[];
  __shared__ float red[WARPS][16];
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
  const int gid = lane >> 2, tq = lane & 3;
  const int G = K / GS, words = K * BITS / 32;
  const int row0 = blockIdx.x * 16;
  const int gper = G / WARPS, g0 = wi * gper, nch = gper / U;
  uint32_t* ring = smem + wi * warp_smem_words<BITS, GS, U>(gper);
  uint32_t* xs = ring + 2 * S::SIZE;
  float* xsum = reinterpret_cast<float*>(xs + gper * TW * 4 * FB);

  // Copy sources (chunk 0) and slot offsets; rows past N read row N - 1.
  int wsrc[S::PW], wdst[S::PW];
#pragma unroll
  for (int i = 0; i < S::PW; ++i) {
    const int p = lane + 32 * i, r = p / S::PPR, q = p % S::PPR;
    wsrc[i] = min(row0 + r, N - 1) * words + g0 * WPG + q * 4;
    wdst[i] = r * RS + q * 4;
  }
  // Lanes 0..15 copy the scales of rows 0..15, lanes 16..31 the biases.
  const int sr = lane & 15;
  const T* sb_src = (lane < 16 ? scales : biases) + min(row0 + sr, N - 1) * G + g0;
  const int sb_dst = S::WORDS + (lane >> 4) * (8 * U) + sr * (U / 2);
  auto issue = [&](int c, uint32_t* slot) {
#pragma unroll
    for (int i = 0; i < S::PW; ++i) cp_async16(slot + wdst[i], w + wsrc[i] + c * S::CW);
    constexpr int B = U * 2 < 16 ? U * 2 : 16;
#pragma unroll
    for (int o = 0; o < U * 2; o += B) cp_async_ca<B>(slot + sb_dst + o / 4, sb_src + c * U + o / 2);
  };
  if (nch > 0) issue(0, ring);
  cp_async_commit();

  // x of this warp's groups, item (g, j, tq) = the B fragment of lane tq for
  // k slice j of group g; the 4 TW items of a group sum to xsum[g].
  {
    constexpr int IPG = 4 * TW;
    const int items = gper * IPG;
    for (int base = 0; base < items; base += 32) {
      const int it = base + lane;
      const bool ok = it < items;
      const int i = ok ? it : 0;
      const int tqi = i & 3, j = (i >> 2) % TW, g = (i >> 2) / TW;
      const T* src = x + (g0 + g) * GS + tqi * (GS / 4) + j * VPW;
      uint32_t* dst = xs + i * FB;
      float part = 0.f;
      if constexpr (BITS == 4) {
        const uint4 v = ok ? __ldg(reinterpret_cast<const uint4*>(src)) : make_uint4(0, 0, 0, 0);
        const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
        for (int k = 0; k < 8; ++k) part += static_cast<float>(e[k]);
        // The pairs (q0, q4) (q1, q5) (q2, q6) (q3, q7) of a word.
        if (ok)
          *reinterpret_cast<uint4*>(dst) = make_uint4(__byte_perm(v.x, v.z, 0x5410), __byte_perm(v.x, v.z, 0x7632),
                                                      __byte_perm(v.y, v.w, 0x5410), __byte_perm(v.y, v.w, 0x7632));
      } else {
        const uint2 v = ok ? __ldg(reinterpret_cast<const uint2*>(src)) : make_uint2(0, 0);
        const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
        for (int k = 0; k < 4; ++k) part += static_cast<float>(e[k]);
        if (ok) {
          if constexpr (kNibbles8)  // (b0, b2) and (b1, b3) of a word, nibble by nibble
            *reinterpret_cast<uint2*>(dst) = make_uint2(__byte_perm(v.x, v.y, 0x5410), __byte_perm(v.x, v.y, 0x7632));
          else
            *reinterpret_cast<uint2*>(dst) = v;
        }
      }
#pragma unroll
      for (int o = 1; o < IPG; o <<= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
      if (ok && (i & (IPG - 1)) == 0) xsum[g] = part;
    }
  }
  __syncwarp();

  // B column 0 is x; lanes gid > 0 hold the other (zero) columns.
  const bool xrow = gid == 0;
  const uint32_t* xf = xs + tq * FB;
  const uint32_t magic = H::magic2;
  float acc[4] = {};
  for (int c = 0; c < nch; ++c) {
    if (c + 1 < nch) issue(c + 1, ring + ((c + 1) & 1) * S::SIZE);
    cp_async_commit();
    cp_async_wait_one();
    __syncwarp();
    const uint32_t* slot = ring + (c & 1) * S::SIZE;
    const uint16_t* ssl = reinterpret_cast<const uint16_t*>(slot + S::WORDS);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int gl = c * U + u;
      uint32_t wv[2][TW];
#pragma unroll
      for (int h = 0; h < 2; ++h) lds_words<TW>(slot + (gid + 8 * h) * RS + u * WPG + tq * TW, wv[h]);
      float cw[4] = {}, ch[4] = {};
#pragma unroll
      for (int j = 0; j < TW; ++j) {
        const uint32_t* xk = xf + (gl * TW + j) * 4 * FB;
        if constexpr (BITS == 4) {
          uint4 b = make_uint4(0, 0, 0, 0);
          if (xrow) b = *reinterpret_cast<const uint4*>(xk);
          uint32_t p0[4], p1[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            p0[e] = and_or(wv[0][j] >> (4 * e), magic);
            p1[e] = and_or(wv[1][j] >> (4 * e), magic);
          }
          mma16816<T>(cw, p0[0], p1[0], p0[1], p1[1], b.x, b.y);
          mma16816<T>(ch, p0[2], p1[2], p0[3], p1[3], b.z, b.w);
        } else if constexpr (kNibbles8) {
          uint2 b = make_uint2(0, 0);
          if (xrow) b = *reinterpret_cast<const uint2*>(xk);
          uint32_t p0[4], p1[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            p0[e] = and_or(wv[0][j] >> (4 * e), magic);
            p1[e] = and_or(wv[1][j] >> (4 * e), magic);
          }
          mma16816<T>(cw, p0[0], p1[0], p0[2], p1[2], b.x, b.y);
          mma16816<T>(ch, p0[1], p1[1], p0[3], p1[3], b.x, b.y);
        } else {  // fp16, 8 bits: 0x64 | byte is 1024 + byte
          uint2 b = make_uint2(0, 0);
          if (xrow) b = *reinterpret_cast<const uint2*>(xk);
          const uint32_t w0 = wv[0][j], w1 = wv[1][j];
          mma16816<T>(cw, __byte_perm(w0, 0x64646464u, 0x4140), __byte_perm(w1, 0x64646464u, 0x4140),
                      __byte_perm(w0, 0x64646464u, 0x4342), __byte_perm(w1, 0x64646464u, 0x4342), b.x, b.y);
        }
      }
      // C = sum (magic + q) x over the group: y += s C + (b - magic s) X.
      const float X = xsum[gl];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = gid + 8 * h;
        const float s = half_bits_to_float<T>(ssl[r * U + u]), b = half_bits_to_float<T>(ssl[16 * U + r * U + u]);
        const float bo = fmaf(-kOff, s, b);
        float cc;
        if constexpr (kNibbles8) cc = fmaf(16.f, ch[2 * h], cw[2 * h]);
        else if constexpr (BITS == 4) cc = cw[2 * h] + ch[2 * h];
        else cc = cw[2 * h];
        acc[2 * h] = fmaf(s, cc, fmaf(bo, X, acc[2 * h]));  // column 0 (lanes tq = 0) is the result
      }
    }
    __syncwarp();
  }
  store_row_sums<WARPS>(red, acc[0], acc[2], y, row0, N);
}

template <typename T, int BITS, int GS, int WARPS, int U, int MINB>
bool launch_cfg(const T* x, const uint32_t* w, const T* s, const T* b, T* y, int N, int K, cudaStream_t st) {
  const int G = K / GS;
  if (K % GS != 0 || G % (WARPS * U) != 0) return false;
  const size_t smem = static_cast<size_t>(WARPS) * warp_smem_words<BITS, GS, U>(G / WARPS) * 4;
  if (smem > 160 * 1024) return false;
  auto kernel = qmv_stream_kernel<T, BITS, GS, WARPS, U, MINB>;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 160 * 1024);
  if (attr != cudaSuccess) return false;
  kernel<<<static_cast<unsigned>((N + 15) / 16), WARPS * 32, smem, st>>>(x, w, s, b, y, N, K);
  return true;
}

}  // namespace

// Configurations timed in the lab: 4 bits, K <= 8192: 4 warps, 256-byte
// row chunks; longer rows: 8 warps, 128-byte chunks; 8 bits: 8 warps,
// 128-byte chunks (U scales the group count to those bytes).
template <typename T>
bool launch_qmv_stream(const T* x, const uint32_t* w, const T* s, const T* b, T* y, int N, int K, int bits, int gs,
                       cudaStream_t st) {
  if (bits == 4 && K <= 8192) {
    if (gs == 32) return launch_cfg<T, 4, 32, 4, 16, 4>(x, w, s, b, y, N, K, st);
    if (gs == 64) return launch_cfg<T, 4, 64, 4, 8, 4>(x, w, s, b, y, N, K, st);
    if (gs == 128) return launch_cfg<T, 4, 128, 4, 4, 4>(x, w, s, b, y, N, K, st);
  } else if (bits == 4) {
    if (gs == 32) return launch_cfg<T, 4, 32, 8, 8, 2>(x, w, s, b, y, N, K, st);
    if (gs == 64) return launch_cfg<T, 4, 64, 8, 4, 2>(x, w, s, b, y, N, K, st);
    if (gs == 128) return launch_cfg<T, 4, 128, 8, 2, 2>(x, w, s, b, y, N, K, st);
  } else if (bits == 8) {
    if (gs == 32) return launch_cfg<T, 8, 32, 8, 4, 3>(x, w, s, b, y, N, K, st);
    if (gs == 64) return launch_cfg<T, 8, 64, 8, 2, 3>(x, w, s, b, y, N, K, st);
    if (gs == 128) return launch_cfg<T, 8, 128, 8, 2, 3>(x, w, s, b, y, N, K, st);
  }
  return false;
}

template bool launch_qmv_stream<__nv_bfloat16>(const __nv_bfloat16*, const uint32_t*, const __nv_bfloat16*,
                                               const __nv_bfloat16*, __nv_bfloat16*, int, int, int, int, cudaStream_t);
template bool launch_qmv_stream<__half>(const __half*, const uint32_t*, const __half*, const __half*, __half*, int, int,
                                        int, int, cudaStream_t);

}  // namespace kiln::cuda
