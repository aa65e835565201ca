// Reductions (sum, prod, max, min, all, any) and argmax/argmin (softmax:
// softmax.cu).
//
// As on the CPU, the input is made row-major (a copy only when it is not)
// and dims are grouped into runs of kept and reduced axes: [rows, len] is a
// row reduction (a few lanes per very short row, a warp per short row, a
// block per long row, and long rows split across blocks with a second pass
// over the partials), [batch, len, width] with wide rows a column reduction
// (threads across columns with 16-byte loads, long columns split across
// blocks with a second pass); anything else is permuted so the reduced axes
// come last.
// The reduce op is a run-time switch, so kernels are instantiated per
// (input, output) dtype pair only.
#include <cfloat>

#include "backend/cuda/kernel_utils.cuh"
#include "core/ops_util.h"
#include "core/reduce_plan.h"
#include "core/primitives.h"

namespace kiln {
namespace cuda {
namespace {

template <typename A>
__device__ __forceinline__ A reduce_init(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: case ReduceOp::any: return A(0);
    case ReduceOp::prod: case ReduceOp::all: return A(1);
    case ReduceOp::max:
      if constexpr (std::numeric_limits<A>::has_infinity) return -std::numeric_limits<A>::infinity();
      else return std::numeric_limits<A>::lowest();
    default:
      if constexpr (std::numeric_limits<A>::has_infinity) return std::numeric_limits<A>::infinity();
      else return std::numeric_limits<A>::max();
  }
}

template <typename A>
__device__ __forceinline__ A combine(ReduceOp op, A a, A b) {
  switch (op) {
    case ReduceOp::sum:
      if constexpr (std::is_same_v<A, bool>) return a || b;
      else if constexpr (std::is_integral_v<A>) return static_cast<A>(static_cast<ko::wrap_unsigned_t<A>>(a) + static_cast<ko::wrap_unsigned_t<A>>(b));
      else return a + b;
    case ReduceOp::prod:
      if constexpr (std::is_same_v<A, bool>) return a && b;
      else if constexpr (std::is_integral_v<A>) return static_cast<A>(static_cast<ko::wrap_unsigned_t<A>>(a) * static_cast<ko::wrap_unsigned_t<A>>(b));
      else return a * b;
    case ReduceOp::max: return (a > b || a != a) ? a : b;
    case ReduceOp::min: return (a < b || a != a) ? a : b;
    case ReduceOp::all: return static_cast<A>(a != A(0) && b != A(0));
    default: return static_cast<A>(a != A(0) || b != A(0));
  }
}

// Float sums are compensated per thread (Kahan): a thread of a long row or
// column adds thousands of values, and one plain chain of them was off by
// 1.7e-4 (relative) over 10^7 elements; compensated, a few ulps. The extra
// adds cost nothing next to the memory traffic (an H200 has over 40 flops
// of headroom per float read). The combining trees after them are log-depth.
// `op` is a ReduceOp or a constant of one (then the test folds away).
template <typename A, typename OpT>
__device__ __forceinline__ void add_to(OpT op, A& acc, A& comp, A x) {
  if constexpr (std::is_floating_point_v<A>) {
    if (op == ReduceOp::sum) {
      A y = x - comp;
      A t = acc + y;
      // An infinite total would make the correction NaN: drop it, keep the inf.
      comp = isfinite(t) ? (t - acc) - y : A(0);
      acc = t;
      return;
    }
  }
  acc = combine(op, acc, x);
}

// The total of an accumulator fed by add_to (comp is 0 for other ops).
template <typename A>
__device__ __forceinline__ A compensated(A acc, A comp) {
  if constexpr (std::is_floating_point_v<A>) return acc - comp;
  else return acc;
}

template <typename A, typename T>
__device__ __forceinline__ A load_acc(ReduceOp op, T x) {
  auto c = to_compute(x);
  if (op == ReduceOp::all || op == ReduceOp::any) return static_cast<A>(c != decltype(c)(0));
  if constexpr (std::is_same_v<A, bool>) return c != decltype(c)(0);
  else return static_cast<A>(c);
}

template <typename A>
__device__ __forceinline__ A warp_reduce(ReduceOp op, A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    if constexpr (sizeof(A) >= 4) v = combine(op, v, __shfl_xor_sync(0xffffffffu, v, o));
    else v = combine(op, v, static_cast<A>(__shfl_xor_sync(0xffffffffu, static_cast<int>(v), o)));
  }
  return v;
}

// Reduces across the block (all threads get the result).
template <typename A>
__device__ A block_reduce(ReduceOp op, A v) {
  __shared__ A partial[32];
  v = warp_reduce(op, v);
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  int nwarps = blockDim.x / 32;
  v = lane < nwarps ? partial[lane] : reduce_init<A>(op);
  return warp_reduce(op, v);
}

// Accumulates in[begin, end) (one thread's share, stride `step`), using
// 16-byte loads when the row is aligned. `op` is a ReduceOp or a
// std::integral_constant of one: as a constant the per-element switch
// folds away, which the long loops need (a max over 8192-wide rows ran at
// 0.67 of copy with the switch, 1.00 without). The short-row kernel keeps
// the run-time op: there the constant version measured slower on the H200
// (0.62 of copy on [2^20, 64] against 0.80).
template <typename T, typename A, typename OpT>
__device__ __forceinline__ A accumulate_with(OpT op, const T* __restrict__ p, int64_t begin, int64_t end, int lane,
                                             int step, bool vec) {
  A acc = reduce_init<A>(op), comp = A(0);
  if (vec) {
    using V = Vec<T>;
    int64_t vb = begin / V::n, ve = end / V::n;  // begin is a multiple of V::n when vec
    const V* vp = reinterpret_cast<const V*>(p);
    for (int64_t i = vb + lane; i < ve; i += step) {
      V v = vp[i];
#pragma unroll
      for (int k = 0; k < V::n; ++k) add_to(op, acc, comp, load_acc<A>(op, v.v[k]));
    }
    begin = ve * V::n;
  }
  for (int64_t i = begin + lane; i < end; i += step) add_to(op, acc, comp, load_acc<A>(op, p[i]));
  return compensated(acc, comp);
}

template <ReduceOp Op>
using OpConstant = std::integral_constant<ReduceOp, Op>;

template <typename T, typename A>
__device__ __forceinline__ A accumulate(ReduceOp op, const T* __restrict__ p, int64_t begin, int64_t end, int lane,
                                        int step, bool vec) {
  switch (op) {
    case ReduceOp::sum: return accumulate_with<T, A>(OpConstant<ReduceOp::sum>{}, p, begin, end, lane, step, vec);
    case ReduceOp::prod: return accumulate_with<T, A>(OpConstant<ReduceOp::prod>{}, p, begin, end, lane, step, vec);
    case ReduceOp::max: return accumulate_with<T, A>(OpConstant<ReduceOp::max>{}, p, begin, end, lane, step, vec);
    case ReduceOp::min: return accumulate_with<T, A>(OpConstant<ReduceOp::min>{}, p, begin, end, lane, step, vec);
    case ReduceOp::all: return accumulate_with<T, A>(OpConstant<ReduceOp::all>{}, p, begin, end, lane, step, vec);
    default: return accumulate_with<T, A>(OpConstant<ReduceOp::any>{}, p, begin, end, lane, step, vec);
  }
}

// Warp per row: rows of `len` elements, out[r] (or partial, as A).
template <typename T, typename O, typename A>
__global__ void row_reduce_warp(ReduceOp op, const T* __restrict__ in, O* __restrict__ out, int64_t rows, int64_t len,
                                bool vec) {
  int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  A acc = accumulate<T, A>(op, in + row * len, 0, len, threadIdx.x % 32, 32, vec);
  acc = warp_reduce(op, acc);
  if (threadIdx.x % 32 == 0) out[row] = static_cast<O>(acc);
}

// Short rows (at most 256 bytes): W lanes per row, 32 / W rows per warp at a
// time; every lane of a warp runs the same iterations (the shuffles need all).
// A warp per row left half its lanes idle on 64-float rows and measured 0.36
// of copy on [2^20, 64] on the H200; this kernel 0.80.
template <typename T, typename O, typename A, int W>
__global__ void row_reduce_short(ReduceOp op, const T* __restrict__ in, O* __restrict__ out, int64_t rows,
                                 int64_t len, bool vec) {
  constexpr int kRowsPerWarp = 32 / W;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  const int lane = threadIdx.x % W, sub = (threadIdx.x % 32) / W;
  auto finish = [&](A acc, int64_t row) {
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) {
      if constexpr (sizeof(A) >= 4)
        acc = combine(op, acc, __shfl_xor_sync(0xffffffffu, acc, o));
      else
        acc = combine(op, acc, static_cast<A>(__shfl_xor_sync(0xffffffffu, static_cast<int>(acc), o)));
    }
    if (lane == 0 && row < rows) out[row] = static_cast<O>(acc);
  };
  if (vec) {
    // A row is at most W vectors: a lane holds one vector of it. kBatch
    // row groups per warp and step, every load issued before the first is
    // used; with one 16-byte load in flight per thread the kernel measured
    // 0.71 of copy on [2^20, 64] float32 (H200), with four 0.93.
    using V = Vec<T>;
    constexpr int kBatch = 4;
    const int64_t units = len / V::n;
    for (int64_t first = warp * kRowsPerWarp * kBatch; first < rows; first += warps * kRowsPerWarp * kBatch) {
      V v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int64_t row = first + u * kRowsPerWarp + sub;
        if (row < rows && lane < units) v[u] = reinterpret_cast<const V*>(in + row * len)[lane];
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int64_t row = first + u * kRowsPerWarp + sub;
        A acc = reduce_init<A>(op), comp = A(0);
        if (row < rows && lane < units) {
#pragma unroll
          for (int k = 0; k < V::n; ++k) add_to(op, acc, comp, load_acc<A>(op, v[u].v[k]));
        }
        finish(compensated(acc, comp), row);
      }
    }
    return;
  }
  for (int64_t first = warp * kRowsPerWarp; first < rows; first += warps * kRowsPerWarp) {
    const int64_t row = first + sub;
    finish(row < rows ? accumulate_with<T, A>(op, in + row * len, 0, len, lane, W, false) : reduce_init<A>(op), row);
  }
}

// Block per (row, chunk): chunk c of row r covers [c*chunk, (c+1)*chunk).
// With one chunk it writes out[r]; else partial[r * chunks + c] in A.
template <typename T, typename O, typename A>
__global__ void row_reduce_block(ReduceOp op, const T* __restrict__ in, O* __restrict__ out, A* __restrict__ partial,
                                 int64_t len, int64_t chunk, bool vec) {
  int64_t row = blockIdx.y;
  int64_t c = blockIdx.x;
  int64_t b = c * chunk, e = min(len, b + chunk);
  A acc = accumulate<T, A>(op, in + row * len, b, e, threadIdx.x, blockDim.x, vec);
  acc = block_reduce(op, acc);
  if (threadIdx.x == 0) {
    if (gridDim.x == 1) out[row] = static_cast<O>(acc);
    else partial[row * gridDim.x + c] = acc;
  }
}

// out[b, j] = reduce_i in[b, i, j]: a thread per G adjacent columns (16-byte
// loads when G > 1), 8 thread rows walking the rows of one chunk, combined
// in shared memory. With several chunks (blockIdx.y) each writes
// partial[b, chunk, j] and a second launch reduces those columns.
template <typename T, typename O, typename A, int G>
__global__ void column_reduce(ReduceOp op, const T* __restrict__ in, O* __restrict__ out, A* __restrict__ partial,
                              int64_t len, int64_t width, int64_t chunk) {
  __shared__ A tile[8][32 * G + 1];
  const int64_t batch = blockIdx.z, c = blockIdx.y, chunks = gridDim.y;
  const int64_t j = (static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x) * G;
  A acc[G], comp[G];
#pragma unroll
  for (int k = 0; k < G; ++k) acc[k] = reduce_init<A>(op), comp[k] = A(0);
  if (j < width) {
    const T* base = in + batch * len * width + j;
    const int64_t end = min(len, (c + 1) * chunk);
#pragma unroll 4
    for (int64_t i = c * chunk + threadIdx.y; i < end; i += blockDim.y) {
      if constexpr (G > 1) {
        const Vec<T> v = *reinterpret_cast<const Vec<T>*>(base + i * width);
#pragma unroll
        for (int k = 0; k < G; ++k) add_to(op, acc[k], comp[k], load_acc<A>(op, v.v[k]));
      } else {
        add_to(op, acc[0], comp[0], load_acc<A>(op, base[i * width]));
      }
    }
  }
#pragma unroll
  for (int k = 0; k < G; ++k) tile[threadIdx.y][threadIdx.x * G + k] = compensated(acc[k], comp[k]);
  __syncthreads();
  if (threadIdx.y != 0 || j >= width) return;
#pragma unroll
  for (int k = 0; k < G; ++k) acc[k] = tile[0][threadIdx.x * G + k];
  for (int y = 1; y < blockDim.y; ++y) {
#pragma unroll
    for (int k = 0; k < G; ++k) acc[k] = combine(op, acc[k], tile[y][threadIdx.x * G + k]);
  }
#pragma unroll
  for (int k = 0; k < G; ++k) {
    if (chunks == 1) out[batch * width + j + k] = static_cast<O>(acc[k]);
    else partial[(batch * chunks + c) * width + j + k] = acc[k];
  }
}

template <typename T, typename O, typename A>
void launch_columns(ReduceOp op, const T* in, O* out, int64_t batches, int64_t len, int64_t width, cudaStream_t s,
                    const char* nm) {
  constexpr int V = Vec<T>::n;
  const bool vec = V > 1 && width % V == 0 && aligned16(in);
  const int G = vec ? V : 1;
  auto kernel = vec ? column_reduce<T, O, A, V> : column_reduce<T, O, A, 1>;
  const int64_t col_blocks = (width + 32 * G - 1) / (32 * G);
  // As many blocks as the chip holds at once, rounded down (one block more
  // would be a second wave), each walking at least 64 rows.
  const int sms = device_sm_count() > 0 ? device_sm_count() : 132;
  int per_sm = 0;
  KILN_CUDA_CHECK(nm, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 256, 0));
  int64_t chunks = std::clamp<int64_t>(std::max(per_sm, 1) * sms / (col_blocks * batches), 1,
                                       std::max<int64_t>(1, len / 64));
  chunks = std::min<int64_t>(chunks, 65535);
  const int64_t chunk = (len + chunks - 1) / chunks;
  chunks = (len + chunk - 1) / chunk;
  A* partial = chunks > 1 ? static_cast<A*>(scratch(batches * chunks * width * sizeof(A), nm)) : nullptr;
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks), static_cast<unsigned>(batches));
  kernel<<<grid, dim3(32, 8), 0, s>>>(op, in, out, partial, len, width, chunk);
  if (chunks == 1) return;
  KILN_CUDA_CHECK_LAUNCH(nm);
  const dim3 grid2(static_cast<unsigned>((width + 31) / 32), 1, static_cast<unsigned>(batches));
  column_reduce<A, O, A, 1><<<grid2, dim3(32, 8), 0, s>>>(op, partial, out, nullptr, chunks, width, chunks);
}

template <typename T, typename O, typename A>
__global__ void fill_init(ReduceOp op, O* out, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<O>(reduce_init<A>(op));
}

template <typename T, typename O, typename A>
__global__ void elementwise_cast(ReduceOp op, const T* in, O* out, int64_t n) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = static_cast<O>(load_acc<A>(op, in[i]));
  }
}

template <typename T, typename O, typename A>
void launch_rows(ReduceOp op, const T* in, O* out, int64_t rows, int64_t len, cudaStream_t s, const char* nm) {
  bool vec = aligned16(in) && (len * static_cast<int64_t>(sizeof(T))) % 16 == 0;
  int sms = device_sm_count() > 0 ? device_sm_count() : 132;
  if (len * static_cast<int64_t>(sizeof(T)) <= 256 && rows >= 2 * sms) {
    const int64_t units = vec ? len / Vec<T>::n : (len + 3) / 4;
    const unsigned g = static_cast<unsigned>(std::min<int64_t>((rows + 63) / 64, static_cast<int64_t>(sms) * 16));
    if (units > 8) row_reduce_short<T, O, A, 16><<<g, 256, 0, s>>>(op, in, out, rows, len, vec);
    else if (units > 4) row_reduce_short<T, O, A, 8><<<g, 256, 0, s>>>(op, in, out, rows, len, vec);
    else if (units > 2) row_reduce_short<T, O, A, 4><<<g, 256, 0, s>>>(op, in, out, rows, len, vec);
    else row_reduce_short<T, O, A, 2><<<g, 256, 0, s>>>(op, in, out, rows, len, vec);
    return;
  }
  if (len <= 4096 || rows >= 4 * sms) {
    int rows_per_block = 8;
    unsigned g = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
    if (len > 4096 && rows <= 65535) {
      // Many long rows: a block per row.
      row_reduce_block<T, O, A><<<dim3(1, static_cast<unsigned>(rows)), 512, 0, s>>>(op, in, out, nullptr, len, len, vec);
    } else {
      row_reduce_warp<T, O, A><<<g, rows_per_block * 32, 0, s>>>(op, in, out, rows, len, vec);
    }
    return;
  }
  // Few long rows: split each row so the grid fills the chip.
  int64_t chunks = std::max<int64_t>(1, std::min<int64_t>((4 * sms + rows - 1) / rows, len / 4096));
  int64_t chunk = (len + chunks - 1) / chunks;
  chunk = (chunk + 15) / 16 * 16;  // keeps chunk starts vector-aligned
  chunks = (len + chunk - 1) / chunk;
  if (chunks == 1) {
    row_reduce_block<T, O, A><<<dim3(1, static_cast<unsigned>(rows)), 512, 0, s>>>(op, in, out, nullptr, len, len, vec);
    return;
  }
  A* partial = static_cast<A*>(scratch(rows * chunks * sizeof(A), nm));
  row_reduce_block<T, O, A><<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(rows)), 512, 0, s>>>(
      op, in, out, partial, len, chunk, vec);
  KILN_CUDA_CHECK_LAUNCH(nm);
  row_reduce_warp<A, O, A><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, s>>>(op, partial, out, rows, chunks, false);
}

template <typename T, typename O>
void reduce_typed(ReduceOp op, const array& in, array& out, const std::vector<int>& axes, const char* nm) {
  using A = std::conditional_t<std::is_same_v<O, bool>, bool, compute_t<O>>;
  cudaStream_t s = current_stream();
  O* dst = reinterpret_cast<O*>(out_ptr(out));
  int64_t n_out = static_cast<int64_t>(out.size());
  if (n_out == 0) return;
  if (in.size() == 0) {
    fill_init<T, O, A><<<static_cast<unsigned>((n_out + 255) / 256), 256, 0, s>>>(op, dst, n_out);
    KILN_CUDA_CHECK_LAUNCH(nm);
    return;
  }
  const auto& d = *in.desc();
  const char* src = in_ptr(in);
  if (!detail::is_row_contiguous(d.shape, d.strides)) {
    char* tmp = static_cast<char*>(scratch(in.nbytes(), nm));
    copy_strided(src, d.dtype, d.shape, d.strides, tmp, d.dtype, row_major_strides(d.shape), nm);
    src = tmp;
  }
  const T* p = reinterpret_cast<const T*>(src);
  Shape shape = in.shape();
  ReducePlan plan = plan_reduction(shape, axes);
  const std::vector<int64_t>& sizes = plan.sizes;
  const std::vector<bool>& kinds = plan.reduced;
  if (sizes.empty() || (sizes.size() == 1 && !kinds[0])) {
    elementwise_cast<T, O, A><<<grid_for(n_out, 4, 256), 256, 0, s>>>(op, p, dst, n_out);
  } else if (kinds.back() && sizes.size() <= 2) {
    launch_rows<T, O, A>(op, p, dst, sizes.size() == 1 ? 1 : sizes[0], sizes.back(), s, nm);
  } else if (!kinds.back() && sizes.size() <= 3 && sizes.back() >= 64 && (sizes.size() < 3 || sizes[0] <= 65535)) {
    int64_t batches = sizes.size() == 3 ? sizes[0] : 1;
    launch_columns<T, O, A>(op, p, dst, batches, sizes[sizes.size() - 2], sizes.back(), s, nm);
  } else {
    // Move the reduced axes last, then reduce rows.
    ReducedLastView v = reduced_axes_last(shape, axes);
    char* tmp = static_cast<char*>(scratch(in.nbytes(), nm));
    copy_strided(reinterpret_cast<const char*>(p), d.dtype, v.shape, v.strides, tmp, d.dtype, row_major_strides(v.shape), nm);
    launch_rows<T, O, A>(op, reinterpret_cast<const T*>(tmp), dst, n_out, v.row_length, s, nm);
  }
  KILN_CUDA_CHECK_LAUNCH(nm);
}

const char* reduce_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::prod: return "prod";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::all: return "all";
    case ReduceOp::any: return "any";
  }
  return "reduce";
}

// ---- argmax / argmin ----
// (best, idx) takes (ov, oi) when that is the better candidate: the first
// NaN wins; else strictly better; ties keep the smaller index; idx < 0 is
// no candidate yet.
template <typename C>
__device__ __forceinline__ void arg_merge(C& best, int64_t& idx, C ov, int64_t oi, bool is_max) {
  bool take;
  if (oi < 0) take = false;
  else if (idx < 0) take = true;
  else {
    bool bn = best != best, on = ov != ov;
    if (bn || on) take = on && (!bn || oi < idx);
    else take = (is_max ? ov > best : ov < best) || (ov == best && oi < idx);
  }
  if (take) { best = ov; idx = oi; }
}

template <typename C>
__device__ __forceinline__ void arg_warp_merge(C& best, int64_t& idx, bool is_max) {
  for (int o = 16; o > 0; o >>= 1) {
    C ov;
    if constexpr (sizeof(C) >= 4) ov = __shfl_xor_sync(0xffffffffu, best, o);
    else ov = static_cast<C>(__shfl_xor_sync(0xffffffffu, static_cast<int>(best), o));
    int64_t oi = __shfl_xor_sync(0xffffffffu, idx, o);
    arg_merge(best, idx, ov, oi, is_max);
  }
}

// Lanes stride over [i0, i1) of row p: each lane's first NaN or best value.
template <typename T, typename C>
__device__ __forceinline__ void arg_scan(const T* p, int64_t i0, int64_t i1, int64_t step, bool is_max, C& best,
                                         int64_t& idx) {
  for (int64_t i = i0; i < i1; i += step) arg_merge(best, idx, to_compute(p[i]), i, is_max);
}

// A warp per row of the (contiguous) permuted input.
template <typename T>
__global__ void arg_reduce(const T* __restrict__ in, uint32_t* __restrict__ out, int64_t rows, int64_t len,
                           bool is_max) {
  int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  int lane = threadIdx.x % 32;
  using C = compute_t<T>;
  C best = C(0);
  int64_t idx = -1;
  arg_scan<T, C>(in + row * len, lane, len, 32, is_max, best, idx);
  arg_warp_merge(best, idx, is_max);
  if (lane == 0) out[row] = static_cast<uint32_t>(idx);
}

// Few long rows (a decode step's argmax over a 128k vocabulary took 0.58 ms
// in one warp): block (s, row) scans split s of the row and writes its
// winner; arg_reduce_finish merges a row's splits in a warp.
constexpr int kArgThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kArgThreads) arg_reduce_split(const T* __restrict__ in, compute_t<T>* part_v,
                                                                int64_t* part_i, int64_t len, int64_t chunk,
                                                                bool is_max) {
  using C = compute_t<T>;
  __shared__ C sv[kArgThreads / 32];
  __shared__ int64_t si[kArgThreads / 32];
  const int64_t row = blockIdx.y, i0 = blockIdx.x * chunk, i1 = min(len, i0 + chunk);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  C best = C(0);
  int64_t idx = -1;
  arg_scan<T, C>(in + row * len, i0 + threadIdx.x, i1, kArgThreads, is_max, best, idx);
  arg_warp_merge(best, idx, is_max);
  if (lane == 0) sv[warp] = best, si[warp] = idx;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgThreads / 32; ++w) arg_merge(best, idx, sv[w], si[w], is_max);
    part_v[row * gridDim.x + blockIdx.x] = best;
    part_i[row * gridDim.x + blockIdx.x] = idx;
  }
}

template <typename C>
__global__ void arg_reduce_finish(const C* part_v, const int64_t* part_i, uint32_t* __restrict__ out, int64_t rows,
                                  int splits, bool is_max) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  C best = C(0);
  int64_t idx = -1;
  for (int s = lane; s < splits; s += 32) arg_merge(best, idx, part_v[row * splits + s], part_i[row * splits + s], is_max);
  arg_warp_merge(best, idx, is_max);
  if (lane == 0) out[row] = static_cast<uint32_t>(idx);
}

}  // namespace

void reduce_complex(ReduceOp op, const array& in, array& out, const std::vector<int>& axes);  // reduce_complex.cu

}  // namespace cuda

void Reduce::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  const char* nm = cuda::reduce_name(op_);
  cuda::allocate(out, nm);
  if (in.dtype() == Dtype::complex64 && (op_ == ReduceOp::sum || op_ == ReduceOp::prod)) {
    cuda::reduce_complex(op_, in, out, axes_);
    return;
  }
  Dtype od = out.dtype();
  cuda::dispatch(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (od == in.dtype()) return cuda::reduce_typed<T, T>(op_, in, out, axes_, nm);
    if (od == Dtype::bool_) return cuda::reduce_typed<T, bool>(op_, in, out, axes_, nm);
    if constexpr (std::is_integral_v<T>) {
      if (od == Dtype::int32) return cuda::reduce_typed<T, int32_t>(op_, in, out, axes_, nm);
      if (od == Dtype::uint32) return cuda::reduce_typed<T, uint32_t>(op_, in, out, axes_, nm);
      if (od == Dtype::int64) return cuda::reduce_typed<T, int64_t>(op_, in, out, axes_, nm);
    }
    throw Error(std::string("[") + nm + "] unsupported output dtype " + dtype_name(od));
  });
}

void ArgReduce::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  const char* nm = is_max_ ? "argmax" : "argmin";
  const auto& d = *in.desc();
  int nd = in.ndim();
  int64_t len = d.shape[axis_];
  if (len == 0) throw Error(std::string("[") + nm + "] cannot reduce an empty axis; input " + format_shape(d.shape));
  cuda::allocate(out, nm);
  int64_t rows = static_cast<int64_t>(out.size());
  if (rows == 0) return;
  Shape pshape;
  Strides pstrides;
  for (int i = 0; i < nd; ++i) {
    if (i != axis_) {
      pshape.push_back(d.shape[i]);
      pstrides.push_back(d.strides[i]);
    }
  }
  pshape.push_back(d.shape[axis_]);
  pstrides.push_back(d.strides[axis_]);
  const char* src = cuda::in_ptr(in);
  char* dst = cuda::out_ptr(out);
  if (!detail::is_row_contiguous(pshape, pstrides)) {
    char* tmp = static_cast<char*>(cuda::scratch(in.nbytes(), nm));
    cuda::copy_strided(src, d.dtype, pshape, pstrides, tmp, d.dtype, row_major_strides(pshape), nm);
    src = tmp;
  }
  cudaStream_t s = cuda::current_stream();
  bool is_max = is_max_;
  // Splits of 4096 elements where a warp per row would leave the GPU idle.
  const int64_t splits = std::min<int64_t>((len + 4095) / 4096, 1024);
  const bool split = splits >= 4 && rows <= 1024;
  cuda::dispatch(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (split) {
      using C = cuda::compute_t<T>;
      const int64_t chunk = (len + splits - 1) / splits;
      const unsigned n = static_cast<unsigned>((len + chunk - 1) / chunk);
      auto* pv = static_cast<C*>(cuda::scratch(rows * n * sizeof(C), nm));
      auto* pi = static_cast<int64_t*>(cuda::scratch(rows * n * sizeof(int64_t), nm));
      cuda::arg_reduce_split<T><<<dim3(n, static_cast<unsigned>(rows)), cuda::kArgThreads, 0, s>>>(
          reinterpret_cast<const T*>(src), pv, pi, len, chunk, is_max);
      cuda::arg_reduce_finish<C><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, s>>>(
          pv, pi, reinterpret_cast<uint32_t*>(dst), rows, static_cast<int>(n), is_max);
    } else {
      cuda::arg_reduce<T><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, s>>>(
          reinterpret_cast<const T*>(src), reinterpret_cast<uint32_t*>(dst), rows, len, is_max);
    }
  });
  KILN_CUDA_CHECK_LAUNCH(nm);
}

}  // namespace kiln
