// fast::rope on the GPU (kiln bench row D2 rope).
//
// One read and one write of x: a thread rotates one pair of features of
// one row (consecutive threads take consecutive pairs, so both the
// interleaved layout, pairs (2i, 2i+1), and the half-split layout, pairs
// (i, i + dims/2), read coalesced), or copies one of the features past
// `dims`. The angle (offset[b] + t) * scale * inv_freq_i is formed in float
// and sincosf evaluates it with full range reduction: positions reach 10^5,
// where the fast __sincosf would be off by far more than an ulp.
#include <cmath>

#include "backend/cuda/kernel_utils.cuh"
#include "core/ops_util.h"
#include "core/primitives.h"

namespace kiln {
namespace cuda {
namespace {

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

}  // namespace
}  // namespace cuda

void RoPE::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  const auto& dsc = *in.desc();
  const bool contiguous = detail::is_row_contiguous(dsc.shape, dsc.strides);
  if (contiguous && dsc.offset == 0) cuda::allocate_or_donate(out, in, "rope");
  else cuda::allocate(out, "rope");
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
