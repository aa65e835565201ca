// Small-M matrix products for decode (M = 1..8): y[m, n] = sum_k x[m, k] *
// w[n, k], where w is the weights in the [N, K] layout of a linear layer
// (matmul(x, transpose(w)) gives b with row stride 1). The weights must be
// read once at full bandwidth, whatever M is.
//
// bf16 / fp16 (gemv_mma; gemv_bulk below streams the rows through the copy
// engine instead, opt-in): a block owns 16 rows of w and its 8 warps split K;
// each 16-byte load of w feeds the tensor cores (mma m16n8k16: the 16 rows
// of w times the M <= 8 rows of x as the 8 columns), so every weight is
// loaded and converted once for all M rows of x, and the FMAs cost nothing.
// A dot product does not care about the order of k, so each thread's 8
// contiguous elements are fed to the k slots its fragment registers hold
// (the same permutation for w and x) instead of shuffling to the documented
// k order. The warps' partial sums meet in shared memory.
//
// float32 (gemv_rows): a warp per row of w, 16-byte loads, the M dot
// products reduced with warp shuffles; x stays in L1/L2.
#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kernel_utils.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__device__ __forceinline__ float to_f(T x) {
  return static_cast<float>(x);
}

template <typename T, int M>
__global__ void __launch_bounds__(256) gemv_rows(const T* __restrict__ x, int64_t ldx, const T* __restrict__ w,
                                                 int64_t ldw, T* __restrict__ y, int64_t N, int64_t K) {
  using V = Vec<T>;
  constexpr int E = V::n;
  int warps = blockDim.x / 32;
  int lane = threadIdx.x % 32;
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / 32; n < N;
       n += static_cast<int64_t>(gridDim.x) * warps) {
    const T* wr = w + n * ldw;
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.f;
    int64_t kv = K / E;
    // Two 16-byte loads of w in flight per iteration.
    int64_t i = lane;
    for (; i + 32 < kv; i += 64) {
      V a = reinterpret_cast<const V*>(wr)[i];
      V b = reinterpret_cast<const V*>(wr)[i + 32];
#pragma unroll
      for (int m = 0; m < M; ++m) {
        V xa = reinterpret_cast<const V*>(x + m * ldx)[i];
        V xb = reinterpret_cast<const V*>(x + m * ldx)[i + 32];
#pragma unroll
        for (int e = 0; e < E; ++e) acc[m] += to_f(a.v[e]) * to_f(xa.v[e]) + to_f(b.v[e]) * to_f(xb.v[e]);
      }
    }
    for (; i < kv; i += 32) {
      V a = reinterpret_cast<const V*>(wr)[i];
#pragma unroll
      for (int m = 0; m < M; ++m) {
        V xa = reinterpret_cast<const V*>(x + m * ldx)[i];
#pragma unroll
        for (int e = 0; e < E; ++e) acc[m] += to_f(a.v[e]) * to_f(xa.v[e]);
      }
    }
    for (int64_t k = kv * E + lane; k < K; k += 32) {
#pragma unroll
      for (int m = 0; m < M; ++m) acc[m] += to_f(wr[k]) * to_f(x[m * ldx + k]);
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
    }
    if (lane < M) {
      float v = acc[0];
#pragma unroll
      for (int m = 1; m < M; ++m) v = lane == m ? acc[m] : v;
      y[lane * N + n] = static_cast<T>(v);
    }
  }
}

// Two k16 slices of one 32-wide chunk: w rows g and g + 8 (a, b) and x row g
// (v), eight contiguous elements each, accumulated into c.
template <bool kHalf>
__device__ __forceinline__ void mma_pair(float (&c)[4], const uint4& a, const uint4& b, const uint4& v) {
  if constexpr (kHalf) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a.x), "r"(b.x), "r"(a.y), "r"(b.y), "r"(v.x), "r"(v.y));
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a.z), "r"(b.z), "r"(a.w), "r"(b.w), "r"(v.z), "r"(v.w));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a.x), "r"(b.x), "r"(a.y), "r"(b.y), "r"(v.x), "r"(v.y));
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a.z), "r"(b.z), "r"(a.w), "r"(b.w), "r"(v.z), "r"(v.w));
  }
}

constexpr int kMmaWarps = 8;
constexpr int kMmaUnroll = 4;

// Requires K % 8 == 0 and 16-byte aligned rows; any M in 1..8, any N.
template <typename T, bool kHalf>
__global__ void __launch_bounds__(kMmaWarps * 32) gemv_mma(const T* __restrict__ x, int64_t ldx,
                                                           const T* __restrict__ w, int64_t ldw, T* __restrict__ y,
                                                           int M, int64_t N, int64_t K) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // the fragment's row group and thread in group
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * 16;
  const bool row0 = n0 + g < N, row1 = n0 + g + 8 < N, xrow = g < M;
  // Loads are never skipped (a branch would keep them from being in flight
  // together): missing rows read row 0 and the value is then replaced by 0.
  const T* w0 = w + (row0 ? (n0 + g) * ldw : 0);
  const T* w1 = w + (row1 ? (n0 + g + 8) * ldw : 0);
  const T* xr = x + (xrow ? g * ldx : 0);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  float c[4] = {0.f, 0.f, 0.f, 0.f};
  const int64_t chunks = (K + 31) / 32;
  constexpr int64_t kStep = kMmaWarps * kMmaUnroll;
  // Software-pipelined: the loads of the next step are issued before the
  // tensor-core work of this one, so two steps of w are in flight per thread.
  uint4 a[kMmaUnroll], b[kMmaUnroll], v[kMmaUnroll];
  auto load = [&](int64_t c0, uint4 (&la)[kMmaUnroll], uint4 (&lb)[kMmaUnroll], uint4 (&lv)[kMmaUnroll]) {
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      const int64_t k = (c0 + u * kMmaWarps) * 32 + 8 * t;
      const bool in = k < K;
      const int64_t kk = in ? k : 0;
      la[u] = __ldcs(reinterpret_cast<const uint4*>(w0 + kk));
      lb[u] = __ldcs(reinterpret_cast<const uint4*>(w1 + kk));
      lv[u] = __ldg(reinterpret_cast<const uint4*>(xr + kk));
      if (!(in && row0)) la[u] = zero;
      if (!(in && row1)) lb[u] = zero;
      if (!(in && xrow)) lv[u] = zero;
    }
  };
  if (warp < chunks) load(warp, a, b, v);
  for (int64_t c0 = warp; c0 < chunks; c0 += kStep) {
    uint4 na[kMmaUnroll], nb[kMmaUnroll], nv[kMmaUnroll];
    const bool more = c0 + kStep < chunks;  // the same for the whole warp
    if (more) load(c0 + kStep, na, nb, nv);
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) mma_pair<kHalf>(c, a[u], b[u], v[u]);
    if (more) {
#pragma unroll
      for (int u = 0; u < kMmaUnroll; ++u) {
        a[u] = na[u];
        b[u] = nb[u];
        v[u] = nv[u];
      }
    }
  }
  __shared__ float partial[kMmaWarps][4][32];
#pragma unroll
  for (int i = 0; i < 4; ++i) partial[warp][i][lane] = c[i];
  __syncthreads();
  if (warp != 0) return;
  float s[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    s[i] = 0.f;
#pragma unroll
    for (int j = 0; j < kMmaWarps; ++j) s[i] += partial[j][i][lane];
  }
  // c0, c1: row g of w, x rows 2t and 2t + 1; c2, c3: row g + 8.
  const int m = 2 * t;
  if (row0 && m < M) y[m * N + n0 + g] = static_cast<T>(s[0]);
  if (row0 && m + 1 < M) y[(m + 1) * N + n0 + g] = static_cast<T>(s[1]);
  if (row1 && m < M) y[m * N + n0 + g + 8] = static_cast<T>(s[2]);
  if (row1 && m + 1 < M) y[(m + 1) * N + n0 + g + 8] = static_cast<T>(s[3]);
}

// ---- bf16 / fp16 through the copy engine (gemv_bulk, opt-in: below) ----
// Why: on the H200 gemv_mma reaches 0.82-0.87 of the copy bandwidth at
// 4096 x 14336 and 8192^2 (session 35), and its grid (a block per 16 rows,
// ~2 resident per SM) ends in a partial wave: 896 blocks for 14336 rows are
// 3.4 waves on 132 SMs. The block QMV gained 5-20% from the same change
// (quant_blocks_qmv_i8.cu, qmv_bulk_kernel). Here one CTA per SM takes a contiguous
// range of rows (split to within one row, so every SM streams the same
// bytes), and thread 0 asks the copy engine (bulk_copy.cuh) for tiles of 16
// rows x Slice columns, one copy per row, `stages` tiles in flight (~170
// KB per SM). A tile's rows sit 64 bytes past a multiple of 128 bytes apart,
// so the two rows a quarter-warp reads are in different banks. The 8 warps
// split a tile's columns and feed mma_pair as gemv_mma does; x is read
// through L1. The warps' sums meet in shared memory after a row tile's last
// slice. With w_early the first tiles are requested before the kernel ahead
// has finished (programmatic dependent launch).
constexpr int kBulkWarps = 8, kBulkRows = 16;

template <int Slice, typename T>
constexpr int bulk_row_stride() {
  return Slice * static_cast<int>(sizeof(T)) + 64;
}
// Barriers, then the warps' sums of two row tiles.
constexpr int kBulkHead = 128 + 2 * kBulkWarps * 4 * 32 * static_cast<int>(sizeof(float));

template <typename T, bool kHalf, int Slice>
__global__ void __launch_bounds__(kBulkWarps * 32, 1)
    gemv_bulk(const T* __restrict__ x, int64_t ldx, const T* __restrict__ w, int64_t ldw, T* __restrict__ y, int M,
              int N, int K, int stages, bool w_early) {
  static_assert(Slice % (32 * kBulkWarps) == 0, "a slice is whole 32-column groups for every warp");
  constexpr int U = Slice / (32 * kBulkWarps), RS = bulk_row_stride<Slice, T>(), TB = kBulkRows * RS;
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);  // one barrier per stage (at most 16)
  float* sums = reinterpret_cast<float*>(smem + 128);  // [tile parity][warp][4][lane]
  uint8_t* ring = smem + kBulkHead;
  const int r0 = static_cast<int>(int64_t{N} * blockIdx.x / gridDim.x);
  const int r1 = static_cast<int>(int64_t{N} * (blockIdx.x + 1) / gridDim.x);
  const int slices = (K + Slice - 1) / Slice;
  const int chunks = (r1 - r0 + kBulkRows - 1) / kBulkRows * slices;  // (row tile, slice), slices inner
  auto fetch = [&](int c) {
    const int first = r0 + c / slices * kBulkRows, n = min(kBulkRows, r1 - first);
    const int k0 = c % slices * Slice, kn = min(Slice, K - k0);
    uint8_t* dst = ring + static_cast<size_t>(c % stages) * TB;
    uint64_t* bar = &full[c % stages];
    bulk::expect_bytes(bar, static_cast<uint32_t>(n * kn * sizeof(T)));
    for (int i = 0; i < n; ++i) {
      bulk::copy(dst + i * RS, w + static_cast<int64_t>(first + i) * ldw + k0, static_cast<uint32_t>(kn * sizeof(T)),
                 bar);
    }
  };
  bulk::start_ring(full, stages, chunks, w_early, fetch);
  __syncthreads();  // publishes the barriers' initialization
  allow_dependents();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // the fragment's row group and thread in group
  const bool xrow = g < M;
  const T* xr = x + (xrow ? g * ldx : 0);  // rows past M read row 0, then use zeros
  const uint4 zero = make_uint4(0, 0, 0, 0);
  float c[4] = {0.f, 0.f, 0.f, 0.f};
  for (int ch = 0; ch < chunks; ++ch) {
    bulk::wait(&full[ch % stages], (ch / stages) & 1);
    const uint8_t* tile = ring + static_cast<size_t>(ch % stages) * TB;
    const int k0 = ch % slices * Slice, kn = min(Slice, K - k0);
    // Rows of a partial tile past r1 hold stale bytes: they only reach
    // outputs that are not written.
    uint4 a[U], b[U], v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = (warp + u * kBulkWarps) * 32 + 8 * t;  // kn % 8 == 0: 8 columns are all in or all out
      const bool in = k < kn;
      const int kk = in ? k : 0;
      a[u] = *reinterpret_cast<const uint4*>(tile + g * RS + kk * static_cast<int>(sizeof(T)));
      b[u] = *reinterpret_cast<const uint4*>(tile + (g + 8) * RS + kk * static_cast<int>(sizeof(T)));
      v[u] = __ldg(reinterpret_cast<const uint4*>(xr + k0 + kk));
      if (!in) a[u] = b[u] = zero;
      if (!(in && xrow)) v[u] = zero;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) mma_pair<kHalf>(c, a[u], b[u], v[u]);
    const bool last = ch % slices == slices - 1;
    // A row tile's sums alternate between two buffers: the next tile's are
    // written before the barrier that warp 0 reaches only after reading these.
    float* tsums = sums + (ch / slices % 2) * kBulkWarps * 4 * 32;
    if (last) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        tsums[(warp * 4 + i) * 32 + lane] = c[i];
        c[i] = 0.f;
      }
    }
    __syncthreads();  // the stage is read; the sums are written
    if (threadIdx.x == 0 && ch + stages < chunks) {
      bulk::fence_before_refill();
      fetch(ch + stages);
    }
    if (last && warp == 0) {
      float s[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[i] = 0.f;
#pragma unroll
        for (int j = 0; j < kBulkWarps; ++j) s[i] += tsums[(j * 4 + i) * 32 + lane];
      }
      // s0, s1: row g of the tile, x rows 2t and 2t + 1; s2, s3: row g + 8.
      const int first = r0 + ch / slices * kBulkRows, m = 2 * t;
      const bool row0 = first + g < r1, row1 = first + g + 8 < r1;
      if (row0 && m < M) y[static_cast<int64_t>(m) * N + first + g] = static_cast<T>(s[0]);
      if (row0 && m + 1 < M) y[static_cast<int64_t>(m + 1) * N + first + g] = static_cast<T>(s[1]);
      if (row1 && m < M) y[static_cast<int64_t>(m) * N + first + g + 8] = static_cast<T>(s[2]);
      if (row1 && m + 1 < M) y[static_cast<int64_t>(m + 1) * N + first + g + 8] = static_cast<T>(s[3]);
    }
  }
}

// Opt-in until it is measured against gemv_mma on a GPU (written in
// session 36, when no GPU was lent): KILN_GEMV_BULK=1 takes it for bf16 /
// fp16; KILN_GEMV_STAGES / KILN_GEMV_SLICE (512, 1024, 2048) set the ring.
std::atomic<int> bulk_override{-1};

int env_int(const char* name, int fallback) {
  const char* e = std::getenv(name);
  return e && *e ? std::atoi(e) : fallback;
}

template <typename T, bool kHalf, int Slice>
bool launch_bulk_slice(const T* x, int64_t ldx, const T* w, int64_t ldw, T* y, int64_t M, int64_t N, int64_t K,
                       bool w_early, cudaStream_t s) {
  static const int want_stages = std::clamp(env_int("KILN_GEMV_STAGES", 5), 2, 16);
  const int sms = std::max(device_sm_count(), 1);
  const int ctas = static_cast<int>(std::min<int64_t>(sms, (N + kBulkRows - 1) / kBulkRows));
  const int64_t rows_cta = (N + ctas - 1) / ctas;
  const int64_t chunks = (rows_cta + kBulkRows - 1) / kBulkRows * ((K + Slice - 1) / Slice);
  constexpr size_t kMaxSmem = 227 * 1024, TB = size_t{kBulkRows} * bulk_row_stride<Slice, T>();
  const int stages = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>({want_stages, chunks, static_cast<int64_t>((kMaxSmem - kBulkHead) / TB)})));
  const size_t smem = kBulkHead + stages * TB;
  auto kernel = gemv_bulk<T, kHalf, Slice>;
  static const bool granted = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(kMaxSmem)) == cudaSuccess;
  if (!granted) {
    cudaGetLastError();
    return false;
  }
  return bulk::launch_early(kernel, ctas, kBulkWarps * 32, smem, s, x, ldx, w, ldw, y, static_cast<int>(M),
                            static_cast<int>(N), static_cast<int>(K), stages, w_early);
}

template <typename T, bool kHalf>
bool launch_bulk(const T* x, int64_t ldx, const T* w, int64_t ldw, T* y, int64_t M, int64_t N, int64_t K, bool w_early,
                 cudaStream_t s) {
  static const bool env_on = env_int("KILN_GEMV_BULK", 0) != 0;
  const int o = bulk_override.load(std::memory_order_relaxed);
  if (!(o < 0 ? env_on : o == 1)) return false;
  if (N > INT32_MAX || K > INT32_MAX) return false;
  static const int slice = env_int("KILN_GEMV_SLICE", 1024);
  if (slice == 512) return launch_bulk_slice<T, kHalf, 512>(x, ldx, w, ldw, y, M, N, K, w_early, s);
  if (slice == 2048) return launch_bulk_slice<T, kHalf, 2048>(x, ldx, w, ldw, y, M, N, K, w_early, s);
  return launch_bulk_slice<T, kHalf, 1024>(x, ldx, w, ldw, y, M, N, K, w_early, s);
}

template <typename T, bool kHalf>
void launch_mma(const T* x, int64_t ldx, const T* w, int64_t ldw, T* y, int64_t M, int64_t N, int64_t K, bool w_early,
                cudaStream_t s) {
  if (launch_bulk<T, kHalf>(x, ldx, w, ldw, y, M, N, K, w_early, s)) return;
  const unsigned grid = static_cast<unsigned>((N + 15) / 16);
  gemv_mma<T, kHalf><<<grid, kMmaWarps * 32, 0, s>>>(x, ldx, w, ldw, y, static_cast<int>(M), N, K);
}

template <typename T>
void launch(const T* x, int64_t ldx, const T* w, int64_t ldw, T* y, int64_t M, int64_t N, int64_t K, cudaStream_t s) {
  constexpr int kBlock = 256;
  int sms = device_sm_count() > 0 ? device_sm_count() : 132;
  unsigned grid = static_cast<unsigned>(std::min<int64_t>((N + 7) / 8, static_cast<int64_t>(sms) * 16));
  switch (M) {
#define KILN_GEMV_CASE(m) \
  case m: gemv_rows<T, m><<<grid, kBlock, 0, s>>>(x, ldx, w, ldw, y, N, K); break;
    KILN_GEMV_CASE(1) KILN_GEMV_CASE(2) KILN_GEMV_CASE(3) KILN_GEMV_CASE(4)
    KILN_GEMV_CASE(5) KILN_GEMV_CASE(6) KILN_GEMV_CASE(7) KILN_GEMV_CASE(8)
#undef KILN_GEMV_CASE
  }
}

__global__ void scrub_kernel(const uint4* __restrict__ p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(p + i);  // normal priority in L2: the reads displace what was there
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads; never true of the zeroed buffer
}

}  // namespace

void l2_scrub_by_reading(const void* buf, size_t bytes, cudaStream_t s) {
  const int sms = std::max(device_sm_count(), 1);
  scrub_kernel<<<sms * 4, 512, 0, s>>>(static_cast<const uint4*>(buf), bytes / 16,
                                       static_cast<unsigned*>(const_cast<void*>(buf)));
  KILN_CUDA_CHECK_LAUNCH("matmul");
}

bool gemv_covers(Dtype t, const char* x, int64_t ldx, const char* w, int64_t ldw, int64_t M, int64_t K) {
  const size_t item = size_of(t);
  if (M < 1 || M > 8 || (t != Dtype::float32 && t != Dtype::bfloat16 && t != Dtype::float16)) return false;
  if (t != Dtype::float32 && K % 8 != 0) return false;
  // 16-byte loads need aligned rows.
  return aligned16(x) && aligned16(w) && (ldx * item) % 16 == 0 && (ldw * item) % 16 == 0;
}

void set_gemv_bulk_override(int on) { bulk_override.store(on, std::memory_order_relaxed); }

bool gemv(Dtype t, const char* x, int64_t ldx, const char* w, int64_t ldw, char* y, int64_t M, int64_t N, int64_t K,
          cudaStream_t s, bool w_early) {
  if (!gemv_covers(t, x, ldx, w, ldw, M, K)) return false;
  if (!s) s = current_stream();
  if (t == Dtype::float32) {
    launch(reinterpret_cast<const float*>(x), ldx, reinterpret_cast<const float*>(w), ldw, reinterpret_cast<float*>(y),
           M, N, K, s);
  } else if (t == Dtype::bfloat16) {
    launch_mma<__nv_bfloat16, false>(reinterpret_cast<const __nv_bfloat16*>(x), ldx,
                                     reinterpret_cast<const __nv_bfloat16*>(w), ldw,
                                     reinterpret_cast<__nv_bfloat16*>(y), M, N, K, w_early, s);
  } else {
    launch_mma<__half, true>(reinterpret_cast<const __half*>(x), ldx, reinterpret_cast<const __half*>(w), ldw,
                             reinterpret_cast<__half*>(y), M, N, K, w_early, s);
  }
  KILN_CUDA_CHECK_LAUNCH("matmul");
  return true;
}

}  // namespace kiln::cuda
