// Q4_K, Q4_0 and Q8_0 QMV for 1 to 8 rows of x (decode), bf16 / fp16 x:
// the streaming kernel of quantized_qmv.cu on llama.cpp's most used formats
// (Q4_K_M files keep most weights in Q4_K).
//
// Why. The general block kernel (quant_blocks.cu) decodes every weight to
// a float and multiplies on the FMA pipe, about 5 instructions per weight:
// 46 us on the 14336 x 4096 row of `kiln bench` (0.72 TB/s, 0.17 of copy).
// Here the tensor cores do the dot, as for the affine format:
// - a 144-byte super-block is 16-byte aligned, so a warp streams 16 rows x
//   one super-block at a time into shared memory (cp.async, 2 slots; a row
//   stride of 144 bytes = 16 mod 128 already keeps the 8 rows of a
//   fragment load on distinct banks);
// - qs holds 4 chunks of 32 bytes: byte l of chunk c has weight l of
//   sub-block 2c in its low nibble and weight l of sub-block 2c + 1 in its
//   high nibble. A 32-bit word of it gives, with one shift and one LOP3
//   each, the pairs (l, l + 2) and (l + 1, l + 3) of both sub-blocks as
//   magic + q half-precision numbers: one mma per sub-block and 16 weights,
//   with x staged once per warp in the matching order (and each sub-block's
//   sum of x);
// - the 6-bit scales and mins are decoded once per chunk into a table of
//   (a, b - a magic) per row and sub-block (the shared math of
//   quant_blocks_math.h), so y += a C + (b - a magic) X per sub-block,
//   C = sum (magic + q) x.
// Q4_0 and Q8_0 (blocks of 32 weights, 18 and 34 bytes) go the same way,
// 8 blocks (144 / 272 bytes, 16-byte multiples) per row and chunk; a
// block's words sit at 2-byte alignment in half the blocks, read as two
// aligned words and a funnel shift (the parity is known at compile time).
// Q8_0 in bf16 is two nibble mmas, lo + 16 hi, as the affine 8-bit kernel.
// Rows of x: the mma's B operand has 8 columns and x filled only one; x row m
// is column m (M <= 8 rows cost the same mmas as one), staged per row in
// shared memory with its block sums. Before, 2 to 8 rows took the CUDA-core
// kernel of quant_blocks.cu: 116-144 us for 8 x 4096 x 14336 (0.05-0.12 of
// copy), against 17-26 us for one row here.
// The numbers are the CPU's up to fp32 summation order (the dot is not the
// bit-exact decode: tests compare with a tolerance).
#include <algorithm>
#include <type_traits>

#include "backend/cpu/quant_blocks_math.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/quantized_qmv.cuh"

namespace kiln::cuda {
namespace {

// Dynamic shared memory a block may take: Hopper's 227 KB less the static
// reduction arrays (at most 4 KB); several rows of x on long rows need most
// of it.
constexpr int kSmemCap = 220 * 1024;
// x reaches shared memory as it is, by cp.async ahead of the first chunk of
// w (copy_x_raw), and is rearranged there in place: loading it from L2 in
// the staging loop put a chain of dependent L2 round trips (one per pass)
// before the first mma, ~3 of 17.7 us on 1 x 4096 x 14336 Q4_0.
constexpr int kSB = 144;            // bytes per super-block (and row stride in a slot)
constexpr int kSlot = 16 * kSB;     // one chunk: 16 rows x 1 super-block
constexpr int kPieces = kSlot / 16; // 16-byte copies per chunk (144)

// Copies the slice [k0, k0 + len) of rows 0..M-1 of x (row stride K) to
// dst (rows len apart) with cp.async, 16 bytes a copy (8 where x is only
// 8-byte aligned: k0, K and len are multiples of 8 elements).
template <typename T>
__device__ __forceinline__ void copy_x_raw(const T* __restrict__ x, int K, int M, int k0, int len, T* dst, bool x16) {
  const int lane = threadIdx.x & 31, per_row = len / 8;
  for (int i = lane; i < per_row * M; i += 32) {
    const int m = i / per_row, o = (i % per_row) * 8;
    const T* src = x + static_cast<size_t>(m) * K + k0 + o;
    T* d = dst + static_cast<size_t>(m) * len + o;
    if (x16) {
      cp_async16(d, src);
    } else {
      cp_async_ca<8>(d, src);
      cp_async_ca<8>(d + 4, src + 4);
    }
  }
}

// x's slice [k0, k0 + len) into xs as it is (the bytes it takes once
// rearranged), then the first NS - 1 chunks of w (issue(c)); returns with x
// in shared memory and the chunks in flight.
template <int NS, typename T, typename Issue>
__device__ __forceinline__ void start_x_then_w(const T* __restrict__ x, int K, int M, int k0, int len, T* xs, bool x16,
                                               int chunks, Issue&& issue) {
  copy_x_raw(x, K, M, k0, len, xs, x16);
  cp_async_commit();
#pragma unroll
  for (int c = 0; c < NS - 1; ++c) {
    if (c < chunks) issue(c);
    cp_async_commit();
  }
  cp_async_wait<NS - 1>();  // x's group
  __syncwarp();
}

// Lets kernel take kSmemCap bytes of dynamic shared memory; false (the
// error cleared, the caller takes another kernel) on a GPU that has less.
template <typename Kernel>
bool allow_smem_cap(Kernel kernel) {
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemCap) == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

// Words of shared memory per warp for nsb super-blocks per row, MR rows of
// x and NS ring slots.
constexpr int warp_words(int nsb, int MR, int NS) { return NS * kSlot / 4 + 16 * 8 * 2 + MR * (nsb * 32 * 4 + nsb * 8); }

// The 16 x MR tile of y (rows row0.., x rows 0..M-1) from the warps' sums:
// lane (gid, tq) holds acc[h][e] for w row gid + 8 h and x row 2 tq + e
// (the m16n8k16 C fragment; MR == 1 keeps only column 0, in the tq == 0 lanes).
template <int WARPS, int MR, typename T>
__device__ __forceinline__ void store_tile(const float (&acc)[2][2], T* y, int row0, int N, int M) {
  if constexpr (MR == 1) {
    __shared__ float red[WARPS][16];
    store_row_sums<WARPS>(red, acc[0][0], acc[1][0], y, row0, N);
  } else {
    __shared__ float red[WARPS][16][MR];
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, gid = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (2 * tq + e < MR) red[wi][gid + 8 * h][2 * tq + e] = acc[h][e];
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 16 * MR; i += WARPS * 32) {
      const int r = i / MR, m = i % MR;
      if (m >= M || row0 + r >= N) continue;
      float v = 0.f;
#pragma unroll
      for (int k = 0; k < WARPS; ++k) v += red[k][r][m];
      y[static_cast<size_t>(m) * N + row0 + r] = static_cast<T>(v);
    }
  }
}

// MR: x rows the kernel is built for (1, 4 or 8: the B columns of the mma),
// M <= MR of them used.
template <typename T, int WARPS, int MINB, int MR, int NS>
__global__ void __launch_bounds__(WARPS * 32, MINB)
    q4k_stream_kernel(const T* __restrict__ x, const uint8_t* __restrict__ w, T* __restrict__ y, int N, int K, int M,
                      bool x16) {
  using H = MmaHalf<T>;
  extern __shared__ __align__(16) uint32_t smem[];
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
  const int gid = lane >> 2, tq = lane & 3;
  const int nsbr = K / 256, nsb = nsbr / WARPS, sb0 = wi * nsb;
  const size_t row_bytes = static_cast<size_t>(nsbr) * kSB;
  const int row0 = blockIdx.x * 16;
  uint32_t* base = smem + wi * warp_words(nsb, MR, NS);
  uint8_t* ring = reinterpret_cast<uint8_t*>(base);
  float2* par = reinterpret_cast<float2*>(base + NS * kSlot / 4);  // [16 rows][8 sub-blocks]
  uint4* xs = reinterpret_cast<uint4*>(base + NS * kSlot / 4 + 256);                 // [MR][nsb * 32]
  float* xsum = reinterpret_cast<float*>(base + NS * kSlot / 4 + 256 + MR * nsb * 128);  // [MR][nsb * 8]

  constexpr int PL = (kPieces + 31) / 32;  // copies per lane (the last partly)
  const uint8_t* src[PL];
  int dst[PL];
#pragma unroll
  for (int i = 0; i < PL; ++i) {
    const int p = min(lane + 32 * i, kPieces - 1), r = p / 9, q = p % 9;
    src[i] = w + static_cast<size_t>(min(row0 + r, N - 1)) * row_bytes + static_cast<size_t>(sb0) * kSB + q * 16;
    dst[i] = r * kSB + q * 16;
  }
  auto issue = [&](int c) {
    uint8_t* slot = ring + (c % NS) * kSlot;
#pragma unroll
    for (int i = 0; i < PL; ++i)
      if (lane + 32 * i < kPieces) cp_async16(slot + dst[i], src[i] + static_cast<size_t>(c) * kSB);
  };
  start_x_then_w<NS>(x, K, M, sb0 * 256, nsb * 256, reinterpret_cast<T*>(xs), x16, nsb, issue);

  // x: item (j, c, s, tq) = lane tq's fragments for slice s of sub-blocks 2c
  // (lo) and 2c + 1 (hi) of super-block j: weights l .. l + 3, l = 16 s + 4 tq,
  // paired (l, l + 2) and (l + 1, l + 3) as the nibble pairs are. In place:
  // a pass reads one super-block's 512 bytes and writes them back.
  const int items = nsb * M;
  for (int jm = 0; jm < items; ++jm) {
    const int c = lane >> 3, s = (lane >> 2) & 1;
    const T* p = reinterpret_cast<const T*>(xs) + jm * 256 + 64 * c + 16 * s + 4 * tq;
    const uint2 lo = *reinterpret_cast<const uint2*>(p), hi = *reinterpret_cast<const uint2*>(p + 32);
    __syncwarp();
    const T* el = reinterpret_cast<const T*>(&lo);
    const T* eh = reinterpret_cast<const T*>(&hi);
    float sl = 0.f, sh = 0.f;
#pragma unroll
    for (int k = 0; k < 4; ++k) sl += static_cast<float>(el[k]), sh += static_cast<float>(eh[k]);
    xs[jm * 32 + lane] = make_uint4(__byte_perm(lo.x, lo.y, 0x5410), __byte_perm(lo.x, lo.y, 0x7632),
                                    __byte_perm(hi.x, hi.y, 0x5410), __byte_perm(hi.x, hi.y, 0x7632));
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) {
      sl += __shfl_xor_sync(0xffffffffu, sl, o);
      sh += __shfl_xor_sync(0xffffffffu, sh, o);
    }
    if ((lane & 7) == 0) xsum[jm * 8 + 2 * c] = sl, xsum[jm * 8 + 2 * c + 1] = sh;
  }
  __syncwarp();

  // B column gid is x row gid (zero past M); lane tq sums columns 2 tq, 2 tq + 1.
  const bool xrow = gid < M;
  const int xrow_off = min(gid, M - 1) * nsb;
  int xc[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) xc[e] = min(2 * tq + e, M - 1) * nsb;
  const uint32_t magic = H::magic2;
  float acc[2][2] = {};
  for (int j = 0; j < nsb; ++j) {
    if (j + NS - 1 < nsb) issue(j + NS - 1);
    cp_async_commit();
    cp_async_wait<NS - 1>();
    __syncwarp();
    const uint8_t* slot = ring + (j % NS) * kSlot;
    // (a, b - a magic) of every (row, sub-block) of the chunk, 4 per lane.
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int e = lane + 32 * k, r = e >> 3, sub = e & 7;
      // qb::sub_params' Q4_K case with the hardware fp16 conversion (see
      // the Q4_0 kernel: no NaN-payload branch) and aligned 16-bit loads.
      const uint8_t* blk = slot + r * kSB;
      int sc, mn;
      qb::scale_min_k4(blk + 4, sub, sc, mn);
      const float a = __half2float(*reinterpret_cast<const __half*>(blk)) * static_cast<float>(sc);
      const float b = -(__half2float(*reinterpret_cast<const __half*>(blk + 2)) * static_cast<float>(mn));
      par[e] = make_float2(a, fmaf(-H::magic, a, b));
    }
    __syncwarp();
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      float cl[4] = {}, chi[4] = {};
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const int off = 16 + 32 * c + 16 * s + 4 * tq;
        const uint32_t w0 = *reinterpret_cast<const uint32_t*>(slot + gid * kSB + off);
        const uint32_t w1 = *reinterpret_cast<const uint32_t*>(slot + (gid + 8) * kSB + off);
        uint4 bx = make_uint4(0, 0, 0, 0);
        if (xrow) bx = xs[(xrow_off + j) * 32 + c * 8 + s * 4 + tq];
        mma16816<T>(cl, and_or(w0, magic), and_or(w1, magic), and_or(w0 >> 8, magic), and_or(w1 >> 8, magic), bx.x,
                    bx.y);
        mma16816<T>(chi, and_or(w0 >> 4, magic), and_or(w1 >> 4, magic), and_or(w0 >> 12, magic),
                    and_or(w1 >> 12, magic), bx.z, bx.w);
      }
#pragma unroll
      for (int e = 0; e < (MR == 1 ? 1 : 2); ++e) {
        const float xl = xsum[(xc[e] + j) * 8 + 2 * c], xh = xsum[(xc[e] + j) * 8 + 2 * c + 1];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float2 pl = par[(gid + 8 * h) * 8 + 2 * c], ph = par[(gid + 8 * h) * 8 + 2 * c + 1];
          acc[h][e] = fmaf(pl.x, cl[2 * h + e], fmaf(pl.y, xl, fmaf(ph.x, chi[2 * h + e], fmaf(ph.y, xh, acc[h][e]))));
        }
      }
    }
    __syncwarp();
  }
  store_tile<WARPS, MR>(acc, y, row0, N, M);
}

template <typename T, int WARPS, int MINB, int MR, int NS = 2>
bool launch_cfg(const T* x, const uint8_t* w, T* y, int N, int K, int M, cudaStream_t st) {
  const size_t smem = static_cast<size_t>(WARPS) * warp_words(K / 256 / WARPS, MR, NS) * 4;
  if (smem > kSmemCap) return false;
  auto kernel = q4k_stream_kernel<T, WARPS, MINB, MR, NS>;
  static const bool allowed = allow_smem_cap(kernel);  // once per kernel
  if (!allowed) return false;
  kernel<<<static_cast<unsigned>((N + 15) / 16), WARPS * 32, smem, st>>>(x, w, y, N, K, M,
                                                                         reinterpret_cast<uintptr_t>(x) % 16 == 0);
  return true;
}

// ---- Q4_0 / Q8_0: blocks of 32 weights with one fp16 scale d.
template <BlockFormat F>
struct Small {
  static constexpr int BYTES = F == BlockFormat::q4_0 ? 18 : 34;
  static constexpr int U = 8;                        // blocks per row and chunk
  static constexpr int RS = U * BYTES;               // 144 / 272 = 16 mod 128: free of bank conflicts
  static constexpr int SLOT = 16 * RS;
  static constexpr int PIECES = SLOT / 16;
};

template <BlockFormat F>
constexpr int small_warp_words(int nblk, int MR, int NS) { return NS * Small<F>::SLOT / 4 + MR * (nblk * 4 * 4 + nblk); }

// The little-endian word at byte offset off of s (off even; off % 4 fixed by the caller's unrolling).
__device__ __forceinline__ uint32_t lds_at(const uint8_t* s, int off) {
  const uint32_t* p = reinterpret_cast<const uint32_t*>(s + (off & ~3));
  return (off & 3) ? __funnelshift_r(p[0], p[1], 16) : p[0];
}

template <typename T, BlockFormat F, int WARPS, int MINB, int MR, int NS>
__global__ void __launch_bounds__(WARPS * 32, MINB)
    small_stream_kernel(const T* __restrict__ x, const uint8_t* __restrict__ w, T* __restrict__ y, int N, int K,
                        int M, bool x16) {
  using H = MmaHalf<T>;
  using S = Small<F>;
  constexpr bool kQ8 = F == BlockFormat::q8_0;
  // Per block: sum q x = a C + off X with C the mma sums (Q4_0: lo + hi
  // halves, u = q + 8; Q8_0: lo + 16 hi nibbles of u = q + 128).
  constexpr float kOff = kQ8 ? -(17.f * H::magic + 128.f) : -(H::magic + 8.f);
  extern __shared__ __align__(16) uint32_t smem[];
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
  const int gid = lane >> 2, tq = lane & 3;
  const int nbr = K / 32, nblk = nbr / WARPS, b0 = wi * nblk, nch = nblk / S::U;
  const size_t row_bytes = static_cast<size_t>(nbr) * S::BYTES;
  const int row0 = blockIdx.x * 16;
  uint32_t* base = smem + wi * small_warp_words<F>(nblk, MR, NS);
  uint8_t* ring = reinterpret_cast<uint8_t*>(base);
  uint4* xs = reinterpret_cast<uint4*>(base + NS * S::SLOT / 4);                       // [MR][nblk * 4]
  float* xsum = reinterpret_cast<float*>(base + NS * S::SLOT / 4 + MR * nblk * 16);  // [MR][nblk]

  constexpr int PL = (S::PIECES + 31) / 32;
  constexpr int PPR = S::RS / 16;
  const uint8_t* src[PL];
  int dst[PL];
#pragma unroll
  for (int i = 0; i < PL; ++i) {
    const int p = min(lane + 32 * i, S::PIECES - 1), r = p / PPR, q = p % PPR;
    src[i] = w + static_cast<size_t>(min(row0 + r, N - 1)) * row_bytes + static_cast<size_t>(b0) * S::BYTES + q * 16;
    dst[i] = r * S::RS + q * 16;
  }
  auto issue = [&](int c) {
    uint8_t* slot = ring + (c % NS) * S::SLOT;
#pragma unroll
    for (int i = 0; i < PL; ++i)
      if (lane + 32 * i < S::PIECES) cp_async16(slot + dst[i], src[i] + static_cast<size_t>(c) * S::RS);
  };
  start_x_then_w<NS>(x, K, M, b0 * 32, nblk * 32, reinterpret_cast<T*>(xs), x16, nch, issue);

  // x: item (block, tq). Q4_0: weights 4 tq .. + 3 (lo) and 16 + 4 tq .. (hi);
  // Q8_0: weights 4 tq .. + 3 (slice 0) and 16 + 4 tq .. (slice 1); each
  // paired (l, l + 2) (l + 1, l + 3) like the nibble pairs of a word. In
  // place: a pass reads 8 blocks' 512 bytes and writes them back. nblk * 4
  // is a multiple of 32: every lane runs every pass of the shuffles.
  const int items = nblk * 4 * M;
  for (int i = lane; i < items; i += 32) {
    const T* p = reinterpret_cast<const T*>(xs) + (i >> 2) * 32 + 4 * (i & 3);
    const uint2 lo = *reinterpret_cast<const uint2*>(p), hi = *reinterpret_cast<const uint2*>(p + 16);
    __syncwarp();
    const T* el = reinterpret_cast<const T*>(&lo);
    const T* eh = reinterpret_cast<const T*>(&hi);
    float sm = 0.f;
#pragma unroll
    for (int k = 0; k < 4; ++k) sm += static_cast<float>(el[k]) + static_cast<float>(eh[k]);
    xs[i] = make_uint4(__byte_perm(lo.x, lo.y, 0x5410), __byte_perm(lo.x, lo.y, 0x7632),
                       __byte_perm(hi.x, hi.y, 0x5410), __byte_perm(hi.x, hi.y, 0x7632));
    sm += __shfl_xor_sync(0xffffffffu, sm, 1);
    sm += __shfl_xor_sync(0xffffffffu, sm, 2);
    if ((i & 3) == 0) xsum[i >> 2] = sm;
  }
  __syncwarp();

  // B column gid is x row gid (zero past M); lane tq sums columns 2 tq, 2 tq + 1.
  const bool xrow = gid < M;
  const int xrow_off = min(gid, M - 1) * nblk;
  int xc[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) xc[e] = min(2 * tq + e, M - 1) * nblk;
  const uint32_t magic = H::magic2;
  float acc[2][2] = {};
  for (int c = 0; c < nch; ++c) {
    if (c + NS - 1 < nch) issue(c + NS - 1);
    cp_async_commit();
    cp_async_wait<NS - 1>();
    __syncwarp();
    const uint8_t* slot = ring + (c % NS) * S::SLOT;
    const uint8_t* r0 = slot + gid * S::RS;
    const uint8_t* r1 = slot + (gid + 8) * S::RS;
#pragma unroll
    for (int u = 0; u < S::U; ++u) {
      const int blk = c * S::U + u;
      uint4 bx = make_uint4(0, 0, 0, 0);
      if (xrow) bx = xs[(xrow_off + blk) * 4 + tq];
      float c0[4] = {}, c1[4] = {};
      if constexpr (!kQ8) {
        const int off = u * S::BYTES + 2 + 4 * tq;
        const uint32_t w0 = lds_at(r0, off), w1 = lds_at(r1, off);
        mma16816<T>(c0, and_or(w0, magic), and_or(w1, magic), and_or(w0 >> 8, magic), and_or(w1 >> 8, magic), bx.x,
                    bx.y);
        mma16816<T>(c1, and_or(w0 >> 4, magic), and_or(w1 >> 4, magic), and_or(w0 >> 12, magic),
                    and_or(w1 >> 12, magic), bx.z, bx.w);
      } else {
#pragma unroll
        for (int sl = 0; sl < 2; ++sl) {  // slice sl: bytes 16 sl + 4 tq .. + 3
          const int off = u * S::BYTES + 2 + 16 * sl + 4 * tq;
          const uint32_t w0 = lds_at(r0, off) ^ 0x80808080u, w1 = lds_at(r1, off) ^ 0x80808080u;
          const uint32_t bb0 = sl ? bx.z : bx.x, bb1 = sl ? bx.w : bx.y;
          mma16816<T>(c0, and_or(w0, magic), and_or(w1, magic), and_or(w0 >> 8, magic), and_or(w1 >> 8, magic), bb0,
                      bb1);
          mma16816<T>(c1, and_or(w0 >> 4, magic), and_or(w1 >> 4, magic), and_or(w0 >> 12, magic),
                      and_or(w1 >> 12, magic), bb0, bb1);
        }
      }
      // The hardware conversion: qb::half_to_float's NaN-payload branch (for
      // bit-exact dequantization) was a fifth of this loop's instructions,
      // and a product's NaN has no payload to keep.
      const float d0 = __half2float(*reinterpret_cast<const __half*>(r0 + u * S::BYTES));
      const float d1 = __half2float(*reinterpret_cast<const __half*>(r1 + u * S::BYTES));
#pragma unroll
      for (int e = 0; e < (MR == 1 ? 1 : 2); ++e) {
        const float X = xsum[xc[e] + blk];
        const float s0 = kQ8 ? fmaf(16.f, c1[e], c0[e]) : c0[e] + c1[e];
        const float s1 = kQ8 ? fmaf(16.f, c1[2 + e], c0[2 + e]) : c0[2 + e] + c1[2 + e];
        acc[0][e] = fmaf(d0, fmaf(kOff, X, s0), acc[0][e]);
        acc[1][e] = fmaf(d1, fmaf(kOff, X, s1), acc[1][e]);
      }
    }
    __syncwarp();
  }
  store_tile<WARPS, MR>(acc, y, row0, N, M);
}

template <typename T, BlockFormat F, int WARPS, int MINB, int MR, int NS = 2>
bool launch_small_cfg(const T* x, const uint8_t* w, T* y, int N, int K, int M, cudaStream_t st) {
  const size_t smem = static_cast<size_t>(WARPS) * small_warp_words<F>(K / 32 / WARPS, MR, NS) * 4;
  if (smem > kSmemCap) return false;
  auto kernel = small_stream_kernel<T, F, WARPS, MINB, MR, NS>;
  static const bool allowed = allow_smem_cap(kernel);  // once per kernel
  if (!allowed) return false;
  kernel<<<static_cast<unsigned>((N + 15) / 16), WARPS * 32, smem, st>>>(x, w, y, N, K, M,
                                                                         reinterpret_cast<uintptr_t>(x) % 16 == 0);
  return true;
}

// The configurations for MR rows of x: 4 warps split a row of up to 32
// super-blocks (K <= 8192), 8 warps longer ones; more rows of x take more
// shared memory, so fewer blocks share an SM.
template <typename T, int MR>
bool q4k_rows(const T* x, const uint8_t* w, T* y, int N, int K, int M, cudaStream_t st) {
  const int nsbr = K / 256;
  if (nsbr % 8 == 0 && nsbr > 32) return launch_cfg<T, 8, MR == 1 ? 2 : 1, MR>(x, w, y, N, K, M, st);
  if (nsbr % 4 == 0) return launch_cfg<T, 4, MR == 1 ? 4 : 2, MR>(x, w, y, N, K, M, st);
  return false;
}

// Q4_0 / Q8_0: 4 warps split a row of up to 256 blocks (K <= 8192), 8 warps longer ones.
template <typename T, BlockFormat F, int MR>
bool small_rows(const T* x, const uint8_t* w, T* y, int N, int K, int M, cudaStream_t st) {
  const int nbr = K / 32;
  const bool eight = nbr % 64 == 0 && nbr > 256;
  if (!eight && nbr % 32 != 0) return false;
  return eight ? launch_small_cfg<T, F, 8, MR == 1 ? 2 : 1, MR>(x, w, y, N, K, M, st)
               : launch_small_cfg<T, F, 4, MR == 1 ? 4 : 2, MR>(x, w, y, N, K, M, st);
}

// M rows of x (1..8): one launch of MR >= M rows where x's rows fit in
// shared memory, else passes of fewer rows (each pass reads w again). The
// passes of one MR share a shape, so only the first can fail.
template <int MR, typename Rows>
bool passes(int M, Rows& rows) {
  for (int m0 = 0; m0 < M; m0 += MR) {
    if (!rows(std::integral_constant<int, MR>{}, m0, std::min(MR, M - m0))) return false;
  }
  return true;
}
template <typename Rows>
bool by_rows(int M, Rows&& rows) {
  if (M == 1) return passes<1>(M, rows);
  return (M > 4 && passes<8>(M, rows)) || (M > 2 && passes<4>(M, rows)) || passes<2>(M, rows) || passes<1>(M, rows);
}

}  // namespace

template <typename T>
bool launch_q4k_stream(const T* x, const uint8_t* w, T* y, int N, int K, int M, cudaStream_t st) {
  if (M < 1 || M > 8 || K % 256 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(x) % 8 != 0) {
    return false;
  }
  return by_rows(M, [&](auto mr, int m0, int m) {
    return q4k_rows<T, decltype(mr)::value>(x + static_cast<size_t>(m0) * K, w, y + static_cast<size_t>(m0) * N, N, K,
                                            m, st);
  });
}

template <typename T>
bool launch_small_stream(const T* x, const uint8_t* w, T* y, int N, int K, int M, BlockFormat f, cudaStream_t st) {
  if (M < 1 || M > 8 || K % 32 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(x) % 8 != 0 || (f != BlockFormat::q4_0 && f != BlockFormat::q8_0)) {
    return false;
  }
  return by_rows(M, [&](auto mr, int m0, int m) {
    constexpr int MR = decltype(mr)::value;
    const T* xm = x + static_cast<size_t>(m0) * K;
    T* ym = y + static_cast<size_t>(m0) * N;
    return f == BlockFormat::q4_0 ? small_rows<T, BlockFormat::q4_0, MR>(xm, w, ym, N, K, m, st)
                                  : small_rows<T, BlockFormat::q8_0, MR>(xm, w, ym, N, K, m, st);
  });
}

template bool launch_small_stream<__nv_bfloat16>(const __nv_bfloat16*, const uint8_t*, __nv_bfloat16*, int, int, int,
                                                 BlockFormat, cudaStream_t);
template bool launch_small_stream<__half>(const __half*, const uint8_t*, __half*, int, int, int, BlockFormat,
                                          cudaStream_t);
template bool launch_q4k_stream<__nv_bfloat16>(const __nv_bfloat16*, const uint8_t*, __nv_bfloat16*, int, int, int,
                                               cudaStream_t);
template bool launch_q4k_stream<__half>(const __half*, const uint8_t*, __half*, int, int, int, cudaStream_t);

}  // namespace kiln::cuda
