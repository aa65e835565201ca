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
// are copied byte by byte), then each lane decodes whole blocks from shared
// memory (32-bit words put together with funnel shifts) and accumulates
// sum(q * x) and sum(x) per sub-block, applying the sub-block's a and b once:
// w = a * q + b never exists in memory. Several warps per SM keep enough
// bytes in flight. x (float32 / bf16 / fp16, converted on load) is re-read
// per row of w from L1/L2: at M = 1 that is ~7x the bytes of a Q4_0 row,
// the next thing to remove if the bench shows the L1 as the limit (x staged
// once per block of rows, several rows of w per warp). Kernels exist for
// M = 1, 4 and 8 rows of x (fewer rows read zeros), which keeps the
// instantiations (10 formats x 3 dtypes) few.
//
// Not measured yet: this file was written on a machine without a GPU; the
// D4 rows of `kiln bench --device gpu` and tests/cuda/test_cuda_quant_blocks
// are its first run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cpu/quant_blocks_math.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/kernel_utils.cuh"
#include "core/primitives.h"

namespace kiln {
namespace cuda {
namespace {

constexpr int kWarps = 4;  // warps per CTA of the QMV kernel

// Blocks per lane per chunk: about 2 KB or more per warp in flight.
template <BlockFormat F>
constexpr int unroll() {
  return block_layout(F).bytes * 32 >= 2048 ? 1 : (2048 + block_layout(F).bytes * 32 - 1) / (block_layout(F).bytes * 32);
}

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

// The rows of x a kernel instance for up to M rows reads (rows <= M: the
// missing ones read as zeros, so M in {1, 4, 8} covers 1..8 rows).
template <int M, typename T>
struct Rows {
  const T* x;
  int64_t K;
  int rows;
  __device__ __forceinline__ float at(int m, int64_t k) const {
    if constexpr (M == 1) return to_float(x[k]);
    else return m < rows ? to_float(x[m * K + k]) : 0.f;
  }
};

// Adds a block's contribution to acc[m], m < M. kb: the block's first k.
template <BlockFormat F, int M, typename T>
__device__ __forceinline__ void block_dot(const uint8_t* blk, const Rows<M, T>& x, int64_t kb, float (&acc)[M]) {
  if constexpr (F == BlockFormat::q8_0 || F == BlockFormat::q4_0) {
    float d = qb::load_half(blk);
    float s[M];
#pragma unroll
    for (int m = 0; m < M; ++m) s[m] = 0.f;
    if constexpr (F == BlockFormat::q8_0) {
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        uint32_t v = ld32(blk + 2 + 4 * t);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float q = static_cast<float>(static_cast<int8_t>(v >> (8 * e)));
#pragma unroll
          for (int m = 0; m < M; ++m) s[m] = fmaf(q, x.at(m, kb + 4 * t + e), s[m]);
        }
      }
    } else {
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        uint32_t v = ld32(blk + 2 + 4 * t);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float lo = static_cast<float>(static_cast<int>((v >> (8 * e)) & 0xF) - 8);
          float hi = static_cast<float>(static_cast<int>((v >> (8 * e + 4)) & 0xF) - 8);
#pragma unroll
          for (int m = 0; m < M; ++m) {
            s[m] = fmaf(lo, x.at(m, kb + 4 * t + e), s[m]);
            s[m] = fmaf(hi, x.at(m, kb + 16 + 4 * t + e), s[m]);
          }
        }
      }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = fmaf(d, s[m], acc[m]);
  } else if constexpr (F == BlockFormat::q4_k) {
#pragma unroll 1
    for (int j = 0; j < 8; ++j) {
      float a, b;
      qb::sub_params(F, blk, j, a, b);
      float sq[M], sx[M];
#pragma unroll
      for (int m = 0; m < M; ++m) sq[m] = sx[m] = 0.f;
      const uint8_t* qs = blk + 16 + (j / 2) * 32;
      int shift = 4 * (j % 2);
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        uint32_t v = (ld32(qs + 4 * t) >> shift) & 0x0F0F0F0Fu;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float q = static_cast<float>((v >> (8 * e)) & 0xFF);
#pragma unroll
          for (int m = 0; m < M; ++m) {
            float xv = x.at(m, kb + 32 * j + 4 * t + e);
            sq[m] = fmaf(q, xv, sq[m]);
            sx[m] += xv;
          }
        }
      }
#pragma unroll
      for (int m = 0; m < M; ++m) acc[m] = fmaf(a, sq[m], fmaf(b, sx[m], acc[m]));
    }
  } else if constexpr (F == BlockFormat::q6_k) {
    float d = qb::load_half(blk + 208);
#pragma unroll 1
    for (int c = 0; c < 8; ++c) {
      int h = c / 4, s = c % 4;
      const uint8_t* ql = blk + h * 64 + (s & 1) * 32;
      const uint8_t* qh = blk + 128 + h * 32;
      float s0[M], s1[M];
#pragma unroll
      for (int m = 0; m < M; ++m) s0[m] = s1[m] = 0.f;
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        uint32_t lo = (ld32(ql + 4 * t) >> (4 * (s >> 1))) & 0x0F0F0F0Fu;
        uint32_t hi = (ld32(qh + 4 * t) >> (2 * s)) & 0x03030303u;
        uint32_t v = lo | (hi << 4);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float q = static_cast<float>(static_cast<int>((v >> (8 * e)) & 0xFF) - 32);
#pragma unroll
          for (int m = 0; m < M; ++m) {
            float xv = x.at(m, kb + 32 * c + 4 * t + e);
            if (t < 4) s0[m] = fmaf(q, xv, s0[m]);
            else s1[m] = fmaf(q, xv, s1[m]);
          }
        }
      }
      float a0 = d * static_cast<float>(static_cast<int8_t>(blk[192 + 2 * c]));
      float a1 = d * static_cast<float>(static_cast<int8_t>(blk[192 + 2 * c + 1]));
#pragma unroll
      for (int m = 0; m < M; ++m) acc[m] = fmaf(a0, s0[m], fmaf(a1, s1[m], acc[m]));
    }
  } else {
    // The other formats: the scalar reference decoder, weight by weight.
    constexpr int sub = F == BlockFormat::q2_k || F == BlockFormat::q3_k ? 16 : 32;
    constexpr int subs = block_layout(F).block / sub;
#pragma unroll 1
    for (int j = 0; j < subs; ++j) {
      float a, b;
      qb::sub_params(F, blk, j, a, b);
      float sq[M], sx[M];
#pragma unroll
      for (int m = 0; m < M; ++m) sq[m] = sx[m] = 0.f;
#pragma unroll 4
      for (int i = 0; i < sub; ++i) {
        float q = static_cast<float>(qb::quant_value(F, blk, j * sub + i));
#pragma unroll
        for (int m = 0; m < M; ++m) {
          float xv = x.at(m, kb + j * sub + i);
          sq[m] = fmaf(q, xv, sq[m]);
          sx[m] += xv;
        }
      }
#pragma unroll
      for (int m = 0; m < M; ++m) acc[m] = fmaf(a, sq[m], fmaf(b, sx[m], acc[m]));
    }
  }
}

template <BlockFormat F, typename T, int M>
__global__ void __launch_bounds__(kWarps * 32) qmv_kernel(const T* __restrict__ x, const uint8_t* __restrict__ w,
                                                           T* __restrict__ y, int rows, int64_t N, int64_t K,
                                                           bool vector_rows) {
  constexpr int kBytes = block_layout(F).bytes, kBlock = block_layout(F).block, U = unroll<F>();
  constexpr int kChunkBlocks = 32 * U, kChunkBytes = kChunkBlocks * kBytes;  // a multiple of 16
  // 16 bytes of padding: ld32 of a chunk's last bytes reads up to 3 past them.
  __shared__ __align__(16) uint8_t stage[kWarps][kChunkBytes + 16];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t nb = K / kBlock, row_bytes = nb * kBytes;
  Rows<M, T> xr{x, K, rows};
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
        // Row starts and chunk sizes are multiples of 16 bytes here.
        const uint4* s4 = reinterpret_cast<const uint4*>(src);
        uint4* d4 = reinterpret_cast<uint4*>(buf);
        for (int i = lane; i < bytes / 16; i += 32) d4[i] = __ldcs(s4 + i);
      } else {
        for (int i = lane; i < bytes; i += 32) buf[i] = src[i];
      }
      __syncwarp();
      for (int u = lane; u < blocks; u += 32) block_dot<F, M, T>(buf + u * kBytes, xr, (b0 + u) * kBlock, acc);
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
void launch_qmv(const T* x, const uint8_t* w, T* y, int64_t M, int64_t N, int64_t K, cudaStream_t s) {
  int64_t row_bytes = K / block_layout(F).block * block_layout(F).bytes;
  bool vector_rows = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  int64_t grid = std::min<int64_t>((N + kWarps - 1) / kWarps, int64_t{device_sm_count()} * 16);
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

// Calls f(std::integral_constant<BlockFormat, F>{}) for the runtime format.
template <typename Fn>
void dispatch_format(BlockFormat f, Fn&& fn) {
  switch (f) {
    case BlockFormat::q4_0: return fn(std::integral_constant<BlockFormat, BlockFormat::q4_0>{});
    case BlockFormat::q4_1: return fn(std::integral_constant<BlockFormat, BlockFormat::q4_1>{});
    case BlockFormat::q5_0: return fn(std::integral_constant<BlockFormat, BlockFormat::q5_0>{});
    case BlockFormat::q5_1: return fn(std::integral_constant<BlockFormat, BlockFormat::q5_1>{});
    case BlockFormat::q8_0: return fn(std::integral_constant<BlockFormat, BlockFormat::q8_0>{});
    case BlockFormat::q2_k: return fn(std::integral_constant<BlockFormat, BlockFormat::q2_k>{});
    case BlockFormat::q3_k: return fn(std::integral_constant<BlockFormat, BlockFormat::q3_k>{});
    case BlockFormat::q4_k: return fn(std::integral_constant<BlockFormat, BlockFormat::q4_k>{});
    case BlockFormat::q5_k: return fn(std::integral_constant<BlockFormat, BlockFormat::q5_k>{});
    case BlockFormat::q6_k: return fn(std::integral_constant<BlockFormat, BlockFormat::q6_k>{});
  }
}

// One thread per decoded weight (coalesced writes; a block's scales are
// re-read from L1 by its threads).
template <BlockFormat F, typename T>
__global__ void dequantize_kernel(const uint8_t* __restrict__ w, T* __restrict__ out, int64_t n) {
  constexpr int kBlock = block_layout(F).block, kBytes = block_layout(F).bytes;
  constexpr int sub = F == BlockFormat::q2_k || F == BlockFormat::q3_k || F == BlockFormat::q6_k ? 16 : 32;
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

// A row-major device copy of `a` in dtype t (or a's own pointer).
const char* row_major(const array& a, Dtype t, const char* op) {
  const char* p = in_ptr(a);
  if (a.dtype() == t && detail::is_row_contiguous(a.shape(), a.desc()->strides)) return p;
  char* dst = static_cast<char*>(scratch(a.size() * size_of(t), op));
  copy_strided(p, a.dtype(), a.shape(), a.desc()->strides, dst, t, row_major_strides(a.shape()), op);
  return dst;
}

}  // namespace
}  // namespace cuda

void BlockQuantize::eval_gpu(const std::vector<array>& inputs, array& out) {
  cuda::allocate(out, "quantize");
  if (out.size() == 0) return;
  const auto* x = reinterpret_cast<const float*>(cuda::row_major(inputs[0], float32, "quantize"));
  auto* y = reinterpret_cast<uint8_t*>(cuda::out_ptr(out));
  int64_t blocks = static_cast<int64_t>(inputs[0].size()) / block_layout(format_).block;
  cudaStream_t s = cuda::current_stream();
  cuda::dispatch_format(format_, [&](auto fc) {
    constexpr BlockFormat F = decltype(fc)::value;
    cuda::quantize_kernel<F><<<cuda::grid_for(blocks, 1, 128), 128, 0, s>>>(x, y, blocks);
  });
  KILN_CUDA_CHECK_LAUNCH("quantize");
}

void BlockDequantize::eval_gpu(const std::vector<array>& inputs, array& out) {
  cuda::allocate(out, "dequantize");
  if (out.size() == 0) return;
  const auto* w = reinterpret_cast<const uint8_t*>(cuda::row_major(inputs[0], uint8, "dequantize"));
  char* y = cuda::out_ptr(out);
  int64_t n = static_cast<int64_t>(out.size());
  cudaStream_t s = cuda::current_stream();
  cuda::dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T> || cuda::is_half_v<T>) {
      cuda::dispatch_format(format_, [&](auto fc) {
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
  const char* x = cuda::row_major(inputs[0], inputs[0].dtype(), "quantized_matmul");
  const auto* w = reinterpret_cast<const uint8_t*>(cuda::row_major(inputs[1], uint8, "quantized_matmul"));
  cuda::dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || cuda::is_half_v<T>) {
      cuda::dispatch_format(format_, [&](auto fc) {
        constexpr BlockFormat F = decltype(fc)::value;
        cuda::launch_qmv<F, T>(reinterpret_cast<const T*>(x), w, reinterpret_cast<T*>(y), rows, n, k, s);
      });
    } else {
      throw Error(std::string("[quantized_matmul] unsupported dtype ") + dtype_name(out.dtype()));
    }
  });
}

}  // namespace kiln
