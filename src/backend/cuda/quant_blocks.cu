// llama.cpp's block formats on the GPU: quantize, dequantize and QMV
// (quantized_matmul with M <= 8 rows of x; more rows are dequantize +
// cuBLASLt, decided in core/quantize_blocks.cpp: a first version of the
// prefill path). Measured by the `qmv_q4_0`, `qmv_q8_0`, `qmv_q4_k`,
// `qmv_q6_k` rows of `kiln bench` on the GPU (drill D4).
//
// Decoding and encoding are the shared host/device math of
// backend/cpu/quant_blocks_math.h, so the GPU's bytes and floats are the
// CPU's (decoding bit for bit: the math rounds each product and sum with
// the _rn intrinsics, which nvcc never contracts into FMAs).
//
// QMV. The floor is reading the blocks once at HBM bandwidth. A warp owns a
// row of w at a time and streams it in chunks of 32 * kUnroll<F> blocks
// (2 to 7 KB): the chunk is copied to the warp's shared memory with
// coalesced 16-byte loads (blocks of 18, 34, 144 or 210 bytes are not
// 16-byte aligned one by one, but a row of them is whenever its byte length
// is a multiple of 16, e.g. K = 4096 or 14336 for every format; other rows
// are copied byte by byte). Then lane g decodes piece g of the chunk: 8
// consecutive weights, so the 32 lanes read 256 consecutive values of x
// (16-byte loads, one L1 wavefront per 128 bytes; the first version gave
// each lane a whole block and read x 32 cache lines apart, 0.13-0.47 TB/s).
// A piece's bit planes are read a 32-bit word (4 weights) at a time and
// turned into floats with PRMT + FADD (unpack4), and the sub-block's a and
// b are applied once per piece: w = a * q + b never exists in memory.
// About 5 instructions per weight remain: the kernel is issue-bound
// (ncu: 0.76 warps issued per scheduler per cycle, DRAM 15% busy, on
// Q4_0 1x4096x14336); a variant with 4 rows per CTA and split K was no
// faster. The next step is fewer instructions per weight: bf16x2 unpacking
// into mma.sync fragments, or int8 x with dp4a (llama.cpp's way, which
// changes the numbers). Kernels exist for M = 1, 4 and 8 rows of x (fewer
// rows skip the missing ones), which keeps the instantiations (10 formats x
// 3 dtypes) few.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cpu/quant_blocks_cpu.h"
#include "backend/cpu/quant_blocks_math.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/quantized_qmv.cuh"
#include "core/primitives.h"

namespace kiln {
namespace cuda {
namespace {

constexpr int kWarps = 4;  // warps per CTA of the QMV kernel

template <typename T>
__device__ __forceinline__ float to_float(T v) {
  return static_cast<float>(v);
}

// The 4 bytes at p (any alignment) as a little-endian word, from two
// aligned loads.
__device__ __forceinline__ uint32_t ld32(const uint8_t* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uint32_t* q = reinterpret_cast<const uint32_t*>(a & ~uintptr_t{3});
  uint32_t s = static_cast<uint32_t>(a & 3u) * 8u;
  return s == 0 ? q[0] : __funnelshift_r(q[0], q[1], s);
}

// Four unsigned bytes of v as the floats byte - zero: 2^23 + byte is built
// in the bits of a float (PRMT) and 2^23 + zero subtracted (FADD): two
// full-rate instructions per weight instead of a quarter-rate I2F.
__device__ __forceinline__ void unpack4(uint32_t v, float zero, float* q) {
  const float off = 8388608.f + zero;
  q[0] = __int_as_float(__byte_perm(v, 0x4B000000u, 0x7540)) - off;
  q[1] = __int_as_float(__byte_perm(v, 0x4B000000u, 0x7541)) - off;
  q[2] = __int_as_float(__byte_perm(v, 0x4B000000u, 0x7542)) - off;
  q[3] = __int_as_float(__byte_perm(v, 0x4B000000u, 0x7543)) - off;
}

// Bits 0..3 of h to the lowest bit of bytes 0..3 (the four products of h
// with 1, 2^7, 2^14, 2^21 land on distinct bits; the mask keeps bit 8i of
// the i-th).
__device__ __forceinline__ uint32_t spread4(uint32_t h) { return (h * 0x00204081u) & 0x01010101u; }

// Piece p of a block: its 8 consecutive weights 8p .. 8p + 7 as q (the
// small integers of qb::quant_value, exactly) and their sub-block's (a, b).
// Each format's bit planes are read a 32-bit word (4 weights) at a time.
template <BlockFormat F>
__device__ __forceinline__ void piece(const uint8_t* blk, int p, float (&q)[8], float& a, float& b) {
  using BF = BlockFormat;
  uint32_t lo = 0, hi = 0;
  float zero = 0.f;
  if constexpr (F == BF::q4_0 || F == BF::q4_1 || F == BF::q5_0 || F == BF::q5_1) {
    // 16 bytes: weight i < 16 in the low nibble of byte i, i >= 16 in the
    // high nibble of byte i - 16; q5 keeps the fifth bits in a 32-bit word.
    constexpr int qh = F == BF::q5_0 ? 2 : 4;
    constexpr int qs = F == BF::q4_0 ? 2 : F == BF::q4_1 ? 4 : qh + 4;
    const uint8_t* src = blk + qs + (p & 1) * 8;
    const int sh = (p >> 1) * 4;
    lo = (ld32(src) >> sh) & 0x0F0F0F0Fu;
    hi = (ld32(src + 4) >> sh) & 0x0F0F0F0Fu;
    if constexpr (F == BF::q5_0 || F == BF::q5_1) {
      uint32_t h = (ld32(blk + qh) >> (8 * p)) & 0xFFu;
      lo |= spread4(h & 0xFu) << 4;
      hi |= spread4(h >> 4) << 4;
    }
    zero = F == BF::q4_0 ? 8.f : F == BF::q5_0 ? 16.f : 0.f;
  } else if constexpr (F == BF::q8_0) {
    lo = ld32(blk + 2 + 8 * p) ^ 0x80808080u;  // int8 + 128
    hi = ld32(blk + 6 + 8 * p) ^ 0x80808080u;
    zero = 128.f;
  } else if constexpr (F == BF::q2_k || F == BF::q3_k) {
    // Weight i: bits 2s..2s+1 of byte 32h + l (h = i / 128, s = i % 128 / 32,
    // l = i % 32); Q3_K adds bit i / 32 of hmask[l] as the third bit.
    const int i0 = 8 * p, h = i0 / 128, s = (i0 % 128) / 32, l = i0 % 32;
    const uint8_t* src = blk + (F == BF::q2_k ? 16 : 32) + h * 32 + l;
    lo = (ld32(src) >> (2 * s)) & 0x03030303u;
    hi = (ld32(src + 4) >> (2 * s)) & 0x03030303u;
    if constexpr (F == BF::q3_k) {
      const int c = i0 / 32;
      lo |= ((ld32(blk + l) >> c) & 0x01010101u) << 2;
      hi |= ((ld32(blk + l + 4) >> c) & 0x01010101u) << 2;
      zero = 4.f;
    }
  } else if constexpr (F == BF::q4_k || F == BF::q5_k) {
    // Sub-block j (32 weights) in nibble j % 2 of 32 bytes at (j / 2) * 32;
    // Q5_K's fifth bit is bit j of qh[l].
    const int j = p / 4, l = (p % 4) * 8;
    const uint8_t* src = blk + (F == BF::q4_k ? 16 : 48) + (j / 2) * 32 + l;
    lo = (ld32(src) >> (4 * (j & 1))) & 0x0F0F0F0Fu;
    hi = (ld32(src + 4) >> (4 * (j & 1))) & 0x0F0F0F0Fu;
    if constexpr (F == BF::q5_k) {
      lo |= ((ld32(blk + 16 + l) >> j) & 0x01010101u) << 4;
      hi |= ((ld32(blk + 20 + l) >> j) & 0x01010101u) << 4;
    }
  } else {  // q6_k: 32-weight chunk c; low nibbles in ql, 2 high bits in qh
    const int c = p / 4, l = (p % 4) * 8, h = c / 4, s = c % 4;
    const uint8_t* ql = blk + h * 64 + (s & 1) * 32 + l;
    const uint8_t* qh = blk + 128 + h * 32 + l;
    lo = ((ld32(ql) >> (4 * (s >> 1))) & 0x0F0F0F0Fu) | (((ld32(qh) >> (2 * s)) & 0x03030303u) << 4);
    hi = ((ld32(ql + 4) >> (4 * (s >> 1))) & 0x0F0F0F0Fu) | (((ld32(qh + 4) >> (2 * s)) & 0x03030303u) << 4);
    zero = 32.f;
  }
  qb::sub_params(F, blk, (8 * p) / qb::sub_size(F), a, b);
  unpack4(lo, zero, q);
  unpack4(hi, zero, q + 4);
}

// x[k .. k + 7] as floats (k a multiple of 8: 16- or 32-byte aligned loads).
__device__ __forceinline__ void load8(const float* x, float (&v)[8]) {
  float4 p = __ldg(reinterpret_cast<const float4*>(x)), r = __ldg(reinterpret_cast<const float4*>(x) + 1);
  v[0] = p.x, v[1] = p.y, v[2] = p.z, v[3] = p.w, v[4] = r.x, v[5] = r.y, v[6] = r.z, v[7] = r.w;
}
template <typename T>
__device__ __forceinline__ void load8(const T* x, float (&v)[8]) {
  uint4 u = __ldg(reinterpret_cast<const uint4*>(x));
  const T* h = reinterpret_cast<const T*>(&u);
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = to_float(h[i]);
}

// Blocks per lane per chunk: about 2 KB or more per warp in flight.
template <BlockFormat F>
constexpr int unroll() {
  return block_layout(F).bytes * 32 >= 2048 ? 1 : (2048 + block_layout(F).bytes * 32 - 1) / (block_layout(F).bytes * 32);
}

template <BlockFormat F, typename T, int M>
__global__ void __launch_bounds__(kWarps * 32) qmv_kernel(const T* __restrict__ x, const uint8_t* __restrict__ w,
                                                           T* __restrict__ y, int rows, int64_t N, int64_t K,
                                                           bool vector_rows) {
  constexpr int kBytes = block_layout(F).bytes, kBlock = block_layout(F).block, U = unroll<F>();
  constexpr int kChunkBlocks = 32 * U, kChunkBytes = kChunkBlocks * kBytes;  // a multiple of 16
  constexpr int P = kBlock / 8;  // pieces of 8 weights per block
  // 16 bytes of padding: ld32 of a chunk's last bytes reads up to 3 past them.
  __shared__ __align__(16) uint8_t stage[kWarps][kChunkBytes + 16];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t nb = K / kBlock, row_bytes = nb * kBytes;
  uint8_t* buf = stage[warp];
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + warp; n < N;
       n += static_cast<int64_t>(gridDim.x) * kWarps) {
    const uint8_t* row = w + n * row_bytes;
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.f;
    for (int64_t b0 = 0; b0 < nb; b0 += kChunkBlocks) {
      int blocks = static_cast<int>(nb - b0 < kChunkBlocks ? nb - b0 : kChunkBlocks);
      int bytes = blocks * kBytes;
      const uint8_t* src = row + b0 * kBytes;
      __syncwarp();
      if (vector_rows) {
        // Row starts and chunk sizes are multiples of 16 bytes here. All of
        // a lane's loads are issued before the first store.
        const uint4* s4 = reinterpret_cast<const uint4*>(src);
        uint4* d4 = reinterpret_cast<uint4*>(buf);
        constexpr int kVec = (kChunkBytes / 16 + 31) / 32;
        uint4 r[kVec];
#pragma unroll
        for (int v = 0; v < kVec; ++v) {
          if (lane + 32 * v < bytes / 16) r[v] = __ldcs(s4 + lane + 32 * v);
        }
#pragma unroll
        for (int v = 0; v < kVec; ++v) {
          if (lane + 32 * v < bytes / 16) d4[lane + 32 * v] = r[v];
        }
      } else {
        for (int i = lane; i < bytes; i += 32) buf[i] = src[i];
      }
      __syncwarp();
      // Lane g takes piece g: consecutive lanes read consecutive x.
      for (int g = lane; g < blocks * P; g += 32) {
        const int u = g / P, p = g % P;
        float q[8], a, b;
        piece<F>(buf + u * kBytes, p, q, a, b);
        const int64_t k = (b0 + u) * kBlock + 8 * p;
#pragma unroll
        for (int m = 0; m < M; ++m) {
          if (M > 1 && m >= rows) break;
          float xv[8];
          load8(x + m * K + k, xv);
          float d = 0.f, sx = 0.f;
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            d = fmaf(q[i], xv[i], d);
            if constexpr (qb::has_offset(F)) sx += xv[i];
          }
          acc[m] = fmaf(a, d, acc[m]);
          if constexpr (qb::has_offset(F)) acc[m] = fmaf(b, sx, acc[m]);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
    }
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < M; ++m) {
        if (m < rows) y[m * N + n] = static_cast<T>(acc[m]);
      }
    }
  }
}

template <BlockFormat F, typename T>
void launch_qmv(const T* x, const uint8_t* w, T* y, int64_t M, int64_t N, int64_t K, bool w_early, cudaStream_t s) {
  int64_t row_bytes = K / block_layout(F).block * block_layout(F).bytes;
  bool vector_rows = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  int64_t grid = std::min<int64_t>((N + kWarps - 1) / kWarps, int64_t{device_sm_count()} * 16);
  if constexpr (F == BlockFormat::q4_k || F == BlockFormat::q4_0 || F == BlockFormat::q8_0) {
    // One row of x rounded to 8 bits, the weights streamed into shared
    // memory by the copy engine (quant_blocks_qmv_i8.cu, launch_qmv_bulk).
    if (M == 1 && N <= INT32_MAX && K <= INT32_MAX && cpu::block_x_int8() &&
        launch_qmv_bulk<T>(x, w, y, static_cast<int>(N), static_cast<int>(K), F, w_early, s)) {
      KILN_CUDA_CHECK_LAUNCH("quantized_matmul");
      return;
    }
  }
  if constexpr (F == BlockFormat::q4_k ||
                ((F == BlockFormat::q4_0 || F == BlockFormat::q8_0) && std::is_same_v<T, float>)) {
    // One row of x (decode) rounded to 8 bits, integer dot products
    // (quant_blocks_qmv_i8.cu), where that measured faster: Q4_K, and float32
    // x (16-bit x on Q4_0 / Q8_0 stays on the tensor-core kernels below:
    // the 8B decode step ran 3-10% slower with this kernel).
    if (M == 1 && N <= INT32_MAX && cpu::block_x_int8() &&
        launch_qmv_i8<T>(x, w, y, static_cast<int>(N), static_cast<int>(K), F, w_early, s)) {
      KILN_CUDA_CHECK_LAUNCH("quantized_matmul");
      return;
    }
  }
  if constexpr ((F == BlockFormat::q4_k || F == BlockFormat::q4_0 || F == BlockFormat::q8_0) &&
                (std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>)) {
    // Up to 8 rows of x on the tensor cores (quant_blocks_qmv.cu) where the shape allows.
    const int n = static_cast<int>(N), k = static_cast<int>(K), m = static_cast<int>(M);
    if (M <= 8 && (F == BlockFormat::q4_k ? launch_q4k_stream<T>(x, w, y, n, k, m, s)
                                          : launch_small_stream<T>(x, w, y, n, k, m, F, s))) {
      KILN_CUDA_CHECK_LAUNCH("quantized_matmul");
      return;
    }
  }
  for (int64_t m0 = 0; m0 < M; m0 += 8) {
    const T* xm = x + m0 * K;
    T* ym = y + m0 * N;
    const int rows = static_cast<int>(std::min<int64_t>(8, M - m0));
    const unsigned g = static_cast<unsigned>(grid);
    if (rows == 1) {
      qmv_kernel<F, T, 1><<<g, kWarps * 32, 0, s>>>(xm, w, ym, rows, N, K, vector_rows);
    } else if (rows <= 4) {
      qmv_kernel<F, T, 4><<<g, kWarps * 32, 0, s>>>(xm, w, ym, rows, N, K, vector_rows);
    } else {
      qmv_kernel<F, T, 8><<<g, kWarps * 32, 0, s>>>(xm, w, ym, rows, N, K, vector_rows);
    }
    KILN_CUDA_CHECK_LAUNCH("quantized_matmul");
  }
}

// One thread per decoded weight (coalesced writes; a block's scales are
// re-read from L1 by its threads).
template <BlockFormat F, typename T>
__global__ void dequantize_kernel(const uint8_t* __restrict__ w, T* __restrict__ out, int64_t n) {
  constexpr int kBlock = block_layout(F).block, kBytes = block_layout(F).bytes;
  constexpr int sub = qb::sub_size(F);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint8_t* blk = w + (i / kBlock) * kBytes;
    int e = static_cast<int>(i % kBlock);
    float a, b;
    qb::sub_params(F, blk, e / sub, a, b);
    float v = qb::decode(a, b, qb::quant_value(F, blk, e));
    out[i] = static_cast<T>(v);
  }
}

// One thread per block: the K formats' scale search is sequential.
template <BlockFormat F>
__global__ void quantize_kernel(const float* __restrict__ x, uint8_t* __restrict__ y, int64_t blocks) {
  constexpr int kBlock = block_layout(F).block, kBytes = block_layout(F).bytes;
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < blocks;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    qb::quantize_block(F, x + b * kBlock, y + b * kBytes);
  }
}

// A row-major device copy of `a` in dtype t (or a's own pointer when it is
// one already, aligned to `align` bytes: QMV reads x 16 bytes at a time;
// the weights need no alignment, launch_qmv picks its loads by theirs).
const char* row_major_as(const array& a, Dtype t, const char* op, uintptr_t align = 1) {
  const char* p = in_ptr(a);
  if (a.dtype() == t && detail::is_row_contiguous(a.shape(), a.desc()->strides) &&
      reinterpret_cast<uintptr_t>(p) % align == 0)
    return p;
  char* dst = static_cast<char*>(scratch(a.size() * size_of(t), op));
  copy_strided(p, a.dtype(), a.shape(), a.desc()->strides, dst, t, row_major_strides(a.shape()), op);
  return dst;
}

}  // namespace
}  // namespace cuda

void BlockQuantize::eval_gpu(const std::vector<array>& inputs, array& out) {
  cuda::allocate(out, "quantize");
  if (out.size() == 0) return;
  const auto* x = reinterpret_cast<const float*>(cuda::row_major_as(inputs[0], float32, "quantize"));
  auto* y = reinterpret_cast<uint8_t*>(cuda::out_ptr(out));
  int64_t blocks = static_cast<int64_t>(inputs[0].size()) / block_layout(format_).block;
  cudaStream_t s = cuda::current_stream();
  dispatch_format(format_, [&](auto fc) {
    constexpr BlockFormat F = decltype(fc)::value;
    cuda::quantize_kernel<F><<<cuda::grid_for(blocks, 1, 128), 128, 0, s>>>(x, y, blocks);
  });
  KILN_CUDA_CHECK_LAUNCH("quantize");
}

void BlockDequantize::eval_gpu(const std::vector<array>& inputs, array& out) {
  cuda::allocate(out, "dequantize");
  if (out.size() == 0) return;
  const auto* w = reinterpret_cast<const uint8_t*>(cuda::row_major_as(inputs[0], uint8, "dequantize"));
  char* y = cuda::out_ptr(out);
  int64_t n = static_cast<int64_t>(out.size());
  cudaStream_t s = cuda::current_stream();
  cuda::dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T> || cuda::is_half_v<T>) {
      dispatch_format(format_, [&](auto fc) {
        constexpr BlockFormat F = decltype(fc)::value;
        cuda::dequantize_kernel<F, T><<<cuda::grid_for(n, 1, 256), 256, 0, s>>>(w, reinterpret_cast<T*>(y), n);
      });
    } else {
      throw Error(std::string("[dequantize] unsupported output dtype ") + dtype_name(out.dtype()));
    }
  });
  KILN_CUDA_CHECK_LAUNCH("dequantize");
}

void BlockQuantizedMatmul::eval_gpu(const std::vector<array>& inputs, array& out) {
  cuda::allocate(out, "quantized_matmul");
  if (out.size() == 0) return;
  int64_t n = inputs[1].shape(0), k = inputs[0].shape(-1);
  int64_t rows = static_cast<int64_t>(out.size()) / n;
  cudaStream_t s = cuda::current_stream();
  char* y = cuda::out_ptr(out);
  if (k == 0) {
    KILN_CUDA_CHECK("quantized_matmul", cudaMemsetAsync(y, 0, out.nbytes(), s));
    return;
  }
  const char* x = cuda::row_major_as(inputs[0], inputs[0].dtype(), "quantized_matmul", 16);
  const auto* w = reinterpret_cast<const uint8_t*>(cuda::row_major_as(inputs[1], uint8, "quantized_matmul"));
  // w as it is (not a copy made here) and written by no kernel of the batch being captured.
  const bool w_early = inputs[1].dtype() == uint8 &&
                       detail::is_row_contiguous(inputs[1].shape(), inputs[1].desc()->strides) &&
                       cuda::complete_before_capture(inputs[1]);
  cuda::dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || cuda::is_half_v<T>) {
      dispatch_format(format_, [&](auto fc) {
        constexpr BlockFormat F = decltype(fc)::value;
        cuda::launch_qmv<F, T>(reinterpret_cast<const T*>(x), w, reinterpret_cast<T*>(y), rows, n, k, w_early, s);
      });
    } else {
      throw Error(std::string("[quantized_matmul] unsupported dtype ") + dtype_name(out.dtype()));
    }
  });
}

}  // namespace kiln

namespace kiln {

// x computed in the product's prologue (quant_blocks_qmv_i8.cu, XSource);
// where the bulk kernel does not take it (KILN_QMV_BULK=0, x kept in float,
// a shape it refuses), one block computes x into a scratch row with the
// same arithmetic and the ordinary QMV multiplies it.
void FusedBlockQMV::eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  const bool norm = kind_ == Kind::add_rms_norm;
  const char* op = norm ? "add_rms_norm_quantized_matmul" : "swiglu_quantized_matmul";
  for (array& o : outputs) cuda::allocate(o, op);  // not donated: every CTA reads a and b
  array& out = outputs.back();
  const array& wq = inputs.back();
  const int n = static_cast<int>(wq.shape(0)), k = static_cast<int>(inputs[0].shape(-1));
  const Dtype t = inputs[0].dtype();
  const char* a = cuda::row_major_as(inputs[0], t, op, 16);
  const char* b = cuda::row_major_as(inputs[1], t, op, 16);
  const char* nw = norm ? cuda::row_major_as(inputs[2], t, op, 16) : nullptr;
  const auto* w = reinterpret_cast<const uint8_t*>(cuda::row_major_as(wq, uint8, op, 16));
  const bool w_early = detail::is_row_contiguous(wq.shape(), wq.desc()->strides) &&
                       reinterpret_cast<const char*>(w) == cuda::in_ptr(wq) && cuda::complete_before_capture(wq);
  char* h = norm ? cuda::out_ptr(outputs[0]) : nullptr;
  char* y = cuda::out_ptr(out);
  cudaStream_t s = cuda::current_stream();
  cuda::dispatch(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || cuda::is_half_v<T>) {
      cuda::XSource<T> src;
      src.kind = norm ? cuda::XSource<T>::kAddRmsNorm : cuda::XSource<T>::kSwiglu;
      src.a = reinterpret_cast<const T*>(a);
      src.b = reinterpret_cast<const T*>(b);
      src.w = reinterpret_cast<const T*>(nw);
      src.h = reinterpret_cast<T*>(h);
      src.eps = eps_;
      T* yp = reinterpret_cast<T*>(y);
      dispatch_format(format_, [&](auto fc) {
        constexpr BlockFormat F = decltype(fc)::value;
        if (cpu::block_x_int8() && cuda::launch_qmv_bulk<T>(src, w, yp, n, k, F, w_early, s)) {
          KILN_CUDA_CHECK_LAUNCH(op);
          return;
        }
        T* x = static_cast<T*>(cuda::scratch(static_cast<size_t>(k) * sizeof(T), op));
        cuda::launch_x_source<T>(src, k, x, s);
        KILN_CUDA_CHECK_LAUNCH(op);
        cuda::launch_qmv<F, T>(x, w, yp, 1, n, k, w_early, s);
      });
    } else {
      throw Error(std::string("[") + op + "] unsupported dtype " + dtype_name(t));
    }
  });
}

}  // namespace kiln
