#pragma once
// CPU attention kernels (kiln::fast::scaled_dot_product_attention): the
// arguments eval_cpu hands them, and one entry point per instruction-set
// level (the same kernel text, attention_kernel.inc, compiled for each).
#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::cpu {

struct SdpaArgs {
  int batch, n_q_heads, n_kv_heads, q_len, kv_len, head_dim, v_head_dim;
  float scale;
  bool causal;
  Dtype dtype;  // of q, k, v, out (float32, float16 or bfloat16)
  // Element pointers and strides of [batch, head, position]; the head_dim
  // axis is contiguous.
  const void *q, *k, *v;
  int64_t q_strides[3], k_strides[3], v_strides[3];
  // Optional mask over [batch, q_head, q_pos, k_pos] (any strides, 0 for
  // broadcast axes): bool (false = masked) or additive in `dtype`.
  const void* mask = nullptr;
  bool mask_is_bool = false;
  int64_t mask_strides[4] = {};
  const float* sinks = nullptr;  // [n_q_heads] or null
  void* out;                     // row-major [batch, n_q_heads, q_len, v_head_dim]
};

void sdpa_scalar(const SdpaArgs& a);
void sdpa_avx2(const SdpaArgs& a);
void sdpa_avx512(const SdpaArgs& a);
void sdpa_avx512_bf16(const SdpaArgs& a);  // bf16 prefill tiles on vdpbf16ps

}  // namespace kiln::cpu
