// Decode attention on tensor cores (kiln bench: sdpa_decode_gqa), float16 and
// bfloat16; float32 stays on the CUDA-core kernel in attention.cu.
//
// (The default since session 10, when it passed the GPU suite; the
// numbers below are from the standalone lab on the H200.)
//
// Why: decode is a stream over K and V, so the kernel must keep enough
// bytes in flight to run at memory speed. The CUDA-core kernel read a V row
// per key serially in 16 of 32 lanes and reached 0.85 TB/s (157 us at kv
// 32768, 32 query heads over 8 KV heads, d 128, bf16; torch SDPA 41 us).
//
// How: flash-decoding. The KV length is split over blocks (grid = splits x
// (batch * kv_heads), about kBlocksPerSm resident blocks per SM, one wave)
// and each block streams its range through a cp.async pipeline of
// stages<D>() stages, each stage 16 keys per warp of K and V (16-byte
// copies, rows padded by 16 bytes against ldmatrix bank conflicts). The
// query rows of one KV head (query heads x positions, at most 16) are the M
// side of mma.sync m16n8k16: S = Q K^T with K fragments from ldmatrix, the
// online softmax in registers (exp2 with the scale folded in), then O += P V
// with P taken straight from the S accumulators and V fragments from
// ldmatrix.trans. Each K/V element is read from memory once for all the
// query heads that share it. The block's warps merge their states in shared
// memory and write one partial (m, l, unnormalized output) per row; a second
// kernel merges a row's partials over the splits. Up to kClusterKeys keys
// a group's splits (at most 8) are one thread-block cluster instead: the
// partials stay in shared memory and the cluster's blocks merge them
// through distributed shared memory, no second kernel and no round trip
// through global memory (merge_in_cluster). Session 32, H100, `kiln bench
// --device gpu --quick --filter sdpa_decode`, merge kernel / cluster, two
// calls: kv 512 8.7-9.5 -> 8.1-8.7 us, kv 2048 14.1-14.4 -> 12.8-13.6 us.
// Over 2048 keys the clusters were slower (kv 4096 21-23 against 19-20 us,
// kv 32768 106 against 61 us: 64 blocks keep too few bytes in flight), and
// clusters of 16 slower than 8 at every length. (The same merge
// done by the block that arrives last, counted with a global atomic, made
// the 8B decode 5% slower: its fences and atomic cost more than the
// kernel it saved.)
//
// Measured (H200, 2026-12-02, standalone lab: this kernel and merge, CUDA
// events, median of 40, KV caches rotated so none is served from L2; bf16,
// 32 query / 8 KV heads, q_len 1; copy bandwidth 4231 GB/s; torch 2.11
// F.scaled_dot_product_attention(enable_gqa=True) in the same run):
//   d    kv     this kernel         old kernel   torch
//   128  4096   18.9 us 0.89 TB/s   62.5 us      60.1 us
//   128  8192   22.8 us 1.47 TB/s   102.4 us     64.8 us
//   128  16384  31.2 us 2.15 TB/s   123.5 us     56.4 us
//   128  32768  47.6 us 2.82 TB/s   158.3 us     59.7 us   (0.67 of copy)
//   64   4096   14.2 us 0.59 TB/s   57.9 us      34.2 us
//   64   32768  30.0 us 2.24 TB/s   139.3 us     34.9 us
// Between kv 16384 and 32768 the added 67 MB take 16.4 us (4.1 TB/s): the
// stream runs at copy speed and about 14 us are fixed cost, most of it the
// merge kernel's serial loop over the splits (the lab's 8-warp merge and a
// programmatic-dependent launch of it are written but not yet measured).
// Tried: 3 or 4 stages, 4 or 8 warps, 1 to 6 blocks per SM: one wave of 2
// blocks per SM with 3 stages was best from kv 8192 up, all about equal at
// kv 4096.
//
// Masked scores become -FLT_MAX (a fully masked row averages V, as the
// fallback's finfo.min does); keys past the range are -inf (no weight).
#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cstdlib>
#include <string>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/kernel_utils.cuh"

namespace kiln::cuda {
namespace {

using namespace attn;

constexpr int kWarps = 4;
constexpr int kStageKeys = 16 * kWarps;

// The most splits of a cluster (the portable cluster size).
constexpr int kClusterSplits = 8;

template <int D, int S>
constexpr int smem_bytes() {
  constexpr int pipe = S * 2 * kStageKeys * (D + 8) * 2;
  // The warps' outputs, (m, l) and weights; then, clustered, the split's
  // partial [16][2 + D], the merge's weights and l [16][kClusterSplits]
  // and totals [16].
  constexpr int merge = (kWarps * 16 * (D + 2 + 1) + 16 * (2 + D) + 16 * kClusterSplits * 2 + 16) * 4;
  return pipe > merge ? pipe : merge;
}
// Stages: as many as let kBlocksPerSm blocks share an SM's shared memory.
template <int D>
constexpr int stages() {
  return D <= 128 ? 3 : 2;
}
constexpr int kBlocksPerSm = 2;
// Up to this many keys a group's splits are one cluster (merge_in_cluster).
constexpr int kClusterKeys = 2048;

// The merge without a second kernel: the group's splits are one cluster of
// blocks (at most kClusterSplits), each split's partial in its block's
// shared memory (`mine`, [rows][2 + D]; after it room for [rows][splits]
// weights and [rows] totals). Every block takes the rows' weights, then
// its share of the outputs, reading the other blocks' partials through
// distributed shared memory; no block leaves while another may read it.
template <typename T, int D>
__device__ void merge_in_cluster(const SdpaParams& p, int splits, float* mine, int grp) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int rep = p.n_q_heads / p.n_kv_heads, rows = rep * p.q_len;
  const int b = grp / p.n_kv_heads, kvh = grp % p.n_kv_heads;
  const int tid = threadIdx.x, nt = static_cast<int>(blockDim.x), rank = static_cast<int>(cluster.block_rank());
  float* wts = mine + 16 * (2 + D);  // [rows][splits]: m, then the weight
  float* ls = wts + 16 * kClusterSplits;
  float* totals = ls + 16 * kClusterSplits;
  cluster.sync();  // every split's partial is written
  for (int i = tid; i < rows * splits; i += nt) {
    const float* q = cluster.map_shared_rank(mine, i % splits) + (i / splits) * (2 + D);
    wts[i] = q[0], ls[i] = q[1];
  }
  __syncthreads();
  if (tid < rows) {
    float mx = -INFINITY, lsum = 0.0f;
    for (int k = 0; k < splits; ++k) {
      if (ls[tid * splits + k] > 0.0f) mx = fmaxf(mx, wts[tid * splits + k]);
    }
    for (int k = 0; k < splits; ++k) {
      const float li = ls[tid * splits + k];
      const float w = li > 0.0f ? exp2f(wts[tid * splits + k] - mx) : 0.0f;
      wts[tid * splits + k] = w;
      lsum += w * li;
    }
    totals[tid] = lsum;
  }
  __syncthreads();
  auto out_row = [&](int r) {
    return static_cast<T*>(p.out) +
           ((static_cast<long long>(b) * p.n_q_heads + kvh * rep + r % rep) * p.q_len + r / rep) * p.head_dim;
  };
  if (rank == 0) {
    for (int r = 0; r < rows; ++r) {  // every split skipped (split_hidden): a fully masked row averages V
      if (totals[r] == 0.0f) mean_of_v<T>(p, b, kvh, D, out_row(r));
    }
  }
  const float* peers[kClusterSplits];
  for (int k = 0; k < splits; ++k) peers[k] = cluster.map_shared_rank(mine, k);
  for (int i = rank * nt + tid; i < rows * D; i += splits * nt) {
    const int r = i / D, d = i % D;
    if (totals[r] == 0.0f) continue;
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < kClusterSplits; ++k) {
      if (k < splits) acc += wts[r * splits + k] * peers[k][r * (2 + D) + 2 + d];
    }
    out_row(r)[d] = static_cast<T>(acc * (1.0f / totals[r]));
  }
  cluster.sync();  // the other blocks are done reading this one
}

// Partial layout: [group][split][row][2 + D] (m in log2 units, l, output).
template <typename T, int D, int S>
__global__ void __launch_bounds__(kWarps * 32)
    decode_kernel(SdpaParams p, int splits, int chunk, float* part, bool clustered, bool let_next_start) {
  // Clustered, the kernel after this one is the output projection's QMV,
  // launched early (programmatic dependent launch): its CTAs may start
  // fetching their weights now and wait for this kernel's output.
  if (let_next_start) allow_dependents();
  constexpr int LD = D + 8, BN = kStageKeys, NT = kWarps * 32, VEC = D / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  T* sm = reinterpret_cast<T*>(smem);
  const int grp = blockIdx.y, split = blockIdx.x;
  const int b = grp / p.n_kv_heads, kvh = grp % p.n_kv_heads;
  const int rep = p.n_q_heads / p.n_kv_heads, rows = rep * p.q_len;
  const int offset = p.kv_len - p.q_len;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, tig = lane & 3;
  const int k0 = split * chunk, k1 = min(p.kv_len, k0 + chunk);
  const int ntiles = k1 > k0 && !split_hidden(p, b, k0, k1) ? (k1 - k0 + BN - 1) / BN : 0;
  const T* kg = static_cast<const T*>(p.k) + b * p.k_strides[0] + kvh * p.k_strides[1];
  const T* vg = static_cast<const T*>(p.v) + b * p.v_strides[0] + kvh * p.v_strides[1];
  const long long ks = p.k_strides[2], vs = p.v_strides[2];

  auto load_tile = [&](int slot, int t) {
    T* kd = sm + slot * 2 * BN * LD;
    T* vd = kd + BN * LD;
    const int kb = k0 + t * BN;
#pragma unroll
    for (int i = tid; i < BN * VEC; i += NT) {
      const int r = i / VEC, c = i % VEC;
      const bool ok = kb + r < k1;
      cp16(smem_addr(kd + r * LD + c * 8), ok ? kg + (kb + r) * ks + c * 8 : kg, ok ? 16 : 0);
      cp16(smem_addr(vd + r * LD + c * 8), ok ? vg + (kb + r) * vs + c * 8 : vg, ok ? 16 : 0);
    }
  };
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < ntiles) load_tile(s, s);
    cp_commit();
  }

  // A lane's rows are g and g + 8: row slot r is query position r / rep of
  // head kvh * rep + r % rep. The divisions and row offsets are taken once
  // per row here (per element, they were most of a short call's instructions).
  int qpos[2], head[2];
  bool live[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int r = g + 8 * hf;
    live[hf] = r < rows;
    qpos[hf] = r / rep;
    head[hf] = kvh * rep + r % rep;
  }
  // Q as A fragments.
  uint32_t qa[D / 16][4];
  {
    const T* qr[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      qr[hf] = static_cast<const T*>(p.q) + b * p.q_strides[0] + head[hf] * p.q_strides[1] + qpos[hf] * p.q_strides[2];
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int col = kk * 16 + 2 * tig + 8 * (i >> 1);
        qa[kk][i] = live[i & 1] ? *reinterpret_cast<const uint32_t*>(qr[i & 1] + col) : 0u;
      }
    }
  }
  // The mask's row of each of the lane's two rows.
  long long mrow[2] = {0, 0};
  if (p.mask) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      mrow[hf] = b * p.mask_strides[0] + head[hf] * p.mask_strides[1] + qpos[hf] * p.mask_strides[2];
    }
  }
  const float sl = p.scale * kLog2e;
  float m[2], l[2], o[D / 8][4];  // rows g and g + 8; l is this lane's share
  const bool sink = p.sinks && split == 0 && warp == 0;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    m[hf] = -INFINITY, l[hf] = 0.0f;
    if (sink && live[hf]) {
      m[hf] = static_cast<float>(static_cast<const T*>(p.sinks)[head[hf] * p.sinks_stride]) * kLog2e;
      l[hf] = tig == 0 ? 1.0f : 0.0f;
    }
  }
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  const bool elem = p.causal || p.mask;

  for (int t = 0; t < ntiles; ++t) {
    cp_wait<S - 2>();
    __syncthreads();  // stage t landed for all threads; stage t - 1 consumed
    if (t + S - 1 < ntiles) load_tile((t + S - 1) % S, t + S - 1);
    cp_commit();
    const T* kt = sm + (t % S) * 2 * BN * LD + warp * 16 * LD;
    const T* vt = kt + BN * LD;
    const int kb = k0 + t * BN + warp * 16;
    if (kb >= k1) continue;  // this warp's keys are all past the split
    float s[2][4] = {};
    const uint32_t kaddr = smem_addr(kt + ((lane & 7) + 8 * (lane >> 4)) * LD + 8 * ((lane >> 3) & 1));
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t bf[4];
      ldsm_x4(kaddr + kk * 32, bf);
      mma16816<T>(s[0], qa[kk], bf);
      mma16816<T>(s[1], qa[kk], bf + 2);
    }
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = kb + n * 8 + 2 * tig + (e & 1);
        const int hf = e >> 1;
        float x = s[n][e] * sl;
        if (key >= k1) {
          x = -INFINITY;
        } else if (elem && live[hf]) {
          if (p.causal && key > qpos[hf] + offset) {
            x = -FLT_MAX;
          } else if (p.mask) {
            const long long i = mrow[hf] + key * p.mask_strides[3];
            if (p.mask_is_bool) x = static_cast<const bool*>(p.mask)[i] ? x : -FLT_MAX;
            else x += static_cast<float>(static_cast<const T*>(p.mask)[i]) * kLog2e;
          }
        }
        s[n][e] = x;
      }
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float mx = fmaxf(fmaxf(s[0][2 * hf], s[0][2 * hf + 1]), fmaxf(s[1][2 * hf], s[1][2 * hf + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mn = fmaxf(m[hf], mx);
      const float mu = mn == -INFINITY ? 0.0f : mn;  // no -inf - -inf
      const float corr = exp2f(m[hf] - mu);
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        s[n][2 * hf] = exp2f(s[n][2 * hf] - mu);
        s[n][2 * hf + 1] = exp2f(s[n][2 * hf + 1] - mu);
        sum += s[n][2 * hf] + s[n][2 * hf + 1];
      }
      l[hf] = l[hf] * corr + sum;
      m[hf] = mn;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) o[dt][2 * hf] *= corr, o[dt][2 * hf + 1] *= corr;
    }
    // The S accumulators of two adjacent 8-key tiles are the A fragment of one 16-key step.
    const uint32_t pa[4] = {pack2<T>(s[0][0], s[0][1]), pack2<T>(s[0][2], s[0][3]), pack2<T>(s[1][0], s[1][1]),
                            pack2<T>(s[1][2], s[1][3])};
    const uint32_t vaddr = smem_addr(vt + ((lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 8 * (lane >> 4));
#pragma unroll
    for (int j = 0; j < D / 16; ++j) {
      uint32_t bf[4];
      ldsm_x4_t(vaddr + j * 32, bf);
      mma16816<T>(o[2 * j], pa, bf);
      mma16816<T>(o[2 * j + 1], pa, bf + 2);
    }
  }
  cp_wait<0>();
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 1);
    l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 2);
  }
  __syncthreads();  // the stages are consumed: shared memory takes the warps' states
  float* ob = reinterpret_cast<float*>(smem);  // [warp][16][D]
  float* ml = ob + kWarps * 16 * D;            // [warp][16][2]
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int r = g + 8 * hf;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      *reinterpret_cast<float2*>(ob + (warp * 16 + r) * D + dt * 8 + 2 * tig) = make_float2(o[dt][2 * hf], o[dt][2 * hf + 1]);
    }
    if (tig == 0) ml[(warp * 16 + r) * 2] = m[hf], ml[(warp * 16 + r) * 2 + 1] = l[hf];
  }
  __syncthreads();
  // Clustered, the split's partial stays in this block's shared memory
  // (after the warps' states), where the cluster's blocks merge it.
  float* dst = clustered ? ml + kWarps * 16 * 2 + 16 * kWarps
                         : part + (static_cast<long long>(grp) * splits + split) * rows * (2 + D);
  // Each row's warp weights once (a thread per row), then the outputs.
  float* wts = ml + kWarps * 16 * 2;  // [16][kWarps]
  if (tid < rows) {
    const int r = tid;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, ml[(w * 16 + r) * 2]);
    float lsum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = ml[(w * 16 + r) * 2];
      const float wt = mw == -INFINITY ? 0.0f : exp2f(mw - mx);
      lsum += wt * ml[(w * 16 + r) * 2 + 1];
      wts[r * kWarps + w] = wt;
    }
    dst[r * (2 + D)] = mx;
    dst[r * (2 + D) + 1] = lsum;
  }
  __syncthreads();
  for (int i = tid; i < rows * D; i += NT) {
    const int r = i / D, d = i % D;
    float acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) acc += wts[r * kWarps + w] * ob[(w * 16 + r) * D + d];
    dst[r * (2 + D) + 2 + d] = acc;
  }
  if (clustered) merge_in_cluster<T, D>(p, splits, dst, grp);
}

// One block per (group, row): merges that row's partials over the splits.
template <typename T, int D>
__global__ void __launch_bounds__(128) decode_merge(SdpaParams p, int splits, const float* part) {
  allow_dependents();
  extern __shared__ float wts[];  // [splits]
  __shared__ float red[4];
  __shared__ float total;
  const int rep = p.n_q_heads / p.n_kv_heads, rows = rep * p.q_len;
  const int grp = blockIdx.x / rows, r = blockIdx.x % rows;
  const int b = grp / p.n_kv_heads, kvh = grp % p.n_kv_heads;
  const long long stride = static_cast<long long>(rows) * (2 + D);
  const float* first = part + static_cast<long long>(grp) * splits * stride + r * (2 + D);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  float mx = -INFINITY;
  for (int i = tid; i < splits; i += 128) {
    const float* row = first + i * stride;
    wts[i] = row[0];
    if (row[1] > 0.0f) mx = fmaxf(mx, row[0]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (lane == 0) red[warp] = mx;
  __syncthreads();
  mx = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
  float lsum = 0.0f;
  for (int i = tid; i < splits; i += 128) {
    const float li = first[i * stride + 1];
    const float w = li > 0.0f ? exp2f(wts[i] - mx) : 0.0f;
    wts[i] = w;
    lsum += w * li;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
  __syncthreads();
  if (lane == 0) red[warp] = lsum;
  __syncthreads();
  if (tid == 0) total = red[0] + red[1] + red[2] + red[3];
  __syncthreads();
  T* out = static_cast<T*>(p.out) +
           ((static_cast<long long>(b) * p.n_q_heads + kvh * rep + r % rep) * p.q_len + r / rep) * p.head_dim;
  if (total == 0.0f) {  // every split skipped (split_hidden): a fully masked row averages V
    mean_of_v<T>(p, b, kvh, D, out);
    return;
  }
  const float inv = 1.0f / total;
  for (int d = tid; d < D; d += 128) {
    // Eight partials in flight at a time: one accumulator made the loop a
    // chain of L2 round trips, one per split (32 blocks do this work).
    float acc[8] = {};
    int i = 0;
    for (; i + 8 <= splits; i += 8) {
#pragma unroll
      for (int u = 0; u < 8; ++u) acc[u] += wts[i + u] * first[(i + u) * stride + 2 + d];
    }
    for (; i < splits; ++i) acc[0] += wts[i] * first[i * stride + 2 + d];
    const float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    out[d] = static_cast<T>(sum * inv);
  }
}

// Keys per split: a multiple of the stage, so that the grid is about one wave.
int split_chunk(const SdpaParams& p, int splits) {
  const int c = (p.kv_len + splits - 1) / splits;
  return (c + kStageKeys - 1) / kStageKeys * kStageKeys;
}

template <typename T, int D>
void launch(const SdpaParams& p, int splits, float* part, cudaStream_t s) {
  constexpr int S = stages<D>();
  constexpr int smem = smem_bytes<D, S>();
  static const bool configured = [&] {
    KILN_CUDA_CHECK("scaled_dot_product_attention",
                    cudaFuncSetAttribute(decode_kernel<T, D, S>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  }();
  (void)configured;
  const int groups = p.batch * p.n_kv_heads, rows = p.n_q_heads / p.n_kv_heads * p.q_len;
  // KILN_DECODE_CLUSTER=N (for the lab): clusters up to N keys, 0 never.
  static const int cluster_keys = [] {
    const char* e = std::getenv("KILN_DECODE_CLUSTER");
    return e ? std::atoi(e) : kClusterKeys;
  }();
  // KILN_DECODE_PDL=0 (for the lab): clustered kernels do not let the next kernel start early.
  static const bool let_next_start = [] {
    const char* e = std::getenv("KILN_DECODE_PDL");
    return !(e && std::string(e) == "0");
  }();
  static std::atomic<bool> cluster_refused{false};  // this device said no once: it will again
  if (p.kv_len <= cluster_keys && !cluster_refused.load(std::memory_order_relaxed)) {
    const int want = std::min(kClusterSplits, (p.kv_len + kStageKeys - 1) / kStageKeys);
    const int chunk = split_chunk(p, want), n = (p.kv_len + chunk - 1) / chunk;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(n, groups);
    cfg.blockDim = dim3(kWarps * 32);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = n, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (cudaLaunchKernelEx(&cfg, decode_kernel<T, D, S>, p, n, chunk, part, true, let_next_start) == cudaSuccess) {
      return;
    }
    cudaGetLastError();  // refused: split and merge in two kernels
    cluster_refused.store(true, std::memory_order_relaxed);
  }
  const int chunk = split_chunk(p, splits);
  splits = (p.kv_len + chunk - 1) / chunk;  // no empty split
  decode_kernel<T, D, S><<<dim3(splits, groups), kWarps * 32, smem, s>>>(p, splits, chunk, part, false, false);
  KILN_CUDA_CHECK_LAUNCH("scaled_dot_product_attention");
  decode_merge<T, D><<<groups * rows, 128, splits * sizeof(float), s>>>(p, splits, part);
}

}  // namespace

int decode_tc_splits(const SdpaParams& p, int sm_count) {
  const int groups = p.batch * p.n_kv_heads;
  const int want = (kBlocksPerSm * sm_count + groups - 1) / groups;
  const int most = (p.kv_len + kStageKeys - 1) / kStageKeys;
  return std::max(1, std::min(want, most));
}

size_t decode_tc_scratch_bytes(const SdpaParams& p, int splits) {
  return static_cast<size_t>(p.batch) * p.n_kv_heads * splits * (p.n_q_heads / p.n_kv_heads * p.q_len) *
         (2 + p.head_dim) * sizeof(float);
}

template <typename T>
void launch_sdpa_decode_tc(const SdpaParams& p, int splits, float* scratch, cudaStream_t s) {
  switch (p.head_dim) {
    case 64: launch<T, 64>(p, splits, scratch, s); break;
    case 80: launch<T, 80>(p, splits, scratch, s); break;
    case 96: launch<T, 96>(p, splits, scratch, s); break;
    case 128: launch<T, 128>(p, splits, scratch, s); break;
    case 256: launch<T, 256>(p, splits, scratch, s); break;
    default: throw Error("[scaled_dot_product_attention] no GPU decode kernel for head_dim " + std::to_string(p.head_dim));
  }
}
template void launch_sdpa_decode_tc<__half>(const SdpaParams&, int, float*, cudaStream_t);
template void launch_sdpa_decode_tc<__nv_bfloat16>(const SdpaParams&, int, float*, cudaStream_t);

}  // namespace kiln::cuda
