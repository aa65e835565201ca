// Convolution on the GPU (kiln bench row D3 conv2d).
//
// Why it is shaped so: a convolution with enough channels per group is a
// GEMM over patches, [N * P, taps * Cg] x [taps * Cg, Og], and cuBLASLt runs
// that at the tensor cores' rate; so an im2col kernel lays the patches of a
// chunk of output rows out in scratch memory (consecutive threads write
// consecutive channels of one tap: coalesced reads of the channels-last
// input, coalesced writes) and cuda::gemm_rowmajor (matmul.cpp) multiplies
// them by the weight's [Og, taps * Cg] rows. Chunks bound the scratch to
// ~256 MB and start at multiples of 256 rows, so every operand cuBLASLt sees
// stays 256-byte aligned (its heuristic's default assumption); each group's
// weight block is packed at an aligned offset for the same reason. A 1x1
// convolution with unit stride and one group multiplies the input in place.
// Depthwise convolutions (one input channel per group) reduce over the taps
// alone, too little for a GEMM: a direct kernel gives each thread one
// output element (consecutive threads: consecutive channels, so the input
// reads coalesce). The index math (padding, dilations, flip) is
// backend/common/conv_geometry.h, shared with the CPU kernels. 16-bit
// convolutions go to cuDNN first where it can be loaded (cudnn_conv.cpp).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/common/conv_geometry.h"
#include "backend/cuda/cudnn_conv.h"
#include "backend/cuda/kernel_utils.cuh"
#include "core/ops_util.h"
#include "core/primitives_conv.h"

namespace kiln {
namespace cuda {

void gemm_rowmajor(Dtype t, const char* a, const char* b, bool b_is_nk, char* c, int64_t M, int64_t N, int64_t K);

namespace {

using conv::Geometry;

// Element strides of a [N, S.., C] operand (absent spatial axes: 0).
struct View5 {
  int64_t n, s[conv::kMaxSpatial], c;
};
View5 view5(const array& a) {
  const auto& st = a.desc()->strides;
  int nd = static_cast<int>(a.ndim()) - 2;
  View5 v{st[0], {0, 0, 0}, st.back()};
  for (int d = 0; d < nd; ++d) v.s[d] = st[1 + d];
  return v;
}

// The input offset (in the spatial axes; negative for flipped layouts) that
// output position p reads through tap k; false where it reads padding.
__device__ __forceinline__ bool source_offset(const Geometry& g, const View5& xs, const int64_t (&p)[3],
                                              const int64_t (&k)[3], int64_t& off) {
  off = 0;
#pragma unroll
  for (int d = 0; d < conv::kMaxSpatial; ++d) {
    const int64_t m = conv::conv_source(g, d, p[d], k[d]);
    if (m < 0) return false;
    off += m * xs.s[d];
  }
  return true;
}

// cols[w] for rows w of [rows, patch] of group q, output rows from r0: one
// warp per row. For each chunk of 32 taps, lane l works out where tap
// t0 + l reads (the index math once per tap, not per element), then the
// warp copies the chunk's taps x Cg elements in order (coalesced writes; the
// reads coalesce over channels) with each element's tap offset shuffled
// from the lane that found it. (A thread per element that redid the 64-bit
// index math each time ran at 6 TFLOP/s on the D3 conv row.) T is either
// the element type or, where channels are contiguous and 16-byte aligned, a
// 16-byte vector of them (uint4): then xs, cg and patch count vectors, and a
// lane moves 16 bytes a step (scalar bf16 steps ran the D3 row's im2col at
// 0.32 TB/s, 321 us of the row's 330).
template <typename T>
__device__ __forceinline__ T zero_value() {
  if constexpr (std::is_same_v<T, uint4>) {
    return make_uint4(0u, 0u, 0u, 0u);
  } else {
    return convert<T>(0.0f);
  }
}

template <typename T>
__global__ void im2col_kernel(const T* __restrict__ x, View5 xs, Geometry g, int64_t cg, int64_t patch, int64_t q,
                              int64_t r0, int64_t rows, T* __restrict__ cols) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t w = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5; w < rows; w += warps) {
    const int64_t r = r0 + w;
    int64_t p[3];
    conv::unravel3(r % g.out_points, g.out, p);
    const T* xb = x + (r / g.out_points) * xs.n + q * cg * xs.c;
    T* row = cols + w * patch;
    for (int64_t t0 = 0; t0 < g.taps; t0 += 32) {
      int64_t mine = 0;
      int valid = 0;
      if (t0 + lane < g.taps) {
        int64_t k[3];
        conv::unravel3(t0 + lane, g.k, k);
        valid = source_offset(g, xs, p, k, mine) ? 1 : 0;
      }
      const int64_t ntaps = g.taps - t0 < 32 ? g.taps - t0 : 32;
      // This lane's element: tap t of the chunk, channel c; it moves on by 32 a step.
      int64_t t = lane / cg, c = lane - t * cg;
      T* dst = row + t0 * cg;
      for (int64_t j0 = 0; j0 < ntaps * cg; j0 += 32) {
        const int src = t < ntaps ? static_cast<int>(t) : 0;
        const int64_t off = __shfl_sync(0xffffffffu, mine, src);
        const int ok = __shfl_sync(0xffffffffu, valid, src);
        if (t < ntaps) dst[t * cg + c] = ok ? xb[off + c * xs.c] : zero_value<T>();
        c += 32;
        while (c >= cg) {
          c -= cg;
          ++t;
        }
      }
    }
  }
}

// One output element per thread, the reduction over taps x Cg in registers.
template <typename T>
__global__ void conv_direct_kernel(const T* __restrict__ x, View5 xs, const T* __restrict__ w, View5 ws, Geometry g,
                                   T* __restrict__ out) {
  const int64_t total = g.N * g.out_points * g.O;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / g.O, o = i % g.O;
    int64_t p[3];
    conv::unravel3(r % g.out_points, g.out, p);
    const T* xb = x + (r / g.out_points) * xs.n + (o / g.Og) * g.Cg * xs.c;
    compute_t<T> acc = 0;
    for (int64_t t = 0; t < g.taps; ++t) {
      int64_t k[3];
      conv::unravel3(t, g.k, k);
      int64_t off;
      if (!source_offset(g, xs, p, k, off)) continue;
      const T* wr = w + o * ws.n + k[0] * ws.s[0] + k[1] * ws.s[1] + k[2] * ws.s[2];
      for (int64_t c = 0; c < g.Cg; ++c) acc += to_compute(xb[off + c * xs.c]) * to_compute(wr[c * ws.c]);
    }
    out[i] = convert<T>(acc);
  }
}

constexpr int kBlock = 256;
constexpr int64_t kChunkAlign = 256;  // rows
constexpr int64_t kScratchBytes = int64_t{256} << 20;

// The weight's group blocks ([Og, K.., Cg] each) packed row-major, block q
// at q * stride elements, stride a multiple of 128 elements.
const char* pack_weight(const array& w, const char* pw, const Geometry& g, int64_t& stride) {
  const auto& d = *w.desc();
  const int64_t item = static_cast<int64_t>(size_of(d.dtype));
  stride = (g.Og * g.patch + 127) / 128 * 128;
  char* dst = static_cast<char*>(scratch(g.groups * stride * item, "conv"));
  Shape block = d.shape;
  block[0] = static_cast<int>(g.Og);
  for (int64_t q = 0; q < g.groups; ++q) {
    copy_strided(pw + q * g.Og * d.strides[0] * item, d.dtype, block, d.strides, dst + q * stride * item, d.dtype,
                 row_major_strides(block), "conv");
  }
  return dst;
}

template <typename T>
void conv_gemm(const array& x, const char* px, const array& w, const char* pw, const Geometry& g, char* po,
               cudaStream_t s) {
  const Dtype t = x.dtype();
  const int64_t item = sizeof(T);
  const int64_t M = g.N * g.out_points;
  int64_t wstride = 0;
  const char* wp = pack_weight(w, pw, g, wstride);

  bool pointwise = g.taps == 1 && g.groups == 1 && detail::is_row_contiguous(x.shape(), x.desc()->strides) &&
                   reinterpret_cast<uintptr_t>(px) % 256 == 0;
  for (int d = 0; d < conv::kMaxSpatial; ++d) {
    pointwise = pointwise && g.stride[d] == 1 && g.pad_lo[d] == 0 && g.idil[d] == 1 && g.in[d] == g.out[d];
  }
  if (pointwise) {
    gemm_rowmajor(t, px, wp, true, po, M, g.O, g.patch);
    return;
  }

  int64_t chunk = kScratchBytes / (g.patch * item) / kChunkAlign * kChunkAlign;
  chunk = std::min(M, std::max(chunk, kChunkAlign));
  T* cols = static_cast<T*>(scratch(chunk * g.patch * item, "conv"));
  char* tmp = g.groups > 1 ? static_cast<char*>(scratch(chunk * g.Og * item, "conv")) : nullptr;
  const View5 xs = view5(x);
  // 16-byte steps where every offset a lane reads or writes is a whole
  // number of vectors: contiguous channels, strides and Cg multiples of
  // kVec elements, an aligned base (cols, from scratch, is 256-aligned).
  constexpr int64_t kVec = 16 / sizeof(T);
  bool vec = xs.c == 1 && g.Cg % kVec == 0 && xs.n % kVec == 0 && reinterpret_cast<uintptr_t>(px) % 16 == 0;
  View5 xv = xs;
  for (int d = 0; d < conv::kMaxSpatial; ++d) {
    vec = vec && xs.s[d] % kVec == 0;
    xv.s[d] = xs.s[d] / kVec;
  }
  xv.n = xs.n / kVec;
  for (int64_t r0 = 0; r0 < M; r0 += chunk) {
    const int64_t rows = std::min(chunk, M - r0);
    for (int64_t q = 0; q < g.groups; ++q) {
      if (vec) {
        im2col_kernel<uint4><<<grid_for(rows * 32, 2, kBlock), kBlock, 0, s>>>(
            reinterpret_cast<const uint4*>(px), xv, g, g.Cg / kVec, g.patch / kVec, q, r0, rows,
            reinterpret_cast<uint4*>(cols));
      } else {
        im2col_kernel<T><<<grid_for(rows * 32, 2, kBlock), kBlock, 0, s>>>(reinterpret_cast<const T*>(px), xs, g,
                                                                                 g.Cg, g.patch, q, r0, rows, cols);
      }
      KILN_CUDA_CHECK_LAUNCH("conv");
      const char* wq = wp + q * wstride * item;
      if (g.groups == 1) {
        gemm_rowmajor(t, reinterpret_cast<const char*>(cols), wq, true, po + r0 * g.O * item, rows, g.Og, g.patch);
      } else {
        gemm_rowmajor(t, reinterpret_cast<const char*>(cols), wq, true, tmp, rows, g.Og, g.patch);
        copy_strided(tmp, t, {static_cast<int>(rows), static_cast<int>(g.Og)}, {g.Og, 1},
                     po + (r0 * g.O + q * g.Og) * item, t, {g.O, 1}, "conv");
      }
    }
  }
}

}  // namespace
}  // namespace cuda

void Convolution::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& x = inputs[0];
  const array& w = inputs[1];
  cuda::allocate(out, "conv");
  if (out.size() == 0) return;
  const conv::Geometry g = conv::make_geometry(x.shape(), w.shape(), out.shape(), stride_, padding_lo_,
                                               kernel_dilation_, input_dilation_, groups_, flip_);
  char* po = cuda::out_ptr(out);
  cudaStream_t s = cuda::current_stream();
  if (g.patch == 0) {
    KILN_CUDA_CHECK("conv", cudaMemsetAsync(po, 0, out.nbytes(), s));
    return;
  }
  const char* px = cuda::in_ptr(x);
  const char* pw = cuda::in_ptr(w);
  cuda::dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (cuda::is_float_v<T>) {
      if (g.Cg == 1 && g.groups > 1) {
        const int64_t total = g.N * g.out_points * g.O;
        cuda::conv_direct_kernel<T><<<cuda::grid_for(total, 4, cuda::kBlock), cuda::kBlock, 0, s>>>(
            reinterpret_cast<const T*>(px), cuda::view5(x), reinterpret_cast<const T*>(pw), cuda::view5(w), g,
            reinterpret_cast<T*>(po));
        KILN_CUDA_CHECK_LAUNCH("conv");
      } else if (!cuda::cudnn_conv(x, px, w, pw, g, po, s)) {
        cuda::conv_gemm<T>(x, px, w, pw, g, po, s);
      }
    } else {
      throw Error(std::string("[conv] no GPU kernel for ") + dtype_name(out.dtype()));
    }
  });
}

}  // namespace kiln
