// Prefill attention on tensor cores, FlashAttention-2 style (kiln bench:
// sdpa_prefill, sdpa_prefill_causal).
//
// A block of 4 warps owns 64 query rows of one head (grid: query tiles x
// q_heads x batch); each warp owns 16 rows for the whole KV length, so the
// softmax statistics of a row never leave the four threads that hold it. Per
// 64-key tile: K and V tiles go to shared memory (rows padded by 16 bytes
// against bank conflicts), S = Q K^T with mma.sync m16n8k16 (float32
// accumulators), scale and masks in registers, the online softmax update
// (row max and sum across the quad of threads by shuffles), then P V with P
// taken straight from the S accumulators (the C layout of two adjacent 8-wide
// tiles is the A layout of one 16-wide step) rounded to the input type.
// Causal: tiles past the block's last row are skipped (a block of rows that
// sees no key at all, q_len > kv_len, keeps every key and averages V);
// the diagonal tiles are masked per element.
//
// Not yet here (the measured gap to torch in docs/performance.md): cp.async
// double buffering of the K/V tiles, ldmatrix loads, Hopper wgmma + TMA.
#include <cfloat>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/kernel_utils.cuh"

namespace kiln::cuda {
namespace {

constexpr int kBM = 64, kBN = 64, kThreads = 128;

template <typename T>
__device__ __forceinline__ void mma16816(float* c, const uint32_t* a, const uint32_t* b) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// Two floats rounded to T, the first in the low half (the lower column).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

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

}  // namespace

template <typename T>
void launch_sdpa_prefill(const SdpaParams& p, cudaStream_t s) {
  switch (p.head_dim) {
    case 64: launch<T, 64>(p, s); break;
    case 80: launch<T, 80>(p, s); break;
    case 96: launch<T, 96>(p, s); break;
    case 128: launch<T, 128>(p, s); break;
    case 256: launch<T, 256>(p, s); break;
    default:
      throw Error("[scaled_dot_product_attention] no GPU prefill kernel for head_dim " + std::to_string(p.head_dim));
  }
}
template void launch_sdpa_prefill<__half>(const SdpaParams&, cudaStream_t);
template void launch_sdpa_prefill<__nv_bfloat16>(const SdpaParams&, cudaStream_t);

}  // namespace kiln::cuda
