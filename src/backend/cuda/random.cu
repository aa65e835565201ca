// Arange and the random bit generator: the same Philox-4x32-10 bits as the
// CPU (backend/common/philox.h is shared), element i = word i % 4 of block i / 4.
#include "backend/common/philox.h"
#include "backend/cuda/kernel_utils.cuh"
#include "core/primitives.h"

namespace kiln {
namespace cuda {
namespace {

template <typename T>
__global__ void arange_kernel(T* out, double start, double step, int64_t n) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = convert<T>(start + static_cast<double>(i) * step);
  }
}

__global__ void random_bits_kernel(const uint32_t* key, int64_t key_stride, uint32_t* out, int64_t n) {
  uint32_t k0 = key[0], k1 = key[key_stride];
  int64_t blocks = (n + 3) / 4;
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += stride) {
    philox::Block r = philox::generate(k0, k1, static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32));
    if (b * 4 + 4 <= n && (reinterpret_cast<uintptr_t>(out) & 15) == 0) {
      reinterpret_cast<uint4*>(out)[b] = make_uint4(r.v[0], r.v[1], r.v[2], r.v[3]);
    } else {
      for (int j = 0; j < 4 && b * 4 + j < n; ++j) out[b * 4 + j] = r.v[j];
    }
  }
}

}  // namespace
}  // namespace cuda

void Arange::eval_gpu(const std::vector<array>&, array& out) {
  cuda::allocate(out, "arange");
  int64_t n = static_cast<int64_t>(out.size());
  if (n == 0) return;
  char* po = cuda::out_ptr(out);
  cudaStream_t s = cuda::current_stream();
  double start = start_, step = step_;
  cuda::dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::arange_kernel<T><<<cuda::grid_for(n, 4, 256), 256, 0, s>>>(reinterpret_cast<T*>(po), start, step, n);
  });
  KILN_CUDA_CHECK_LAUNCH("arange");
}

void RandomBits::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& key = inputs[0];
  cuda::allocate(out, "random");
  int64_t n = static_cast<int64_t>(out.size());
  if (n == 0) return;
  const auto& kd = *key.desc();
  const char* pk = cuda::in_ptr(key);
  char* po = cuda::out_ptr(out);
  int64_t ks = kd.strides.empty() ? 1 : kd.strides[0];
  cuda::random_bits_kernel<<<cuda::grid_for((n + 3) / 4, 1, 256), 256, 0, cuda::current_stream()>>>(
      reinterpret_cast<const uint32_t*>(pk), ks, reinterpret_cast<uint32_t*>(po), n);
  KILN_CUDA_CHECK_LAUNCH("random");
}

}  // namespace kiln
