// Integer (and bool) matmul: exact, wrapping on overflow like the CPU; a
// simple kernel, since integer products are rarely hot.
#include "backend/cuda/kernel_utils.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void int_matmul(const T* a, const T* b, T* c, int64_t M, int64_t N, int64_t K) {
  int64_t batch = blockIdx.z;
  int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= M || j >= N) return;
  const T* ar = a + batch * M * K + i * K;
  const T* bc = b + batch * K * N + j;
  if constexpr (std::is_same_v<T, bool>) {
    bool acc = false;
    for (int64_t k = 0; k < K; ++k) acc = acc || (ar[k] && bc[k * N]);
    c[batch * M * N + i * N + j] = acc;
  } else {
    using U = ko::wrap_unsigned_t<T>;
    U acc = 0;
    for (int64_t k = 0; k < K; ++k) acc += static_cast<U>(ar[k]) * static_cast<U>(bc[k * N]);
    c[batch * M * N + i * N + j] = static_cast<T>(acc);
  }
}

}  // namespace

void integer_matmul(Dtype t, const char* a, const char* b, char* c, int64_t batch, int64_t M, int64_t N, int64_t K) {
  dim3 block(32, 8);
  dim3 grid(static_cast<unsigned>((N + 31) / 32), static_cast<unsigned>((M + 7) / 8), static_cast<unsigned>(batch));
  cudaStream_t s = current_stream();
  dispatch(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) {
      int_matmul<T><<<grid, block, 0, s>>>(reinterpret_cast<const T*>(a), reinterpret_cast<const T*>(b),
                                           reinterpret_cast<T*>(c), M, N, K);
    } else {
      throw Error(std::string("[matmul] unsupported dtype ") + dtype_name(t));
    }
  });
  KILN_CUDA_CHECK_LAUNCH("matmul");
}

}  // namespace kiln::cuda
