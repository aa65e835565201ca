// scaled_matmul's fallback on the GPU: each fp8 operand dequantized to a
// row-major float32 copy with its scale folded in (the same math as the
// CPU kernel, src/backend/common/scaled_mm.h), then the float32 GEMM.
// Used only for the shapes and layouts cuBLASLt's FP8 path refuses
// (scaled_mm.cpp); one thread per element, memory bound and tiny beside
// the GEMM it feeds (kiln bench row fp8_gemm times the cuBLASLt path).
#include "backend/common/scaled_mm.h"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/scaled_mm.h"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void dequantize_kernel(const T* __restrict__ x, int64_t R, int64_t C, int64_t rs, int64_t cs, bool is_a,
                                  bool block, const float* __restrict__ scales, int64_t blocks,
                                  float* __restrict__ dst) {
  const int64_t n = R * C;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / C, c = i % C;
    const float s = is_a ? smm::scale_a(scales, block, blocks, r, c) : smm::scale_b(scales, block, blocks, r, c);
    dst[i] = smm::scaled(static_cast<float>(x[r * rs + c * cs]), s);
  }
}

}  // namespace

void scaled_mm_dequantize(const char* x, Dtype t, int64_t R, int64_t C, int64_t rs, int64_t cs, bool is_a,
                          bool block, const float* scales, int64_t blocks, float* dst) {
  constexpr int kBlock = 256;
  const unsigned grid = grid_for(R * C, 4, kBlock);
  cudaStream_t s = current_stream();
  if (t == Dtype::float8_e4m3fn) {
    dequantize_kernel<<<grid, kBlock, 0, s>>>(reinterpret_cast<const float8_e4m3fn_t*>(x), R, C, rs, cs, is_a, block,
                                              scales, blocks, dst);
  } else {
    dequantize_kernel<<<grid, kBlock, 0, s>>>(reinterpret_cast<const float8_e5m2_t*>(x), R, C, rs, cs, is_a, block,
                                              scales, blocks, dst);
  }
  KILN_CUDA_CHECK_LAUNCH("scaled_matmul");
}

}  // namespace kiln::cuda
