// fast::rope on the GPU (kiln bench row D2 rope).
//
// One read and one write of x. Where the rotary part is the whole row
// (dims == D, the usual case) and rows are 16-byte aligned, a thread rotates
// a few consecutive pairs with 128-bit loads and stores; otherwise a thread
// rotates one pair of one row (consecutive threads take consecutive pairs,
// so both the interleaved layout, pairs (2i, 2i+1), and the half-split
// layout, pairs (i, i + dims/2), read coalesced) or copies one of the
// features past `dims`. The angle (offset[b] + t) * scale * inv_freq_i is formed in float
// and sincosf evaluates it with full range reduction: positions reach 10^5,
// where the fast __sincosf would be off by far more than an ulp.
#include <cmath>

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

template <typename T>
__global__ void rope_kernel(const T* __restrict__ x, T* __restrict__ y, const int32_t* __restrict__ offsets,
                            bool per_batch_offset, const float* __restrict__ freqs, int64_t rows, int64_t per_batch,
                            int64_t t_len, int64_t d, int dims, bool traditional, float log2_base, float scale,
                            float sign) {
  const int half = dims / 2;
  const int64_t units = half + (d - dims);  // pairs, then copied features
  const int64_t total = rows * units;
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < total;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = u / units;
    const int64_t j = u % units;
    const T* xr = x + row * d;
    T* yr = y + row * d;
    if (j >= half) {
      const int64_t k = dims + (j - half);
      if (xr != yr) yr[k] = xr[k];
      continue;
    }
    const int i = static_cast<int>(j);
    const int64_t b = row / per_batch;
    const int64_t pos = static_cast<int64_t>(offsets[per_batch_offset ? b : 0]) + row % t_len;
    const float inv = freqs ? 1.0f / freqs[i] : exp2f(-static_cast<float>(i) * (log2_base / half));
    float sn, c;
    sincosf(static_cast<float>(pos) * scale * inv, &sn, &c);
    sn *= sign;
    const int64_t i1 = traditional ? 2 * i : i;
    const int64_t i2 = traditional ? i1 + 1 : i1 + half;
    const float x1 = to_compute(xr[i1]), x2 = to_compute(xr[i2]);
    yr[i1] = convert<T>(x1 * c - x2 * sn);
    yr[i2] = convert<T>(x1 * sn + x2 * c);
  }
}

// The common case, dims == D with 16-byte aligned rows: a thread rotates V
// consecutive pairs with 128-bit loads and stores (half-split: V features
// of each half; interleaved: one vector of V pairs), for up to kHeads rows
// that share a position (the heads of [B, H, T, D]: rows t_len apart), so
// that one sincosf serves kHeads rows. Without that, bf16 rope evaluated
// 16 sincosf per 32 bytes of x and ran at 0.60 of the copy bandwidth
// (session 13; fp32, half the angles per byte, 0.83).
template <typename T, int V, bool kTraditional>
__global__ void rope_vec_kernel(const T* __restrict__ x, T* __restrict__ y, const int32_t* __restrict__ offsets,
                                bool per_batch_offset, const float* __restrict__ freqs, int64_t batches,
                                int64_t per_batch, int64_t t_len, int dims, float log2_base, float scale, float sign) {
  constexpr int kHeads = 4;
  using P = Pack<T, kTraditional ? 2 * V : V>;
  const int half = dims / 2;
  const int groups = half / V;
  const int64_t heads = per_batch / t_len;
  const int64_t chunks = (heads + kHeads - 1) / kHeads;
  const int64_t total = batches * chunks * t_len * groups;
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < total;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int i0 = static_cast<int>(u % groups) * V;
    int64_t r = u / groups;
    const int64_t t = r % t_len;
    r /= t_len;
    const int64_t h0 = (r % chunks) * kHeads, b = r / chunks;
    const int64_t pos = static_cast<int64_t>(offsets[per_batch_offset ? b : 0]) + t;
    float c[V], sn[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int i = i0 + k;
      const float inv = freqs ? 1.0f / freqs[i] : exp2f(-static_cast<float>(i) * (log2_base / half));
      sincosf(static_cast<float>(pos) * scale * inv, &sn[k], &c[k]);
      sn[k] *= sign;
    }
    const int nh = static_cast<int>(heads - h0 < kHeads ? heads - h0 : kHeads);
    const int64_t row0 = b * per_batch + h0 * t_len + t;
    // All loads first (up to 2 * kHeads 16-byte vectors in flight), then
    // the rotations and stores.
    P lo[kHeads], hi[kHeads];
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      if (h < nh) {
        const T* xr = x + (row0 + h * t_len) * dims;
        if constexpr (kTraditional) {
          lo[h] = *reinterpret_cast<const P*>(xr + 2 * i0);
        } else {
          lo[h] = *reinterpret_cast<const P*>(xr + i0);
          hi[h] = *reinterpret_cast<const P*>(xr + half + i0);
        }
      }
    }
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      if (h >= nh) break;
      T* yr = y + (row0 + h * t_len) * dims;
      if constexpr (kTraditional) {
        P o;
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float x1 = to_compute(lo[h].v[2 * k]), x2 = to_compute(lo[h].v[2 * k + 1]);
          o.v[2 * k] = convert<T>(x1 * c[k] - x2 * sn[k]);
          o.v[2 * k + 1] = convert<T>(x1 * sn[k] + x2 * c[k]);
        }
        *reinterpret_cast<P*>(yr + 2 * i0) = o;
      } else {
        P o1, o2;
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float x1 = to_compute(lo[h].v[k]), x2 = to_compute(hi[h].v[k]);
          o1.v[k] = convert<T>(x1 * c[k] - x2 * sn[k]);
          o2.v[k] = convert<T>(x1 * sn[k] + x2 * c[k]);
        }
        *reinterpret_cast<P*>(yr + i0) = o1;
        *reinterpret_cast<P*>(yr + half + i0) = o2;
      }
    }
  }
}

}  // namespace
}  // namespace cuda

void RoPE::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  const auto& dsc = *in.desc();
  const bool contiguous = detail::is_row_contiguous(dsc.shape, dsc.strides);
  if (contiguous && dsc.offset == 0) cuda::allocate_or_donate(out, in, "rope");
  else cuda::allocate(out, "rope");
  if (in.size() == 0) return;
  const Shape& shape = in.shape();
  const int64_t d = shape.back();
  const int64_t t_len = shape[shape.size() - 2];
  const int64_t rows = static_cast<int64_t>(in.size()) / d;
  const int64_t per_batch = rows / shape[0];
  const char* src = cuda::in_ptr(in);
  if (!contiguous) {
    char* tmp = static_cast<char*>(cuda::scratch(in.nbytes(), "rope"));
    cuda::copy_strided(src, dsc.dtype, dsc.shape, dsc.strides, tmp, dsc.dtype, row_major_strides(dsc.shape), "rope");
    src = tmp;
  }
  const auto* offsets = reinterpret_cast<const int32_t*>(cuda::in_ptr(inputs[1]));
  const bool per_batch_offset = inputs[1].size() > 1;
  const auto* freqs = inputs.size() == 3 ? reinterpret_cast<const float*>(cuda::in_ptr(inputs[2])) : nullptr;
  char* dst = cuda::out_ptr(out);
  cudaStream_t s = cuda::current_stream();
  const int64_t units = rows * (dims_ / 2 + (d - dims_));
  constexpr int kBlock = 256;
  const unsigned grid = cuda::grid_for(units, 4, kBlock);
  const float log2_base = std::log2(base_);
  const float sign = forward_ ? 1.0f : -1.0f;
  cuda::dispatch(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (cuda::is_half_v<T> || std::is_same_v<T, float>) {
      // 16 bytes per load: V pairs of the interleaved layout, or V features
      // of each half of the split one.
      constexpr int kSplitV = 16 / sizeof(T), kTradV = 8 / sizeof(T);
      const int v = traditional_ ? kTradV : kSplitV;
      if (dims_ == d && (dims_ / 2) % v == 0 && cuda::aligned16(src) && cuda::aligned16(dst)) {
        auto launch = [&](auto vtag, auto trad) {
          constexpr int V = decltype(vtag)::value;
          const int64_t chunks = (per_batch / t_len + 3) / 4;  // rope_vec_kernel's kHeads
          const unsigned vgrid = cuda::grid_for(shape[0] * chunks * t_len * (dims_ / 2 / V), 4, kBlock);
          cuda::rope_vec_kernel<T, V, decltype(trad)::value><<<vgrid, kBlock, 0, s>>>(
              reinterpret_cast<const T*>(src), reinterpret_cast<T*>(dst), offsets, per_batch_offset, freqs,
              shape[0], per_batch, t_len, dims_, log2_base, scale_, sign);
        };
        if (traditional_) launch(std::integral_constant<int, kTradV>{}, std::true_type{});
        else launch(std::integral_constant<int, kSplitV>{}, std::false_type{});
        return;
      }
      cuda::rope_kernel<T><<<grid, kBlock, 0, s>>>(reinterpret_cast<const T*>(src), reinterpret_cast<T*>(dst),
                                                    offsets, per_batch_offset, freqs, rows, per_batch, t_len, d, dims_,
                                                    traditional_, log2_base, scale_, sign);
    } else {
      throw Error(std::string("[rope] no GPU kernel for ") + dtype_name(in.dtype()));
    }
  });
  KILN_CUDA_CHECK_LAUNCH("rope");
}

}  // namespace kiln
