#pragma once
// Shared by the QMV kernels (quantized.cu, quantized_qmv.cu, quant_blocks_qmv.cu): the
// m16n8k16 tensor-core step on 32-bit fragment registers, the 16-bit
// constants that turn a packed value q into the half-precision number
// magic + q with one logic op, cp.async, and the streaming M = 1 kernels'
// entries (affine here, llama.cpp blocks in quant_blocks_qmv.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/block_format.h"

namespace kiln::cuda {

// d += a * b, m16n8k16, fp32 accumulation.
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

template <typename T>
struct MmaHalf {
  static constexpr bool bf = std::is_same_v<T, __nv_bfloat16>;
  static constexpr uint32_t magic2 = bf ? 0x43004300u : 0x64006400u;  // 128 | q, 1024 | q, two at a time
  static constexpr float magic = bf ? 128.f : 1024.f;
  static constexpr uint32_t one2 = bf ? 0x3F803F80u : 0x3C003C00u;
};

template <typename T>
__device__ __forceinline__ float half_bits_to_float(uint32_t h) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __uint_as_float(h << 16);
  else return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
}

// Asynchronous copies into shared memory (cp.async), and the small
// pieces of the streaming kernels (quantized_qmv.cu, quant_blocks_qmv.cu).
__device__ __forceinline__ void cp_async16(void* s, const void* g) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(s));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(a), "l"(g));
}
template <int B>
__device__ __forceinline__ void cp_async_ca(void* s, const void* g) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(s));
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(a), "l"(g), "n"(B));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
// Waits until at most N groups of cp.async are in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}
__device__ __forceinline__ void cp_async_wait_one() { cp_async_wait<1>(); }

// (a & 0x000F000F) | c in one LOP3 (0xEA = (A & B) | C).
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, 0x000F000F, %2, 0xEA;" : "=r"(d) : "r"(a), "r"(c));
  return d;
}

template <int NW>
__device__ __forceinline__ void lds_words(const uint32_t* p, uint32_t (&v)[NW]) {
  if constexpr (NW == 1) {
    v[0] = p[0];
  } else if constexpr (NW == 2) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    v[0] = u.x, v[1] = u.y;
  } else {
#pragma unroll
    for (int c = 0; c < NW / 4; ++c) {
      const uint4 u = reinterpret_cast<const uint4*>(p)[c];
      v[4 * c] = u.x, v[4 * c + 1] = u.y, v[4 * c + 2] = u.z, v[4 * c + 3] = u.w;
    }
  }
}

// The end of a streaming kernel's CTA (16 rows of w, WARPS warps splitting
// K): lanes tq = 0 of each warp hold its part of rows gid (lo) and gid + 8
// (hi) in B column 0; the CTA sums the warps and writes y[row0 .. row0 + 15].
// Every thread of the CTA calls it (it synchronizes the CTA).
template <int WARPS, typename T>
__device__ __forceinline__ void store_row_sums(float (&red)[WARPS][16], float lo, float hi, T* y, int row0, int N) {
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
  if ((lane & 3) == 0) red[wi][lane >> 2] = lo, red[wi][(lane >> 2) + 8] = hi;
  __syncthreads();
  if (threadIdx.x < 16) {
    float v = 0.f;
#pragma unroll
    for (int k = 0; k < WARPS; ++k) v += red[k][threadIdx.x];
    if (row0 + static_cast<int>(threadIdx.x) < N) y[row0 + threadIdx.x] = static_cast<T>(v);
  }
}

// y [1, N] = x [1, K] . dequantize(w [N, K])^T for bf16 / fp16 x, bits 4 / 8,
// groups of 32 / 64 / 128 (quantized_qmv.cu). Returns false, launching
// nothing, for a shape it does not take (K not a multiple of its chunk of
// groups); the caller then uses the general QMV kernel.
template <typename T>
bool launch_qmv_stream(const T* x, const uint32_t* w, const T* scales, const T* biases, T* y, int N, int K, int bits,
                       int gs, cudaStream_t st);

// The same for llama.cpp's Q4_K rows (w: N rows of K / 256 blocks of 144
// bytes, 16-byte aligned) and M = 1..8 rows of x ([M, K] -> y [M, N]: the
// mma's 8 columns); false when K / 256 is not a multiple of 4.
template <typename T>
bool launch_q4k_stream(const T* x, const uint8_t* w, T* y, int N, int K, int M, cudaStream_t st);

// And Q4_0 / Q8_0 rows (f one of them), M = 1..8; false when K / 32 is not
// a multiple of 32 (K <= 8192) or 64, or the rows are not 16-byte aligned.
template <typename T>
bool launch_small_stream(const T* x, const uint8_t* w, T* y, int N, int K, int M, BlockFormat f, cudaStream_t st);

// Q4_0 / Q8_0 / Q4_K for one row of x rounded to 8 bits, as the CPU rounds
// it (quant_blocks_qmv_i8.cu): float32, bfloat16 or float16 x; false when K
// is not a multiple of 256 or w / x are not 16-byte aligned. Taken when
// cpu::block_x_int8() (KILN_BLOCK_X=float turns it off on both backends).
// w_early: w was complete before the batch being captured began (no kernel
// of this graph writes it), so the kernel may load it before the one ahead
// of it in the stream has finished (cuda_common.h, complete_before_capture).
template <typename T>
bool launch_qmv_i8(const T* x, const uint8_t* w, T* y, int N, int K, BlockFormat f, bool w_early, cudaStream_t st);
// The same products (x rounded the same way) with the weights brought into
// shared memory by the copy engine, a CTA per SM over a contiguous range of
// rows (quant_blocks_qmv_i8.cu); false where it does not apply (K not a
// multiple of 256 or x's codes over 64 KB of shared memory, K > 49,920;
// w / x not 16-byte aligned) or KILN_QMV_BULK=0.
// Tests: 1 takes the bulk kernel wherever it applies, 0 never, -1 (the
// default) as KILN_QMV_BULK says.
void set_qmv_bulk_override(int on);
template <typename T>
bool launch_qmv_bulk(const T* x, const uint8_t* w, T* y, int N, int K, BlockFormat f, bool w_early, cudaStream_t st);

// x of a decode step's product computed from the tensors that feed it
// (FusedBlockQMV, core/primitives_blocks.h), by each CTA of the bulk kernel
// as it rounds x: kPlain x = a; kSwiglu x = silu(a) * b; kAddRmsNorm
// h = a + b (written to h by one CTA), x = rms_norm(h, eps) * w. Every
// pointer 16-byte aligned, a / b / w / h of K elements.
template <typename T>
struct XSource {
  static constexpr int kPlain = 0, kSwiglu = 1, kAddRmsNorm = 2;
  int kind = kPlain;
  const T* a = nullptr;
  const T* b = nullptr;
  const T* w = nullptr;
  T* h = nullptr;
  float eps = 0.f;
};
// The norm's sums are fast_norm.cu's for rows of 256 to 2048 16-byte
// vectors (one 256-thread block a row): the sizes kAddRmsNorm takes.
template <typename T>
constexpr bool x_source_norm_fits(int64_t K) {
  return K % (16 / sizeof(T)) == 0 && K / (16 / sizeof(T)) >= 256 && K / (16 / sizeof(T)) <= 2048;
}
// The bulk kernel on x computed from `x`; false where it does not apply
// (as above, or the norm's K outside x_source_norm_fits).
template <typename T>
bool launch_qmv_bulk(const XSource<T>& x, const uint8_t* w, T* y, int N, int K, BlockFormat f, bool w_early,
                     cudaStream_t st);
// x (and h) into x [K] by one block, the same numbers (for the other kernels).
template <typename T>
void launch_x_source(const XSource<T>& src, int K, T* x, cudaStream_t st);

}  // namespace kiln::cuda
