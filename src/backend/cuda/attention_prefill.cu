// Prefill attention on tensor cores, FlashAttention-2 style (kiln bench:
// sdpa_prefill, sdpa_prefill_causal).
//
// Two kernels. head_dim 64 and 128 take the pipelined kernel
// (prefill_tc_kernel); 80, 96 and 256 keep the first one (sdpa_prefill_kernel).
//
// Both: a warp owns 16 query rows of one head for the whole KV length, so the
// softmax statistics of a row never leave the four threads that hold it. Per
// 64-key tile: S = Q K^T with mma.sync m16n8k16 (float32 accumulators),
// scale and masks in registers, the online softmax update (row max and sum
// across the quad of threads by shuffles), then P V with P taken straight
// from the S accumulators (the C layout of two adjacent 8-wide tiles is the
// A layout of one 16-wide step) rounded to the input type. Causal: tiles
// past the block's last row are skipped (a block of rows that sees no key at
// all, q_len > kv_len, keeps every key and averages V); the diagonal tiles
// are masked per element.
//
// The pipelined kernel adds: K/V tiles double-buffered in shared memory by
// cp.async (tile t + 1 in flight while tile t is computed), every fragment
// read by ldmatrix (.trans for V), Q fragments loaded once into registers,
// exp2 with the scale folded in, longest causal query tiles launched first,
// and 16-byte output stores staged through shared memory. Blocks: d 128, 4
// warps (64 rows), 2 blocks per SM; d 64, 8 warps (128 rows), 2 per SM.
//
// Measured (H200, 2026-12-02, standalone lab, CUDA events, median of 20;
// b1 h32 s4096 bf16; causal FLOPs counted as half of 4 s^2 d h; torch 2.11
// F.scaled_dot_product_attention in the same run):
//   d    mask     pipelined          old kernel         torch
//   128  causal   664 us 207 TF/s    1400 us  98 TF/s   259 us 531 TF/s
//   128  none    1292 us 213 TF/s    2511 us 109 TF/s   409 us 672 TF/s
//   64   causal   397 us 173 TF/s     737 us  93 TF/s   182 us 379 TF/s
//   64   none     747 us 184 TF/s    1222 us 112 TF/s   291 us 472 TF/s
// Tried in the same run (d 128): 8 warps x 16 rows (1 block/SM, 202-213
// TF/s), 4 warps x 32 rows (FA2's 128 x 64; 255 registers and spills, 147),
// 64 keys at 4 warps x 32 rows with 32-key tiles (194-204), 128-key tiles
// (171). Still missing for torch's rate: more warps per SM (the
// 128-register 8-warp variant with Q re-read from shared memory is written
// in the lab, not yet measured), and Hopper's wgmma + TMA with warp
// specialization (what FlashAttention-3 and cuDNN do).
#include <cfloat>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/kernel_utils.cuh"

namespace kiln::cuda {
namespace {

using namespace attn;

constexpr int kBM = 64, kBN = 64, kThreads = 128;

__device__ __forceinline__ uint32_t pack_bits(unsigned short lo, unsigned short hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) sdpa_prefill_kernel(SdpaParams p) {
  constexpr int LD = D + 8;  // shared row pitch in elements
  constexpr int kVec = D / 8;  // 16-byte vectors per row
  extern __shared__ __align__(16) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem);
  T* ks = qs + kBM * LD;
  T* vs = ks + kBN * LD;
  const unsigned short* qs16 = reinterpret_cast<const unsigned short*>(qs);
  const unsigned short* ks16 = reinterpret_cast<const unsigned short*>(ks);
  const unsigned short* vs16 = reinterpret_cast<const unsigned short*>(vs);

  const int q0 = blockIdx.x * kBM, h = blockIdx.y, b = blockIdx.z;
  const int rep = p.n_q_heads / p.n_kv_heads, kvh = h / rep;
  const int offset = p.kv_len - p.q_len;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, tig = lane & 3;
  const T* qg = static_cast<const T*>(p.q) + b * p.q_strides[0] + h * p.q_strides[1];
  const T* kg = static_cast<const T*>(p.k) + b * p.k_strides[0] + kvh * p.k_strides[1];
  const T* vg = static_cast<const T*>(p.v) + b * p.v_strides[0] + kvh * p.v_strides[1];

  for (int i = tid; i < kBM * kVec; i += kThreads) {
    const int r = i / kVec, c = i % kVec;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (q0 + r < p.q_len) val = *reinterpret_cast<const uint4*>(qg + (q0 + r) * p.q_strides[2] + c * 8);
    *reinterpret_cast<uint4*>(qs + r * LD + c * 8) = val;
  }
  const int last_row = min(q0 + kBM, p.q_len) - 1;
  int kv_end = p.kv_len;
  if (p.causal && q0 + offset >= 0) kv_end = min(p.kv_len, last_row + offset + 1);

  const int wr = warp * 16;  // the warp's first row in the tile
  float m[2], l[2];
  float o[D / 8][4];
  const float sink = p.sinks ? static_cast<float>(static_cast<const T*>(p.sinks)[h * p.sinks_stride]) : -INFINITY;
#pragma unroll
  for (int i = 0; i < 2; ++i) m[i] = sink, l[i] = p.sinks ? 1.0f : 0.0f;
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;

  for (int k0 = 0; k0 < kv_end; k0 += kBN) {
    __syncthreads();  // the previous tiles are consumed (and Q is stored)
    for (int i = tid; i < kBN * kVec; i += kThreads) {
      const int r = i / kVec, c = i % kVec;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      if (k0 + r < p.kv_len) {  // zeros past the end: no NaN from stale rows
        kv = *reinterpret_cast<const uint4*>(kg + (k0 + r) * p.k_strides[2] + c * 8);
        vv = *reinterpret_cast<const uint4*>(vg + (k0 + r) * p.v_strides[2] + c * 8);
      }
      *reinterpret_cast<uint4*>(ks + r * LD + c * 8) = kv;
      *reinterpret_cast<uint4*>(vs + r * LD + c * 8) = vv;
    }
    __syncthreads();

    float s[kBN / 8][4];
#pragma unroll
    for (int nt = 0; nt < kBN / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      const int col = kk * 16 + tig * 2;
      a[0] = *reinterpret_cast<const uint32_t*>(qs16 + (wr + g) * LD + col);
      a[1] = *reinterpret_cast<const uint32_t*>(qs16 + (wr + g + 8) * LD + col);
      a[2] = *reinterpret_cast<const uint32_t*>(qs16 + (wr + g) * LD + col + 8);
      a[3] = *reinterpret_cast<const uint32_t*>(qs16 + (wr + g + 8) * LD + col + 8);
#pragma unroll
      for (int nt = 0; nt < kBN / 8; ++nt) {
        uint32_t bf[2];
        bf[0] = *reinterpret_cast<const uint32_t*>(ks16 + (nt * 8 + g) * LD + col);
        bf[1] = *reinterpret_cast<const uint32_t*>(ks16 + (nt * 8 + g) * LD + col + 8);
        mma16816<T>(s[nt], a, bf);
      }
    }

    const bool edge = k0 + kBN > p.kv_len || p.mask || (p.causal && k0 + kBN - 1 > q0 + offset);
#pragma unroll
    for (int nt = 0; nt < kBN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e] * p.scale;
        if (edge) {
          const int qpos = q0 + wr + g + (e >= 2 ? 8 : 0);
          const int key = k0 + nt * 8 + tig * 2 + (e & 1);
          if (key >= p.kv_len) {
            x = -INFINITY;
          } else if (p.causal && key > qpos + offset) {
            x = -FLT_MAX;
          } else if (p.mask && qpos < p.q_len) {
            const long long i = b * p.mask_strides[0] + h * p.mask_strides[1] + qpos * p.mask_strides[2] +
                                key * p.mask_strides[3];
            if (p.mask_is_bool) x = static_cast<const bool*>(p.mask)[i] ? x : -FLT_MAX;
            else x += static_cast<float>(static_cast<const T*>(p.mask)[i]);
          }
        }
        s[nt][e] = x;
      }
    }

    // Online softmax for the thread's two rows (g and g + 8 of the warp).
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kBN / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * half], s[nt][2 * half + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mn = fmaxf(m[half], mx);
      const float corr = __expf(m[half] - mn);
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kBN / 8; ++nt) {
        s[nt][2 * half] = __expf(s[nt][2 * half] - mn);
        s[nt][2 * half + 1] = __expf(s[nt][2 * half + 1] - mn);
        sum += s[nt][2 * half] + s[nt][2 * half + 1];
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      l[half] = l[half] * corr + sum;
      m[half] = mn;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) o[dt][2 * half] *= corr, o[dt][2 * half + 1] *= corr;
    }

    // O += P V.
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      uint32_t a[4];
      a[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
      a[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
      a[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      const int key = kk * 16 + tig * 2;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        const int col = dt * 8 + g;
        uint32_t bf[2];
        bf[0] = pack_bits(vs16[key * LD + col], vs16[(key + 1) * LD + col]);
        bf[1] = pack_bits(vs16[(key + 8) * LD + col], vs16[(key + 9) * LD + col]);
        mma16816<T>(o[dt], a, bf);
      }
    }
  }

  T* out = static_cast<T*>(p.out) + (static_cast<long long>(b) * p.n_q_heads + h) * p.q_len * D;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int qpos = q0 + wr + g + 8 * half;
    if (qpos >= p.q_len) continue;
    const float inv = 1.0f / l[half];
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      T* dst = out + static_cast<long long>(qpos) * D + dt * 8 + tig * 2;
      dst[0] = static_cast<T>(o[dt][2 * half] * inv);
      dst[1] = static_cast<T>(o[dt][2 * half + 1] * inv);
    }
  }
}

template <typename T, int D>
void launch(const SdpaParams& p, cudaStream_t s) {
  const int smem = (kBM + 2 * kBN) * (D + 8) * static_cast<int>(sizeof(T));
  static const bool configured = [&] {
    KILN_CUDA_CHECK("scaled_dot_product_attention",
                    cudaFuncSetAttribute(sdpa_prefill_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  }();
  (void)configured;
  const dim3 grid((p.q_len + kBM - 1) / kBM, p.n_q_heads, p.batch);
  sdpa_prefill_kernel<T, D><<<grid, kThreads, smem, s>>>(p);
}


// The pipelined kernel: NW warps of 16 query rows each (BM = 16 NW rows a
// block), 64-key tiles; MINB blocks per SM.
constexpr int kTileKeys = 64;

template <typename T, int D, int NW, int MINB>
__global__ void __launch_bounds__(NW * 32, MINB) prefill_tc_kernel(SdpaParams p) {
  constexpr int LD = D + 8, BM = NW * 16, BN = kTileKeys, NT = NW * 32, VEC = D / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem);
  T* kvs = qs + BM * LD;  // 2 stages of K[BN][LD], V[BN][LD]

  const int nq = (p.q_len + BM - 1) / BM, hb = p.n_q_heads * p.batch;
  const int qt = nq - 1 - static_cast<int>(blockIdx.x) / hb;  // the longest (causal) tiles first
  const int h = static_cast<int>(blockIdx.x) % hb % p.n_q_heads, b = static_cast<int>(blockIdx.x) % hb / p.n_q_heads;
  const int q0 = qt * BM;
  const int rep = p.n_q_heads / p.n_kv_heads, kvh = h / rep;
  const int offset = p.kv_len - p.q_len;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, tig = lane & 3;
  const T* qg = static_cast<const T*>(p.q) + b * p.q_strides[0] + h * p.q_strides[1];
  const T* kg = static_cast<const T*>(p.k) + b * p.k_strides[0] + kvh * p.k_strides[1];
  const T* vg = static_cast<const T*>(p.v) + b * p.v_strides[0] + kvh * p.v_strides[1];
  const long long ks = p.k_strides[2], vs = p.v_strides[2];

  for (int i = tid; i < BM * VEC; i += NT) {
    const int r = i / VEC, c = i % VEC;
    const bool ok = q0 + r < p.q_len;
    cp16(smem_addr(qs + r * LD + c * 8), ok ? qg + (q0 + r) * p.q_strides[2] + c * 8 : qg, ok ? 16 : 0);
  }
  const int last_row = min(q0 + BM, p.q_len) - 1;
  int kv_end = p.kv_len;
  if (p.causal && q0 + offset >= 0) kv_end = min(p.kv_len, last_row + offset + 1);
  const int ntiles = (kv_end + BN - 1) / BN;

  auto load_tile = [&](int slot, int t) {
    T* kd = kvs + slot * 2 * BN * LD;
    T* vd = kd + BN * LD;
    const int kb = t * BN;
#pragma unroll
    for (int i = tid; i < BN * VEC; i += NT) {
      const int r = i / VEC, c = i % VEC;
      const bool ok = kb + r < p.kv_len;  // zeros past the end: no NaN from stale rows
      cp16(smem_addr(kd + r * LD + c * 8), ok ? kg + (kb + r) * ks + c * 8 : kg, ok ? 16 : 0);
      cp16(smem_addr(vd + r * LD + c * 8), ok ? vg + (kb + r) * vs + c * 8 : vg, ok ? 16 : 0);
    }
  };
  load_tile(0, 0);
  cp_commit();  // one group: Q and tile 0

  const int wr = warp * 16;  // the warp's first row in the block
  const float sl = p.scale * kLog2e;
  float m[2], l[2], o[D / 8][4];  // rows g and g + 8; l is this lane's share of the sum
  const float sink = p.sinks ? static_cast<float>(static_cast<const T*>(p.sinks)[h * p.sinks_stride]) * kLog2e : -INFINITY;
#pragma unroll
  for (int i = 0; i < 2; ++i) m[i] = sink, l[i] = (p.sinks && tig == 0) ? 1.0f : 0.0f;
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  // ldmatrix lane offsets (elements): A operands and V (trans), and K as B.
  const int a_off = ((lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 8 * (lane >> 4);
  const int b_off = ((lane & 7) + 8 * (lane >> 4)) * LD + 8 * ((lane >> 3) & 1);
  uint32_t qa[D / 16][4];

  for (int t = 0; t < ntiles; ++t) {
    cp_wait<0>();
    __syncthreads();  // tile t landed for all threads; tile t - 1 consumed
    if (t + 1 < ntiles) load_tile((t + 1) & 1, t + 1);
    cp_commit();
    if (t == 0) {
      const uint32_t q_base = smem_addr(qs + wr * LD + a_off);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) ldsm_x4(q_base + kk * 32, qa[kk]);
    }
    const T* kt = kvs + (t & 1) * 2 * BN * LD;
    const uint32_t k_base = smem_addr(kt + b_off), v_base = smem_addr(kt + BN * LD + a_off);
    const int k0 = t * BN;

    float s[BN / 8][4];
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) {
        uint32_t bf[4];
        ldsm_x4(k_base + (np * 16 * LD + kk * 16) * 2, bf);
        mma16816<T>(s[2 * np], qa[kk], bf);
        mma16816<T>(s[2 * np + 1], qa[kk], bf + 2);
      }
    }

    const bool edge = k0 + BN > p.kv_len || p.mask || (p.causal && k0 + BN - 1 > q0 + offset);
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e] * sl;
        if (edge) {
          const int qpos = q0 + wr + g + (e >= 2 ? 8 : 0);
          const int key = k0 + nt * 8 + tig * 2 + (e & 1);
          if (key >= p.kv_len) {
            x = -INFINITY;
          } else if (p.causal && key > qpos + offset) {
            x = -FLT_MAX;
          } else if (p.mask && qpos < p.q_len) {
            const long long i = b * p.mask_strides[0] + h * p.mask_strides[1] + qpos * p.mask_strides[2] +
                                key * p.mask_strides[3];
            if (p.mask_is_bool) x = static_cast<const bool*>(p.mask)[i] ? x : -FLT_MAX;
            else x += static_cast<float>(static_cast<const T*>(p.mask)[i]) * kLog2e;
          }
        }
        s[nt][e] = x;
      }
    }

#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * hf], s[nt][2 * hf + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mn = fmaxf(m[hf], mx);
      const float mu = mn == -INFINITY ? 0.0f : mn;  // no -inf - -inf
      const float corr = exp2f(m[hf] - mu);
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
        s[nt][2 * hf] = exp2f(s[nt][2 * hf] - mu);
        s[nt][2 * hf + 1] = exp2f(s[nt][2 * hf + 1] - mu);
        sum += s[nt][2 * hf] + s[nt][2 * hf + 1];
      }
      l[hf] = l[hf] * corr + sum;
      m[hf] = mn;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) o[dt][2 * hf] *= corr, o[dt][2 * hf + 1] *= corr;
    }

#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint32_t a[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                             pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int j = 0; j < D / 16; ++j) {
        uint32_t bf[4];
        ldsm_x4_t(v_base + (kk * 16 * LD + j * 16) * 2, bf);
        mma16816<T>(o[2 * j], a, bf);
        mma16816<T>(o[2 * j + 1], a, bf + 2);
      }
    }
  }
  cp_wait<0>();

  // Normalize, stage the warp's rows in its own Q rows (no other warp reads
  // them), then 16-byte stores.
  T* out = static_cast<T*>(p.out) + (static_cast<long long>(b) * p.n_q_heads + h) * p.q_len * D;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    float lt = l[hf];
    lt += __shfl_xor_sync(0xffffffffu, lt, 1);
    lt += __shfl_xor_sync(0xffffffffu, lt, 2);
    const float inv = 1.0f / lt;
    const int r = wr + g + 8 * hf;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      *reinterpret_cast<uint32_t*>(qs + r * LD + dt * 8 + 2 * tig) = pack2<T>(o[dt][2 * hf] * inv, o[dt][2 * hf + 1] * inv);
    }
  }
  __syncwarp();
  for (int i = lane; i < 16 * VEC; i += 32) {
    const int r = i / VEC, c = i % VEC;
    const int qpos = q0 + wr + r;
    if (qpos < p.q_len)
      *reinterpret_cast<uint4*>(out + static_cast<long long>(qpos) * D + c * 8) =
          *reinterpret_cast<const uint4*>(qs + (wr + r) * LD + c * 8);
  }
}

template <typename T, int D, int NW, int MINB>
void launch_tc(const SdpaParams& p, cudaStream_t s) {
  constexpr int smem = (NW * 16 + 4 * kTileKeys) * (D + 8) * static_cast<int>(sizeof(T));
  static const bool configured = [&] {
    KILN_CUDA_CHECK("scaled_dot_product_attention",
                    cudaFuncSetAttribute(prefill_tc_kernel<T, D, NW, MINB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         smem));
    return true;
  }();
  (void)configured;
  const int nq = (p.q_len + NW * 16 - 1) / (NW * 16);
  prefill_tc_kernel<T, D, NW, MINB><<<nq * p.n_q_heads * p.batch, NW * 32, smem, s>>>(p);
}

}  // namespace

template <typename T>
void launch_sdpa_prefill(const SdpaParams& p, cudaStream_t s) {
  switch (p.head_dim) {
    case 64: tc_attention_enabled() ? launch_tc<T, 64, 8, 2>(p, s) : launch<T, 64>(p, s); break;
    case 80: launch<T, 80>(p, s); break;
    case 96: launch<T, 96>(p, s); break;
    case 128: tc_attention_enabled() ? launch_tc<T, 128, 4, 2>(p, s) : launch<T, 128>(p, s); break;
    case 256: launch<T, 256>(p, s); break;
    default:
      throw Error("[scaled_dot_product_attention] no GPU prefill kernel for head_dim " + std::to_string(p.head_dim));
  }
}
template void launch_sdpa_prefill<__half>(const SdpaParams&, cudaStream_t);
template void launch_sdpa_prefill<__nv_bfloat16>(const SdpaParams&, cudaStream_t);

}  // namespace kiln::cuda
