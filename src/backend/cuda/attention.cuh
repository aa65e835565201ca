#pragma once
// The CUDA attention kernels' arguments and launchers (attention.cu:
// decode, attention_prefill.cu: prefill); eval_gpu (attention.cu) picks one.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/attention_params.h"

namespace kiln::cuda {

// Whether a boolean mask that depends on the key alone (head and query
// strides 0, not causal) hides every key of [k0, k1) of batch item b: the
// decode kernels then skip that split (the compiled decode step masks its
// buffer's slots past the current position). Every thread of the block
// calls it.
__device__ __forceinline__ bool split_hidden(const SdpaParams& p, int b, int k0, int k1) {
  if (!p.mask || !p.mask_is_bool || p.causal || p.mask_strides[1] != 0 || p.mask_strides[2] != 0) return false;
  const bool* m = static_cast<const bool*>(p.mask) + b * p.mask_strides[0];
  int any = 0;
  for (int j = k0 + static_cast<int>(threadIdx.x); j < k1; j += static_cast<int>(blockDim.x)) {
    any |= m[j * p.mask_strides[3]] ? 1 : 0;
  }
  return !__syncthreads_or(any);
}

// out[0, D) = the mean of V's rows over all kv_len keys (batch b, KV head
// kvh): the result of a fully masked row (all scores the same -FLT_MAX).
template <typename T>
__device__ void mean_of_v(const SdpaParams& p, int b, int kvh, int D, T* out) {
  const T* v = static_cast<const T*>(p.v) + b * p.v_strides[0] + kvh * p.v_strides[1];
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < p.kv_len; ++j) acc += static_cast<float>(v[j * p.v_strides[2] + d]);
    out[d] = static_cast<T>(acc / static_cast<float>(p.kv_len));
  }
}

// Rows (query heads per KV head x query positions) the decode kernel takes.
inline constexpr int kDecodeMaxRows = 16;

// The CUDA-core decode (attention.cu): T float, __half or __nv_bfloat16.
// `scratch` sized by decode_scratch_bytes.
size_t decode_scratch_bytes(const SdpaParams& p, int splits);
int decode_splits(const SdpaParams& p, int sm_count);
template <typename T>
void launch_sdpa_decode(const SdpaParams& p, int splits, float* scratch, cudaStream_t s);
// The tensor-core decode (attention_decode.cu): T __half or __nv_bfloat16,
// head_dim 64, 80, 96, 128 or 256; `scratch` sized by decode_tc_scratch_bytes.
size_t decode_tc_scratch_bytes(const SdpaParams& p, int splits);
int decode_tc_splits(const SdpaParams& p, int sm_count);
template <typename T>
void launch_sdpa_decode_tc(const SdpaParams& p, int splits, float* scratch, cudaStream_t s);
// T: __half or __nv_bfloat16; head_dim 64, 80, 96, 128 or 256.
template <typename T>
void launch_sdpa_prefill(const SdpaParams& p, cudaStream_t s);

// Whether the session-9 tensor-core decode and the pipelined prefill run
// (the default; KILN_CUDA_TC_ATTENTION=0 turns them off: see attention.cu).
bool tc_attention_enabled();

}  // namespace kiln::cuda
