// Q4_K QMV for one row of x (decode), bf16 / fp16 x: the streaming kernel
// of quantized_qmv.cu on llama.cpp's most used format (Q4_K_M files keep
// most weights in it).
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
// The numbers are the CPU's up to fp32 summation order (the dot is not the
// bit-exact decode: tests compare with a tolerance).
#include "backend/cpu/quant_blocks_math.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/quantized_qmv.cuh"

namespace kiln::cuda {
namespace {

constexpr int kSB = 144;            // bytes per super-block (and row stride in a slot)
constexpr int kSlot = 16 * kSB;     // one chunk: 16 rows x 1 super-block
constexpr int kPieces = kSlot / 16; // 16-byte copies per chunk (144)

// Words of shared memory per warp for nsb super-blocks per row.
constexpr int warp_words(int nsb) { return 2 * kSlot / 4 + 16 * 8 * 2 + nsb * 32 * 4 + nsb * 8; }

template <typename T, int WARPS, int MINB>
__global__ void __launch_bounds__(WARPS * 32, MINB)
    q4k_stream_kernel(const T* __restrict__ x, const uint8_t* __restrict__ w, T* __restrict__ y, int N, int K) {
  using H = MmaHalf<T>;
  extern __shared__ __align__(16) uint32_t smem[];
  __shared__ float red[WARPS][16];
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
  const int gid = lane >> 2, tq = lane & 3;
  const int nsbr = K / 256, nsb = nsbr / WARPS, sb0 = wi * nsb;
  const size_t row_bytes = static_cast<size_t>(nsbr) * kSB;
  const int row0 = blockIdx.x * 16;
  uint32_t* base = smem + wi * warp_words(nsb);
  uint8_t* ring = reinterpret_cast<uint8_t*>(base);
  float2* par = reinterpret_cast<float2*>(base + 2 * kSlot / 4);  // [16 rows][8 sub-blocks]
  uint4* xs = reinterpret_cast<uint4*>(base + 2 * kSlot / 4 + 256);
  float* xsum = reinterpret_cast<float*>(base + 2 * kSlot / 4 + 256 + nsb * 128);

  constexpr int PL = (kPieces + 31) / 32;  // copies per lane (the last partly)
  const uint8_t* src[PL];
  int dst[PL];
#pragma unroll
  for (int i = 0; i < PL; ++i) {
    const int p = min(lane + 32 * i, kPieces - 1), r = p / 9, q = p % 9;
    src[i] = w + static_cast<size_t>(min(row0 + r, N - 1)) * row_bytes + static_cast<size_t>(sb0) * kSB + q * 16;
    dst[i] = r * kSB + q * 16;
  }
  auto issue = [&](int c, uint8_t* slot) {
#pragma unroll
    for (int i = 0; i < PL; ++i)
      if (lane + 32 * i < kPieces) cp_async16(slot + dst[i], src[i] + static_cast<size_t>(c) * kSB);
  };
  if (nsb > 0) issue(0, ring);
  cp_async_commit();

  // x: item (j, c, s, tq) = lane tq's fragments for slice s of sub-blocks 2c
  // (lo) and 2c + 1 (hi) of super-block j: weights l .. l + 3, l = 16 s + 4 tq,
  // paired (l, l + 2) and (l + 1, l + 3) as the nibble pairs are.
  for (int j = 0; j < nsb; ++j) {
    const int c = lane >> 3, s = (lane >> 2) & 1;
    const T* p = x + static_cast<size_t>(sb0 + j) * 256 + 64 * c + 16 * s + 4 * tq;
    const uint2 lo = __ldg(reinterpret_cast<const uint2*>(p)), hi = __ldg(reinterpret_cast<const uint2*>(p + 32));
    const T* el = reinterpret_cast<const T*>(&lo);
    const T* eh = reinterpret_cast<const T*>(&hi);
    float sl = 0.f, sh = 0.f;
#pragma unroll
    for (int k = 0; k < 4; ++k) sl += static_cast<float>(el[k]), sh += static_cast<float>(eh[k]);
    xs[j * 32 + lane] = make_uint4(__byte_perm(lo.x, lo.y, 0x5410), __byte_perm(lo.x, lo.y, 0x7632),
                                   __byte_perm(hi.x, hi.y, 0x5410), __byte_perm(hi.x, hi.y, 0x7632));
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) {
      sl += __shfl_xor_sync(0xffffffffu, sl, o);
      sh += __shfl_xor_sync(0xffffffffu, sh, o);
    }
    if ((lane & 7) == 0) xsum[j * 8 + 2 * c] = sl, xsum[j * 8 + 2 * c + 1] = sh;
  }
  __syncwarp();

  const bool xrow = gid == 0;  // B column 0 is x; the other columns are zero
  const uint32_t magic = H::magic2;
  float acc[2] = {};
  for (int j = 0; j < nsb; ++j) {
    if (j + 1 < nsb) issue(j + 1, ring + ((j + 1) & 1) * kSlot);
    cp_async_commit();
    cp_async_wait_one();
    __syncwarp();
    const uint8_t* slot = ring + (j & 1) * kSlot;
    // (a, b - a magic) of every (row, sub-block) of the chunk, 4 per lane.
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int e = lane + 32 * k, r = e >> 3, sub = e & 7;
      float a, b;
      qb::sub_params(BlockFormat::q4_k, slot + r * kSB, sub, a, b);
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
        if (xrow) bx = xs[j * 32 + c * 8 + s * 4 + tq];
        mma16816<T>(cl, and_or(w0, magic), and_or(w1, magic), and_or(w0 >> 8, magic), and_or(w1 >> 8, magic), bx.x,
                    bx.y);
        mma16816<T>(chi, and_or(w0 >> 4, magic), and_or(w1 >> 4, magic), and_or(w0 >> 12, magic),
                    and_or(w1 >> 12, magic), bx.z, bx.w);
      }
      const float xl = xsum[j * 8 + 2 * c], xh = xsum[j * 8 + 2 * c + 1];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float2 pl = par[(gid + 8 * h) * 8 + 2 * c], ph = par[(gid + 8 * h) * 8 + 2 * c + 1];
        acc[h] = fmaf(pl.x, cl[2 * h], fmaf(pl.y, xl, fmaf(ph.x, chi[2 * h], fmaf(ph.y, xh, acc[h]))));
      }
    }
    __syncwarp();
  }
  if (tq == 0) red[wi][gid] = acc[0], red[wi][gid + 8] = acc[1];
  __syncthreads();
  if (threadIdx.x < 16) {
    float v = 0.f;
#pragma unroll
    for (int k = 0; k < WARPS; ++k) v += red[k][threadIdx.x];
    if (row0 + static_cast<int>(threadIdx.x) < N) y[row0 + threadIdx.x] = static_cast<T>(v);
  }
}

template <typename T, int WARPS, int MINB>
bool launch_cfg(const T* x, const uint8_t* w, T* y, int N, int K, cudaStream_t st) {
  const size_t smem = static_cast<size_t>(WARPS) * warp_words(K / 256 / WARPS) * 4;
  if (smem > 160 * 1024) return false;
  auto kernel = q4k_stream_kernel<T, WARPS, MINB>;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 160 * 1024);
  if (attr != cudaSuccess) return false;
  kernel<<<static_cast<unsigned>((N + 15) / 16), WARPS * 32, smem, st>>>(x, w, y, N, K);
  return true;
}

}  // namespace

// 4 warps split a row of up to 32 super-blocks (K <= 8192), 8 warps longer ones.
template <typename T>
bool launch_q4k_stream(const T* x, const uint8_t* w, T* y, int N, int K, cudaStream_t st) {
  const int nsbr = K / 256;
  if (K % 256 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0 || reinterpret_cast<uintptr_t>(x) % 8 != 0) return false;
  if (nsbr % 8 == 0 && nsbr > 32) return launch_cfg<T, 8, 2>(x, w, y, N, K, st);
  if (nsbr % 4 == 0) return launch_cfg<T, 4, 4>(x, w, y, N, K, st);
  return false;
}

template bool launch_q4k_stream<__nv_bfloat16>(const __nv_bfloat16*, const uint8_t*, __nv_bfloat16*, int, int,
                                               cudaStream_t);
template bool launch_q4k_stream<__half>(const __half*, const uint8_t*, __half*, int, int, cudaStream_t);

}  // namespace kiln::cuda
