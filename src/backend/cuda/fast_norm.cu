// fast::rms_norm, fast::layer_norm and fast::add_rms_norm on the GPU
// (kiln bench rows D2 rms_norm, layer_norm).
//
// Memory-bound: the floor is one read of x and one write of y. A row is
// handled by one group of threads - a warp for narrow rows (up to 128
// 16-byte vectors: fp32 width <= 512, bf16 <= 1024; eight rows per block,
// no shared memory, shuffles only) and a block for wide rows - that loads
// it with 128-bit loads into registers, reduces, and writes it from the
// registers: one pass over DRAM. With the values in registers, layer_norm's
// variance is the exact two-step one (mean first, then the centered
// squares). Rows too wide for the registers (or not 16-byte aligned) take a
// loop that re-reads the row (from L2 the second time), with layer_norm's
// sums shifted by the row's first element so that they do not cancel.
// Accumulation is in float; the normalized value is rounded to the output
// type before the weight multiplies it, as the fallback does. The weight
// and bias are read with the same 128-bit loads as x (one load per 8 bf16
// elements, not eight).
#include "backend/cuda/kernel_utils.cuh"
#include "core/ops_util.h"
#include "core/primitives_fast_norm.h"

namespace kiln {
namespace cuda {
namespace {

template <typename T, int E>
struct alignas(sizeof(T) * E) Pack {
  T v[E];
};

// Sum over the row's group: the warp, or the whole block.
template <bool kWarpRow>
__device__ __forceinline__ float group_sum(float v) {
  if constexpr (kWarpRow) {
    return warp_sum(v);
  } else {
    return block_sum(v);
  }
}

// The normalized value rounded to T, times the weight (rounded), plus the
// bias; wv / bv are the weight and bias elements (read as vectors).
template <typename T>
__device__ __forceinline__ T finish(float normalized, bool has_w, T wv, bool has_b, T bv) {
  float v = to_compute(convert<T>(normalized));
  if (has_w) v = to_compute(convert<T>(v * to_compute(wv)));
  if (has_b) v += to_compute(bv);
  return convert<T>(v);
}

// Vector idx of the weight or bias row (whatever, where there is none).
template <typename P, typename T>
__device__ __forceinline__ P load_or_any(const T* p, int64_t idx) {
  P out{};
  if (p) out = reinterpret_cast<const P*>(p)[idx];
  return out;
}

// The rows of x [rows, d] normalized into y; with a residual r (rms_norm
// only: fast::add_rms_norm), h = x + r rounded to T is written to h and
// normalized instead.
template <typename T>
struct NormArgs {
  const T* x;
  const T* r;  // nullptr: no residual
  const T* w;  // nullptr: no weight
  const T* b;  // nullptr: no bias
  T* h;
  T* y;
  int64_t rows, d;
  float eps;
};

// kVecs > 0: each thread holds vectors lane, lane + G, ... (kVecs of them)
// of its row in registers; kVecs == 0: the re-reading loop.
template <bool kLayer, typename T, int E, int kVecs, bool kWarpRow>
__global__ void norm_rows(const NormArgs<T> args) {
  allow_dependents();
  using P = Pack<T, E>;
  const T* x = args.x;  // h may overwrite it in place: not __restrict__
  const T* __restrict__ w = args.w;
  const T* __restrict__ b = args.b;
  const int64_t rows = args.rows, d = args.d;
  const float eps = args.eps;
  int64_t row;
  int lane, group;
  if constexpr (kWarpRow) {
    row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    lane = threadIdx.x % 32;
    group = 32;
    if (row >= rows) return;  // whole warps leave; no block barrier follows
  } else {
    row = blockIdx.x;
    lane = threadIdx.x;
    group = blockDim.x;
  }
  const P* xr = reinterpret_cast<const P*>(x + row * d);
  const P* rr = args.r ? reinterpret_cast<const P*>(args.r + row * d) : nullptr;
  P* hr = args.r ? reinterpret_cast<P*>(args.h + row * d) : nullptr;
  P* yr = reinterpret_cast<P*>(args.y + row * d);
  // x + r, rounded to T as the add would, stored to h (h may be x or r:
  // each element is read and written by the same thread).
  auto load = [&](int64_t idx) {
    P a = xr[idx];
    if (rr) {
      const P c = rr[idx];
#pragma unroll
      for (int e = 0; e < E; ++e) a.v[e] = convert<T>(to_compute(a.v[e]) + to_compute(c.v[e]));
      hr[idx] = a;
    }
    return a;
  };
  const int64_t nv = d / E;
  const float n = static_cast<float>(d);
  if constexpr (kVecs > 0) {
    float v[kVecs][E];
    float s = 0;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int64_t idx = lane + static_cast<int64_t>(i) * group;
      if (idx < nv) {
        const P a = load(idx);
#pragma unroll
        for (int e = 0; e < E; ++e) {
          v[i][e] = to_compute(a.v[e]);
          s += kLayer ? v[i][e] : v[i][e] * v[i][e];
        }
      }
    }
    float mean = 0, inv;
    if constexpr (kLayer) {
      mean = group_sum<kWarpRow>(s) / n;
      float c = 0;
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        if (lane + static_cast<int64_t>(i) * group < nv) {
#pragma unroll
          for (int e = 0; e < E; ++e) {
            const float t = v[i][e] - mean;
            c += t * t;
          }
        }
      }
      inv = rsqrtf(group_sum<kWarpRow>(c) / n + eps);
    } else {
      inv = rsqrtf(group_sum<kWarpRow>(s) / n + eps);
    }
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int64_t idx = lane + static_cast<int64_t>(i) * group;
      if (idx < nv) {
        const P wp = load_or_any<P>(w, idx), bp = load_or_any<P>(b, idx);
        P o;
#pragma unroll
        for (int e = 0; e < E; ++e) o.v[e] = finish<T>((v[i][e] - mean) * inv, w, wp.v[e], b, bp.v[e]);
        yr[idx] = o;
      }
    }
  } else {
    const float shift = kLayer ? to_compute(x[row * d]) : 0.0f;
    float s1 = 0, s2 = 0;
    for (int64_t idx = lane; idx < nv; idx += group) {
      const P a = load(idx);
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float t = to_compute(a.v[e]) - shift;
        s1 += t;
        s2 += t * t;
      }
    }
    float mean = 0, inv;
    if constexpr (kLayer) {
      const float m1 = group_sum<kWarpRow>(s1) / n;
      const float m2 = group_sum<kWarpRow>(s2) / n;
      mean = m1 + shift;
      inv = rsqrtf(fmaxf(m2 - m1 * m1, 0.0f) + eps);
    } else {
      inv = rsqrtf(group_sum<kWarpRow>(s2) / n + eps);
    }
    const P* again = rr ? hr : xr;  // the second pass reads what the first wrote
    for (int64_t idx = lane; idx < nv; idx += group) {
      const P a = again[idx];
      const P wp = load_or_any<P>(w, idx), bp = load_or_any<P>(b, idx);
      P o;
#pragma unroll
      for (int e = 0; e < E; ++e) o.v[e] = finish<T>((to_compute(a.v[e]) - mean) * inv, w, wp.v[e], b, bp.v[e]);
      yr[idx] = o;
    }
  }
}

template <bool kLayer, typename T, int E>
void launch_norm_vec(const NormArgs<T>& a, cudaStream_t s) {
  const int64_t nv = a.d / E;
  if (nv <= 128) {
    constexpr int kBlock = 256;  // eight rows
    const unsigned grid = static_cast<unsigned>((a.rows + kBlock / 32 - 1) / (kBlock / 32));
    if (nv <= 32) norm_rows<kLayer, T, E, 1, true><<<grid, kBlock, 0, s>>>(a);
    else if (nv <= 64) norm_rows<kLayer, T, E, 2, true><<<grid, kBlock, 0, s>>>(a);
    else norm_rows<kLayer, T, E, 4, true><<<grid, kBlock, 0, s>>>(a);
    return;
  }
  const unsigned grid = static_cast<unsigned>(a.rows);
  if (nv <= 256 * 8) {
    const int block = static_cast<int>(std::min<int64_t>(256, (nv + 31) / 32 * 32));
    const int64_t per_thread = (nv + block - 1) / block;
    if (per_thread <= 1) norm_rows<kLayer, T, E, 1, false><<<grid, block, 0, s>>>(a);
    else if (per_thread <= 2) norm_rows<kLayer, T, E, 2, false><<<grid, block, 0, s>>>(a);
    else if (per_thread <= 4) norm_rows<kLayer, T, E, 4, false><<<grid, block, 0, s>>>(a);
    else norm_rows<kLayer, T, E, 8, false><<<grid, block, 0, s>>>(a);
    return;
  }
  norm_rows<kLayer, T, E, 0, false><<<grid, 1024, 0, s>>>(a);
}

template <bool kLayer, typename T>
void launch_norm(const NormArgs<T>& a, cudaStream_t s) {
  constexpr int E = 16 / sizeof(T);
  auto ok = [](const void* p) { return !p || aligned16(p); };
  const bool vec = a.d % E == 0 && ok(a.x) && ok(a.r) && ok(a.w) && ok(a.b) && ok(a.h) && ok(a.y);
  if (vec) launch_norm_vec<kLayer, T, E>(a, s);
  else launch_norm_vec<kLayer, T, 1>(a, s);
}

// inputs: x, weight (0-d: none), [bias]; with a residual (AddRMSNorm):
// x, residual, weight and outputs h, y.
template <bool kLayer>
void norm_gpu(const char* op, const std::vector<array>& inputs, array* h, array& out, float eps) {
  const bool residual = h != nullptr;
  const array& in = inputs[0];
  const array& w = inputs[residual ? 2 : 1];
  // allocate_or_donate takes only a row-major buffer at offset 0 (else it allocates).
  if (residual) {
    allocate_or_donate(*h, in, op);
    allocate_or_donate(out, inputs[1], op);
  } else {
    allocate_or_donate(out, in, op);
  }
  const int64_t d = in.shape().back();
  const char* src = row_major(in, op);
  const char* res = residual ? row_major(inputs[1], op) : nullptr;
  const char* pw = w.ndim() == 0 ? nullptr : in_ptr(w);
  const char* pb = kLayer && inputs[2].ndim() != 0 ? in_ptr(inputs[2]) : nullptr;
  char* ph = residual ? out_ptr(*h) : nullptr;
  char* dst = out_ptr(out);
  cudaStream_t s = current_stream();
  dispatch(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_half_v<T> || std::is_same_v<T, float>) {
      const NormArgs<T> a{reinterpret_cast<const T*>(src), reinterpret_cast<const T*>(res),
                          reinterpret_cast<const T*>(pw),  reinterpret_cast<const T*>(pb),
                          reinterpret_cast<T*>(ph),        reinterpret_cast<T*>(dst),
                          static_cast<int64_t>(in.size()) / d, d, eps};
      launch_norm<kLayer, T>(a, s);
    } else {
      throw Error(std::string("[") + op + "] no GPU kernel for " + dtype_name(in.dtype()));
    }
  });
  KILN_CUDA_CHECK_LAUNCH(op);
}

}  // namespace
}  // namespace cuda

void RMSNorm::eval_gpu(const std::vector<array>& inputs, array& out) {
  cuda::norm_gpu<false>("rms_norm", inputs, nullptr, out, eps_);
}

void LayerNorm::eval_gpu(const std::vector<array>& inputs, array& out) {
  cuda::norm_gpu<true>("layer_norm", inputs, nullptr, out, eps_);
}

void AddRMSNorm::eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  cuda::norm_gpu<false>("add_rms_norm", inputs, &outputs[0], outputs[1], eps_);
}

}  // namespace kiln
