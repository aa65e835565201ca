#pragma once
// The CUDA attention kernels' arguments and launchers (attention.cu:
// decode, attention_prefill.cu: prefill); eval_gpu (attention.cu) picks one.
#include <cuda_runtime.h>

#include <cstdint>

namespace kiln::cuda {

// Element pointers and strides; q/k/v rows (the head_dim axis) contiguous
// and 16-byte aligned, the mask read element by element with any strides.
struct SdpaParams {
  int batch, n_q_heads, n_kv_heads, q_len, kv_len, head_dim;
  float scale;
  bool causal;
  const void *q, *k, *v;
  long long q_strides[3], k_strides[3], v_strides[3];  // batch, head, position
  const void* mask;                                    // null, bool, or the element type
  bool mask_is_bool;
  long long mask_strides[4];
  const void* sinks;  // [n_q_heads] of the element type, or null
  long long sinks_stride;
  void* out;           // row-major [batch, n_q_heads, q_len, head_dim]
};

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
