#pragma once
// The attention problem as the CUDA kernels (attention.cuh) and cuDNN's
// path (cudnn_attention.h) take it; host-only, so plain C++ files can use it.
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

}  // namespace kiln::cuda
