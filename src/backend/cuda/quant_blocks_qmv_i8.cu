// Q4_0, Q8_0 and Q4_K QMV for one row of x (decode) with x rounded to 8
// bits, as the CPU rounds it (include/kiln/ops.h, quantized_matmul): integer
// dot products (dp4a) of the weights' codes with x's codes. The bulk-copy
// kernel (the last one in this file) is taken for every float dtype of x;
// where it does not apply (or KILN_QMV_BULK=0), the register-pipelined one
// for Q4_K and for Q4_0 / Q8_0 with float32 x (quant_blocks.cu,
// launch_qmv); 16-bit x on Q4_0 / Q8_0 then takes the tensor-core kernels
// of quant_blocks_qmv.cu, which measured as fast or faster than it (below).
//
// Why. The tensor-core streaming kernels spend ~80 warp instructions per 16
// rows x 64 weights (fragment loads, a LOP3 per pair of weights, an mma
// whose B operand carries x in one column of eight, a cp.async ring per
// warp); float32 x had only the CUDA-core kernel of quant_blocks.cu (~5
// instructions per weight, 0.17 of copy). Here:
// - each CTA rounds x once into shared memory (llama.cpp's Q8_0 of x with
//   a float d: q = rint(x * (127 / amax)), d = amax / 127, the CPU's exact
//   float steps, so both backends see the same codes) with each block's sum
//   of codes (Q4_0's offset 8 and Q4_K's mins enter through it);
// - a lane loads 256 weights at a time straight into registers (144 bytes:
//   8 Q4_0 blocks or one Q4_K super-block; 136 for 4 Q8_0 blocks), with
//   the next unit's bytes loading while it computes: no shared-memory ring;
// - 4 weights cost one dp4a plus, for nibbles, one LOP3 (and one shift for
//   the high ones);
// - TPR lanes share a row, 32 / TPR rows per warp task; TPR is chosen per
//   shape so that the tasks fit the resident warps in one round;
// - programmatic dependent launch: the CTAs start while the kernel ahead of
//   them finishes, loading weights that were complete before the graph
//   began, and wait (griddepcontrol.wait) only before reading x.
// Measured on an H100 (2026-12-05, a lab timing 8 QMVs on distinct weights
// per graph, bf16 x; us for the Llama-3-8B decode shapes N x K = 6144 x
// 4096, 4096 x 4096, 28672 x 4096, 4096 x 14336, 128256 x 4096):
//   Q4_K  this kernel 7.6 / 5.7 / 28.6 / 15.4 / 115   (without PDL 9.6 / 6.7 / 30.4 / 17.2 / 115)
//         tensor-core 8.8 / 7.0 / 30.9 / 18.1 / 118
//   Q4_0  this kernel 7.5-9.0 / 5.7-6.0 / 28.4 / 15.2-16.5 / 114, tensor-core 8.5 / 6.0 / 28.4 / 17.0 / 110
//   Q8_0  this kernel 13.5 / 8.5 / 56.2 / 26.6 / 224, tensor-core 13.4 / 9.7 / 49.2 / 29.0 / 199
// and in `kiln bench llm` (tg64, 8B shape) Q4_0 / Q8_0 decoded 3-10% slower
// with this kernel than with the tensor-core ones, Q4_K level or faster.
// float32 x, the sum over one token's QMVs (32 layers + lm_head), this
// kernel against quant_blocks.cu's CUDA-core one: Q4_0 2.02 / 4.27 ms,
// Q8_0 3.65 / 5.18, Q4_K 2.04 / 6.55.
//
// The bulk-copy kernel below (qmv_bulk_kernel, the default where it
// applies) computes the same sums from shared memory that Hopper's copy
// engine fills: ncu showed the kernel above waiting on its loads (L1TEX
// scoreboard stalls, 25% theoretical occupancy at 122 registers, DRAM 52%
// busy), bytes in flight being bounded by registers. Same H100, same call,
// `kiln bench --device gpu`, bf16 x, us (fraction of copy bandwidth) for
// N x K = 14336 x 4096 / 4096 x 4096 / 6144 x 4096 / 28672 x 4096 / 4096 x 14336,
// before (KILN_QMV_BULK=0: Q4_K on the kernel above, Q4_0 / Q8_0 on the
// tensor-core kernels) and with this kernel:
//   Q4_K  17.0 / 6.7 / 10.0 / 30.6 / 17.4 -> 13.5 / 6.9 / 7.5 / 25.0 / 15.7 (0.81 / 0.45 / 0.62 / 0.87 / 0.70)
//   Q8_0  27.2 / 10.9 / 14.6 / 48.2 / 29.7 -> 23.2 / 8.4 / 11.0 / 43.2 / 24.6 (0.89 / 0.70 / 0.80 / 0.96 / 0.84)
//   Q4_0  19.1 / 7.5 / 9.8 / 29.2 / 18.7 -> 13.7 / 6.7 / 8.1 / 24.9 / 15.0 (0.80 / 0.47 / 0.58 / 0.87 / 0.73)
// The 8B decode (tg64) gained 0-4% on Q4_K, 4-6% on Q8_0, 0-2.5% on Q4_0
// over two device calls (docs/performance.md, session 31): its other ~20
// kernels per layer take about half of a token's GPU time.
// x's codes for 256 weights sit 336 bytes apart (256 codes, 8 x (d, sum),
// 16 bytes of padding): the TPR lanes of a row read 16-byte pieces 336
// bytes apart, which land on distinct banks.
#include <atomic>
#include <cfloat>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/quantized_qmv.cuh"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kXItem = 336;  // bytes of x per 256 weights in shared memory
constexpr uint32_t kLo = 0x0F0F0F0Fu;

// A lane's unit of work, 16-byte aligned in every row: 8 Q4_0 blocks (144
// bytes), one Q4_K super-block (144), or 4 Q8_0 blocks (136 bytes, 8-byte
// aligned: 8 blocks would hold 68 registers, twice that with the next item
// in flight).
template <BlockFormat F>
constexpr int item_weights() {
  return F == BlockFormat::q8_0 ? 128 : 256;
}
template <BlockFormat F>
constexpr int item_bytes() {
  return F == BlockFormat::q8_0 ? 136 : 144;
}

// Word k of an item as loaded: 4 bytes at byte offset O (a multiple of 2),
// O known at compile time once the loops are unrolled.
template <int NW>
__device__ __forceinline__ uint32_t word_at(const uint32_t (&w)[NW], int o) {
  return o % 4 == 0 ? w[o / 4] : __funnelshift_r(w[o / 4], w[o / 4 + 1], 16);
}
template <int NW>
__device__ __forceinline__ float half_at(const uint32_t (&w)[NW], int o) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(w[o / 4] >> (8 * (o % 4)))));
}
template <int NW>
__device__ __forceinline__ int byte_at(const uint32_t (&w)[NW], int o) {
  return static_cast<int>((w[o / 4] >> (8 * (o % 4))) & 0xFFu);
}

// Sum over an item's weights of w * x (x = d * q per 32): w the item's
// words, xq and xds its blocks of x in shared memory (codes; d and the sum
// of codes as int bits).
template <BlockFormat F, int NW>
__device__ __forceinline__ float dot_item(const uint32_t (&w)[NW], const int4* xq, const float2* xds) {
  float acc = 0.f;
  if constexpr (F == BlockFormat::q4_0) {  // 18-byte blocks: d, 16 bytes of nibbles (j, j + 16)
#pragma unroll
    for (int b = 0; b < 8; ++b) {
      const int o = 18 * b;
      const int4 x0 = xq[2 * b], x1 = xq[2 * b + 1];
      const float2 ds = xds[b];
      const uint32_t q0 = word_at(w, o + 2), q1 = word_at(w, o + 6), q2 = word_at(w, o + 10), q3 = word_at(w, o + 14);
      int s = -8 * __float_as_int(ds.y);
      s = __dp4a(static_cast<int>(q0 & kLo), x0.x, s);
      s = __dp4a(static_cast<int>(q1 & kLo), x0.y, s);
      s = __dp4a(static_cast<int>(q2 & kLo), x0.z, s);
      s = __dp4a(static_cast<int>(q3 & kLo), x0.w, s);
      s = __dp4a(static_cast<int>((q0 >> 4) & kLo), x1.x, s);
      s = __dp4a(static_cast<int>((q1 >> 4) & kLo), x1.y, s);
      s = __dp4a(static_cast<int>((q2 >> 4) & kLo), x1.z, s);
      s = __dp4a(static_cast<int>((q3 >> 4) & kLo), x1.w, s);
      acc = fmaf(half_at(w, o) * ds.x, static_cast<float>(s), acc);
    }
  } else if constexpr (F == BlockFormat::q8_0) {  // 34-byte blocks: d, 32 signed codes
#pragma unroll
    for (int b = 0; b < NW * 4 / 34; ++b) {
      const int o = 34 * b;
      const int4 x0 = xq[2 * b], x1 = xq[2 * b + 1];
      int s = 0;
      s = __dp4a(static_cast<int>(word_at(w, o + 2)), x0.x, s);
      s = __dp4a(static_cast<int>(word_at(w, o + 6)), x0.y, s);
      s = __dp4a(static_cast<int>(word_at(w, o + 10)), x0.z, s);
      s = __dp4a(static_cast<int>(word_at(w, o + 14)), x0.w, s);
      s = __dp4a(static_cast<int>(word_at(w, o + 18)), x1.x, s);
      s = __dp4a(static_cast<int>(word_at(w, o + 22)), x1.y, s);
      s = __dp4a(static_cast<int>(word_at(w, o + 26)), x1.z, s);
      s = __dp4a(static_cast<int>(word_at(w, o + 30)), x1.w, s);
      acc = fmaf(half_at(w, o) * xds[b].x, static_cast<float>(s), acc);
    }
  } else {  // Q4_K: d, dmin, 12 bytes of 6-bit scales and mins, 4 x 32 bytes of nibbles
    const float d = half_at(w, 0), dmin = half_at(w, 2);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      int sc, m;  // llama.cpp's get_scale_min_k4 on bytes 4..15
      if (j < 4) {
        sc = byte_at(w, 4 + j) & 63, m = byte_at(w, 8 + j) & 63;
      } else {
        sc = (byte_at(w, 8 + j) & 0xF) | ((byte_at(w, j) >> 6) << 4);
        m = (byte_at(w, 8 + j) >> 4) | ((byte_at(w, 4 + j) >> 6) << 4);
      }
      const int4 x0 = xq[2 * j], x1 = xq[2 * j + 1];
      const float2 ds = xds[j];
      const int base = 4 + 8 * (j / 2), sh = 4 * (j % 2);
      int s = 0;
      s = __dp4a(static_cast<int>((w[base + 0] >> sh) & kLo), x0.x, s);
      s = __dp4a(static_cast<int>((w[base + 1] >> sh) & kLo), x0.y, s);
      s = __dp4a(static_cast<int>((w[base + 2] >> sh) & kLo), x0.z, s);
      s = __dp4a(static_cast<int>((w[base + 3] >> sh) & kLo), x0.w, s);
      s = __dp4a(static_cast<int>((w[base + 4] >> sh) & kLo), x1.x, s);
      s = __dp4a(static_cast<int>((w[base + 5] >> sh) & kLo), x1.y, s);
      s = __dp4a(static_cast<int>((w[base + 6] >> sh) & kLo), x1.z, s);
      s = __dp4a(static_cast<int>((w[base + 7] >> sh) & kLo), x1.w, s);
      // w = a q + b per sub-block (a = d sc, b = -dmin m): a d_x s + b d_x sum q.
      const float dx = ds.x;
      acc = fmaf(d * static_cast<float>(sc) * dx, static_cast<float>(s), acc);
      acc = fmaf(-dmin * static_cast<float>(m) * dx, static_cast<float>(__float_as_int(ds.y)), acc);
    }
  }
  return acc;
}

// Rounds 32 values of x (v) to codes (q) and (d, sum of codes) (ds),
// exactly as the CPU's round_block (quant_blocks_qmv_int8.cpp): a block
// with a NaN or an infinity gets d = NaN, one whose 127 / amax overflows
// (all zero) rounds to zero.
__device__ __forceinline__ void round_x_values(const float (&v)[32], uint8_t* q, float2* ds) {
  float amax = 0.f;
  bool finite = true;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const float a = fabsf(v[i]);
    amax = fmaxf(amax, a);
    finite = finite && a < INFINITY;  // false for NaN too
  }
  const float s = __fdiv_rn(127.f, amax);
  uint32_t packed[8] = {};
  int sum = 0;
  float d = finite ? 0.f : NAN;
  if (finite && s <= FLT_MAX) {
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int c = __float2int_rn(__fmul_rn(v[i], s));
      sum += c;
      packed[i / 4] |= (static_cast<uint32_t>(c) & 0xFFu) << (8 * (i % 4));
    }
    d = __fdiv_rn(amax, 127.f);
  }
  reinterpret_cast<uint4*>(q)[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  reinterpret_cast<uint4*>(q)[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
  *ds = make_float2(d, __int_as_float(sum));
}

// 32 elements of T at src (16-byte aligned) as floats.
template <typename T>
__device__ __forceinline__ void load32(const T* __restrict__ src, float (&v)[32]) {
  constexpr int kPer16 = 16 / sizeof(T);
#pragma unroll
  for (int c = 0; c < 32 / kPer16; ++c) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(src) + c);
    const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int i = 0; i < kPer16; ++i) v[c * kPer16 + i] = static_cast<float>(e[i]);
  }
}

template <typename T>
__device__ __forceinline__ void round_x_block(const T* __restrict__ src, uint8_t* q, float2* ds) {
  float v[32];
  load32(src, v);
  round_x_values(v, q, ds);
}

// ---- x computed from the tensors that feed it (XSource, quantized_qmv.cuh) ----
// Each CTA computes the 32 values of a block of x as it rounds them, with
// the arithmetic of the kernels it stands for, so that the fused product
// gives the unfused one's numbers bit for bit: compile's SwiGLU (silu, then
// the multiply, each rounded to T) and fast_norm.cu's add + RMS norm of one
// row by a 256-thread block (the same elements per thread, the same order
// of sums, the same shuffles).

// add_rms_norm's 1 / rms of h = a + b over K elements, by the whole
// 256-thread block (every thread gets it); `write_h` stores h (rounded to
// T) to src.h. K / (16 / sizeof(T)) between 256 and 2048 (where
// fast_norm.cu takes one 256-thread block per row).
template <typename T>
__device__ float rms_inverse(const XSource<T>& src, int K, bool write_h) {
  constexpr int E = 16 / sizeof(T);
  const int nv = K / E;
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int idx = static_cast<int>(threadIdx.x) + i * 256;
    if (idx < nv) {
      const uint4 ua = __ldg(reinterpret_cast<const uint4*>(src.a) + idx);
      const uint4 ub = __ldg(reinterpret_cast<const uint4*>(src.b) + idx);
      uint4 uh;
      const T* ea = reinterpret_cast<const T*>(&ua);
      const T* eb = reinterpret_cast<const T*>(&ub);
      T* eh = reinterpret_cast<T*>(&uh);
#pragma unroll
      for (int e = 0; e < E; ++e) {
        eh[e] = convert<T>(to_compute(ea[e]) + to_compute(eb[e]));
        const float v = to_compute(eh[e]);
        s += v * v;
      }
      if (write_h) reinterpret_cast<uint4*>(src.h)[idx] = uh;
    }
  }
  return rsqrtf(block_sum(s) / static_cast<float>(K) + src.eps);
}

// The 32 values of x from element `first` (inv: rms_inverse's, for kind 2).
template <int Kind, typename T>
__device__ __forceinline__ void x_values(const XSource<T>& src, size_t first, float inv, float (&v)[32]) {
  if constexpr (Kind == XSource<T>::kPlain) {
    load32(src.a + first, v);
    return;
  }
  float a[32], b[32];
  load32(src.a + first, a);
  load32(src.b + first, b);
  if constexpr (Kind == XSource<T>::kSwiglu) {
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const float g = to_compute(convert<T>(ko::silu_op::apply(a[i])));
      v[i] = to_compute(convert<T>(ko::multiply_op::apply(g, b[i])));
    }
    return;
  }
  if constexpr (Kind != XSource<T>::kAddRmsNorm) return;
  float w[32];
  load32(src.w + first, w);
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const float h = to_compute(convert<T>(a[i] + b[i]));
    const float n = to_compute(convert<T>(h * inv));
    v[i] = to_compute(convert<T>(n * w[i]));
  }
}

// Lane h of a row takes items h, h + TPR, ...: `rounds` of them per task
// (warp-uniform; lanes past the row's end idle). A unit (task, round) is
// computed while the next one's bytes are loading.
template <BlockFormat F, typename T, int TPR>
__global__ void __launch_bounds__(kThreads, 2) qmv_i8_kernel(const T* __restrict__ x, const uint8_t* __restrict__ w,
                                                             T* __restrict__ y, int N, int K, bool w_early) {
  extern __shared__ __align__(16) uint8_t xs[];
  constexpr int R = 32 / TPR, NW = item_bytes<F>() / 4, BPI = item_weights<F>() / 32;
  using Piece = std::conditional_t<item_bytes<F>() % 16 == 0, uint4, uint2>;
  constexpr int PW = sizeof(Piece) / 4;
  const int lane = threadIdx.x & 31, h = lane % TPR, r = lane / TPR;
  const int items = K / item_weights<F>(), tasks = (N + R - 1) / R, rounds = (items + TPR - 1) / TPR;
  const size_t row_bytes = static_cast<size_t>(items) * item_bytes<F>();
  const int warps = gridDim.x * (kThreads / 32);
  int t = blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5), j = 0;

  auto load = [&](uint32_t(&wv)[NW], int task, int round) {
    const int i = h + round * TPR;
    if (i >= items) return;
    const int row = min(task * R + r, N - 1);
    const Piece* p = reinterpret_cast<const Piece*>(w + row * row_bytes + static_cast<size_t>(i) * item_bytes<F>());
#pragma unroll
    for (int c = 0; c < NW / PW; ++c) *reinterpret_cast<Piece*>(wv + PW * c) = __ldcs(p + c);
  };
  auto dot = [&](const uint32_t(&wv)[NW], int round) {
    const int i = h + round * TPR;
    if (i >= items) return 0.f;
    const int b = i * BPI;  // x's first block
    const uint8_t* g = xs + (b / 8) * kXItem;
    return dot_item<F, NW>(wv, reinterpret_cast<const int4*>(g + (b % 8) * 32),
                           reinterpret_cast<const float2*>(g + 256) + b % 8);
  };
  float acc = 0.f;
  // Ends unit (t, j): the row's sum when it was the task's last round; moves to the next unit.
  auto advance = [&]() {
    if (j == rounds - 1) {
#pragma unroll
      for (int o = TPR / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      const int row = t * R + r;
      if (h == 0 && row < N) y[row] = static_cast<T>(acc);
      acc = 0.f, j = 0, t += warps;
    } else {
      ++j;
    }
  };
  auto next_t = [&]() { return j == rounds - 1 ? t + warps : t; };
  auto next_j = [&]() { return j == rounds - 1 ? 0 : j + 1; };

  uint32_t wa[NW], wb[NW];
  // The first unit's bytes are on their way while x is rounded; with
  // w_early (w was complete before the graph began) already while the
  // kernel before this one finishes (programmatic dependent launch: the
  // wait returns once that kernel's writes are visible).
  if (w_early && t < tasks) load(wa, t, j);
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (!w_early && t < tasks) load(wa, t, j);
  for (int b = threadIdx.x; b < K / 32; b += kThreads) {
    uint8_t* item = xs + (b / 8) * kXItem;
    round_x_block(x + static_cast<size_t>(b) * 32, item + (b % 8) * 32, reinterpret_cast<float2*>(item + 256) + b % 8);
  }
  __syncthreads();
  asm volatile("griddepcontrol.launch_dependents;");

  while (t < tasks) {
    if (next_t() < tasks) load(wb, next_t(), next_j());
    acc += dot(wa, j);
    advance();
    if (t >= tasks) break;
    if (next_t() < tasks) load(wa, next_t(), next_j());
    acc += dot(wb, j);
    advance();
  }
}

// ---- The bulk-copy kernel (Hopper's copy engine feeds shared memory) ----
// Each CTA takes a contiguous range of rows (one CTA per SM, rows split to
// within one), so its weights are one contiguous run of bytes. One thread
// asks the copy engine for whole rows at a time (cp.async.bulk, `stages`
// chunks of `rows` rows in flight, each completing on its own mbarrier);
// the CTA's groups of TPR lanes compute from shared memory. Bytes in flight
// no longer depend on registers (the kernel above holds at most two 144-byte
// items per lane), and with w_early the first chunks (for the decode's
// 4096-wide matrices, a CTA's whole share) are requested before the kernel
// ahead of it has finished.

// Items of the bulk kernel: 256 weights each (8 Q8_0 blocks: 272 bytes).
template <BlockFormat F>
constexpr int bulk_item_bytes() {
  return F == BlockFormat::q8_0 ? 272 : 144;
}
constexpr int kBulkThreads = 256;

template <BlockFormat F, typename T, int TPR, int Kind>
__global__ void __launch_bounds__(kBulkThreads, 1)
    qmv_bulk_kernel(const XSource<T> src, const uint8_t* __restrict__ w, T* __restrict__ y, int N, int K,
                    int rows_per_chunk, int stages, bool w_early) {
  extern __shared__ __align__(128) uint8_t smem[];
  constexpr int IB = bulk_item_bytes<F>(), NW = IB / 4, G = kBulkThreads / TPR;
  const int items = K / 256;
  const size_t row_bytes = static_cast<size_t>(items) * IB;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  uint8_t* xs = smem + 128;
  uint8_t* ring = xs + ((static_cast<size_t>(items) * kXItem + 127) / 128) * 128;
  const size_t chunk_bytes = static_cast<size_t>(rows_per_chunk) * row_bytes;
  const int r0 = static_cast<int>(int64_t{N} * blockIdx.x / gridDim.x);
  const int r1 = static_cast<int>(int64_t{N} * (blockIdx.x + 1) / gridDim.x);
  const int chunks = (r1 - r0 + rows_per_chunk - 1) / rows_per_chunk;
  auto fetch = [&](int c) {  // chunk c into its stage
    const int first = r0 + c * rows_per_chunk, n = min(rows_per_chunk, r1 - first);
    bulk::fetch(ring + static_cast<size_t>(c % stages) * chunk_bytes, w + first * row_bytes,
                static_cast<uint32_t>(n * row_bytes), &full[c % stages]);
  };
  bulk::start_ring(full, stages, chunks, w_early, fetch);
  float inv = 0.f;
  if constexpr (Kind == XSource<T>::kAddRmsNorm) inv = rms_inverse(src, K, blockIdx.x == 0);
  for (int b = threadIdx.x; b < K / 32; b += kBulkThreads) {
    uint8_t* item = xs + (b / 8) * kXItem;
    float v[32];
    x_values<Kind>(src, static_cast<size_t>(b) * 32, inv, v);
    round_x_values(v, item + (b % 8) * 32, reinterpret_cast<float2*>(item + 256) + b % 8);
  }
  __syncthreads();  // also publishes the barriers' initialization
  asm volatile("griddepcontrol.launch_dependents;");

  const int g = threadIdx.x / TPR, h = threadIdx.x % TPR;
  for (int c = 0; c < chunks; ++c) {
    bulk::wait(&full[c % stages], (c / stages) & 1);
    const uint8_t* chunk = ring + static_cast<size_t>(c % stages) * chunk_bytes;
    const int first = r0 + c * rows_per_chunk, n = min(rows_per_chunk, r1 - first);
    for (int p = 0; p < (n + G - 1) / G; ++p) {  // uniform over the CTA: every lane reaches the shuffles
      const int row = p * G + g;
      float acc = 0.f;
      if (row < n) {
        for (int i = h; i < items; i += TPR) {
          const uint4* src = reinterpret_cast<const uint4*>(chunk + row * row_bytes + static_cast<size_t>(i) * IB);
          uint32_t wv[NW];
#pragma unroll
          for (int q = 0; q < NW / 4; ++q) {
            const uint4 u = src[q];
            wv[4 * q] = u.x, wv[4 * q + 1] = u.y, wv[4 * q + 2] = u.z, wv[4 * q + 3] = u.w;
          }
          const uint8_t* xi = xs + static_cast<size_t>(i) * kXItem;
          acc += dot_item<F, NW>(wv, reinterpret_cast<const int4*>(xi), reinterpret_cast<const float2*>(xi + 256));
        }
      }
#pragma unroll
      for (int o = TPR / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (row < n && h == 0) y[first + row] = static_cast<T>(acc);
    }
    __syncthreads();  // every lane is done with this stage
    if (threadIdx.x == 0 && c + stages < chunks) {
      bulk::fence_before_refill();
      fetch(c + stages);
    }
  }
}

// Resident CTAs per SM of a kernel at a shared-memory size (asked once per
// pair; the attribute for more than 48 KB set on the way).
int resident_ctas(const void* kernel, size_t smem) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, size_t>, int> known;
  std::lock_guard lock(mutex);
  auto it = known.find({kernel, smem});
  if (it != known.end()) return it->second;
  int n = 0;
  if (smem > 48 * 1024 && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem)) != cudaSuccess) {
    cudaGetLastError();
  } else if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, smem) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  known.emplace(std::pair{kernel, smem}, n);
  return n;
}

template <BlockFormat F, typename T, int TPR>
bool launch_tpr(const T* x, const uint8_t* w, T* y, int N, int K, bool w_early, cudaStream_t st) {
  auto kernel = qmv_i8_kernel<F, T, TPR>;
  const size_t smem = static_cast<size_t>(K / 256) * kXItem;
  const int per_sm = resident_ctas(reinterpret_cast<const void*>(kernel), smem);
  if (per_sm <= 0) return false;
  const int tasks = (N + 32 / TPR - 1) / (32 / TPR);
  const int ctas = std::min((tasks + kThreads / 32 - 1) / (kThreads / 32), per_sm * std::max(device_sm_count(), 1));
  return bulk::launch_early(kernel, ctas, kThreads, smem, st, x, w, y, N, K, w_early);
}

// Lanes per row: the most (up to one lane per 256 weights) whose tasks the
// resident warps take in one round; 4 when none does.
template <BlockFormat F, typename T>
bool launch_fmt(const T* x, const uint8_t* w, T* y, int N, int K, bool w_early, cudaStream_t st) {
  const int items = K / item_weights<F>();
  const int per_sm =
      resident_ctas(reinterpret_cast<const void*>(qmv_i8_kernel<F, T, 8>), static_cast<size_t>(K / 256) * kXItem);
  const int64_t warps = int64_t{per_sm} * std::max(device_sm_count(), 1) * (kThreads / 32);
  auto fits = [&](int tpr) { return tpr <= items && (int64_t{N} * tpr + 31) / 32 <= warps; };
  if (fits(32)) return launch_tpr<F, T, 32>(x, w, y, N, K, w_early, st);
  if (fits(16)) return launch_tpr<F, T, 16>(x, w, y, N, K, w_early, st);
  if (fits(8)) return launch_tpr<F, T, 8>(x, w, y, N, K, w_early, st);
  return launch_tpr<F, T, 4>(x, w, y, N, K, w_early, st);
}

// The bulk kernel's shapes: chunks of whole rows near kChunkTarget bytes
// (a multiple of the CTA's row groups when rows are small), as many as fit
// in kRingBytes (at least two); one CTA per SM.
constexpr size_t kChunkTarget = 32 * 1024, kRingBytes = 112 * 1024, kRingMax = 160 * 1024;

template <BlockFormat F, typename T, int TPR, int Kind>
bool launch_bulk_tpr(const XSource<T>& x, const uint8_t* w, T* y, int N, int K, bool w_early, cudaStream_t st) {
  constexpr int G = kBulkThreads / TPR;
  const size_t row_bytes = static_cast<size_t>(K / 256) * bulk_item_bytes<F>();
  const int sms = std::max(device_sm_count(), 1);
  const int ctas = std::min(N, sms);
  const int rows_cta = (N + ctas - 1) / ctas;
  int rows = static_cast<int>(std::max<size_t>(1, kChunkTarget / row_bytes));
  if (rows >= G) {
    rows -= rows % G;
  } else if (2 * G * row_bytes <= kRingMax) {
    rows = G;  // long rows: a row for every group of lanes, two chunks in flight
  }
  rows = std::min(rows, rows_cta);
  const size_t chunk_bytes = rows * row_bytes;
  const int chunks = (rows_cta + rows - 1) / rows;
  const int stages = static_cast<int>(
      std::min<size_t>(chunks, std::min(std::max<size_t>(2, kRingBytes / chunk_bytes), kRingMax / chunk_bytes)));
  if (stages < std::min(chunks, 2) || stages < 1) return false;
  const size_t smem = 128 + ((static_cast<size_t>(K / 256) * kXItem + 127) / 128) * 128 + stages * chunk_bytes;
  auto kernel = qmv_bulk_kernel<F, T, TPR, Kind>;
  if (smem > 227 * 1024) return false;
  static std::mutex mutex;
  static size_t granted = 0;  // the largest dynamic shared memory asked of this kernel so far
  {
    std::lock_guard lock(mutex);
    if (smem > 48 * 1024 && smem > granted) {
      if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024) != cudaSuccess) {
        cudaGetLastError();
        return false;
      }
      granted = 227 * 1024;
    }
  }
  return bulk::launch_early(kernel, ctas, kBulkThreads, smem, st, x, w, y, N, K, rows, stages, w_early);
}

// Lanes per row: enough for one item each (K / 256 items), 8 to 32.
template <BlockFormat F, typename T>
bool launch_bulk(const XSource<T>& x, const uint8_t* w, T* y, int N, int K, bool w_early, cudaStream_t st) {
  const int items = K / 256;
  auto by_kind = [&](auto tpr) {
    constexpr int TPR = decltype(tpr)::value;
    if (x.kind == XSource<T>::kSwiglu)
      return launch_bulk_tpr<F, T, TPR, XSource<T>::kSwiglu>(x, w, y, N, K, w_early, st);
    if (x.kind == XSource<T>::kAddRmsNorm) {
      return launch_bulk_tpr<F, T, TPR, XSource<T>::kAddRmsNorm>(x, w, y, N, K, w_early, st);
    }
    return launch_bulk_tpr<F, T, TPR, XSource<T>::kPlain>(x, w, y, N, K, w_early, st);
  };
  if (items > 16) return by_kind(std::integral_constant<int, 32>{});
  if (items > 8) return by_kind(std::integral_constant<int, 16>{});
  return by_kind(std::integral_constant<int, 8>{});
}

std::atomic<int> bulk_override{-1};

bool bulk_enabled() {
  static const bool env_on = [] {
    const char* e = std::getenv("KILN_QMV_BULK");
    return !(e && std::string(e) == "0");
  }();
  const int o = bulk_override.load(std::memory_order_relaxed);
  return o < 0 ? env_on : o == 1;
}

// fn(std::integral_constant<BlockFormat, F>) for the three formats these
// kernels take; false for the others.
template <typename Fn>
bool by_format(BlockFormat f, Fn&& fn) {
  switch (f) {
    case BlockFormat::q4_0:
      return fn(std::integral_constant<BlockFormat, BlockFormat::q4_0>{});
    case BlockFormat::q8_0:
      return fn(std::integral_constant<BlockFormat, BlockFormat::q8_0>{});
    case BlockFormat::q4_k:
      return fn(std::integral_constant<BlockFormat, BlockFormat::q4_k>{});
    default:
      return false;
  }
}

}  // namespace

template <typename T>
bool launch_qmv_i8(const T* x, const uint8_t* w, T* y, int N, int K, BlockFormat f, bool w_early, cudaStream_t st) {
  if (K % 256 != 0 || K / 256 * kXItem > 200 * 1024 || reinterpret_cast<uintptr_t>(w) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(x) % 16 != 0) {
    return false;
  }
  return by_format(f, [&](auto fc) { return launch_fmt<decltype(fc)::value, T>(x, w, y, N, K, w_early, st); });
}

void set_qmv_bulk_override(int on) { bulk_override.store(on, std::memory_order_relaxed); }

template <typename T>
bool launch_qmv_bulk(const XSource<T>& x, const uint8_t* w, T* y, int N, int K, BlockFormat f, bool w_early,
                     cudaStream_t st) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!bulk_enabled() || device_sm_count() <= 0 || K % 256 != 0 || K / 256 * kXItem > 64 * 1024 || !aligned(w) ||
      !aligned(x.a) || !aligned(x.b) || !aligned(x.w) || !aligned(x.h)) {
    return false;
  }
  if (x.kind == XSource<T>::kAddRmsNorm && !x_source_norm_fits<T>(K)) return false;
  return by_format(f, [&](auto fc) { return launch_bulk<decltype(fc)::value, T>(x, w, y, N, K, w_early, st); });
}

template <typename T>
bool launch_qmv_bulk(const T* x, const uint8_t* w, T* y, int N, int K, BlockFormat f, bool w_early, cudaStream_t st) {
  XSource<T> src;
  src.a = x;
  return launch_qmv_bulk<T>(src, w, y, N, K, f, w_early, st);
}

// One block computes x (and h) into `x` for the products that cannot take
// the source in their prologue (launch_x_source).
template <typename T, int Kind>
__global__ void __launch_bounds__(256) x_source_kernel(const XSource<T> src, int K, T* __restrict__ x) {
  float inv = 0.f;
  if constexpr (Kind == XSource<T>::kAddRmsNorm) inv = rms_inverse(src, K, true);
  for (int b = threadIdx.x; b < K / 32; b += 256) {
    float v[32];
    x_values<Kind>(src, static_cast<size_t>(b) * 32, inv, v);
#pragma unroll
    for (int i = 0; i < 32; ++i) x[static_cast<size_t>(b) * 32 + i] = static_cast<T>(v[i]);
  }
}

template <typename T>
void launch_x_source(const XSource<T>& src, int K, T* x, cudaStream_t st) {
  if (src.kind == XSource<T>::kSwiglu)
    x_source_kernel<T, XSource<T>::kSwiglu><<<1, 256, 0, st>>>(src, K, x);
  else if (src.kind == XSource<T>::kAddRmsNorm)
    x_source_kernel<T, XSource<T>::kAddRmsNorm><<<1, 256, 0, st>>>(src, K, x);
  else
    x_source_kernel<T, XSource<T>::kPlain><<<1, 256, 0, st>>>(src, K, x);
}

#define KILN_QMV_SOURCE(T)                                                                                            \
  template bool launch_qmv_bulk<T>(const XSource<T>&, const uint8_t*, T*, int, int, BlockFormat, bool, cudaStream_t); \
  template void launch_x_source<T>(const XSource<T>&, int, T*, cudaStream_t);
KILN_QMV_SOURCE(float)
KILN_QMV_SOURCE(__nv_bfloat16)
KILN_QMV_SOURCE(__half)
#undef KILN_QMV_SOURCE
template bool launch_qmv_bulk<float>(const float*, const uint8_t*, float*, int, int, BlockFormat, bool, cudaStream_t);
template bool launch_qmv_bulk<__nv_bfloat16>(const __nv_bfloat16*, const uint8_t*, __nv_bfloat16*, int, int,
                                             BlockFormat, bool, cudaStream_t);
template bool launch_qmv_bulk<__half>(const __half*, const uint8_t*, __half*, int, int, BlockFormat, bool,
                                      cudaStream_t);
template bool launch_qmv_i8<float>(const float*, const uint8_t*, float*, int, int, BlockFormat, bool, cudaStream_t);
template bool launch_qmv_i8<__nv_bfloat16>(const __nv_bfloat16*, const uint8_t*, __nv_bfloat16*, int, int, BlockFormat,
                                           bool, cudaStream_t);
template bool launch_qmv_i8<__half>(const __half*, const uint8_t*, __half*, int, int, BlockFormat, bool, cudaStream_t);

}  // namespace kiln::cuda
