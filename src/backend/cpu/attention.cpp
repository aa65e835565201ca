// ScaledDotProductAttention on the CPU: gathers the layouts (any strides
// with a contiguous head_dim; other layouts are copied) and runs the kernel
// of the CPU's instruction-set level (attention_kernel.inc).
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/copy.h"
#include "backend/cpu/cpu_features.h"
#include "core/allocator.h"
#include "core/array_desc.h"
#include "core/primitives_attention.h"

namespace kiln {

namespace {

// A's data with a contiguous last axis: its own buffer, or a row-major copy
// held by `keep`.
const char* last_axis_contiguous(const array& a, std::shared_ptr<Buffer>& keep, Strides& strides) {
  const auto& d = *a.desc();
  if (d.shape.back() <= 1 || d.strides.back() == 1) {
    strides = d.strides;
    return detail::data_ptr(a);
  }
  keep = allocator::malloc(a.nbytes(), "scaled_dot_product_attention");
  strides = row_major_strides(d.shape);
  cpu::copy_strided(detail::data_ptr(a), d.dtype, d.shape, d.strides, keep->ptr(), d.dtype, strides);
  return static_cast<const char*>(keep->ptr());
}

}  // namespace

void ScaledDotProductAttention::eval_cpu(const std::vector<array>& inputs, array& out) {
  detail::allocate(out, "scaled_dot_product_attention");
  const array &q = inputs[0], &k = inputs[1], &v = inputs[2];
  if (out.size() == 0) return;
  if (k.shape(2) == 0) {  // no keys (force_fused): the fallback's empty matmul gives zeros
    std::memset(detail::data_ptr(out), 0, out.nbytes());
    return;
  }
  cpu::SdpaArgs a{};
  a.batch = q.shape(0);
  a.n_q_heads = q.shape(1);
  a.q_len = q.shape(2);
  a.head_dim = q.shape(3);
  a.n_kv_heads = k.shape(1);
  a.kv_len = k.shape(2);
  a.v_head_dim = v.shape(3);
  a.scale = scale_;
  a.causal = causal_;
  a.dtype = q.dtype();
  std::shared_ptr<Buffer> keep[3];
  Strides st[3];
  const void* ptrs[3];
  for (int i = 0; i < 3; ++i) ptrs[i] = last_axis_contiguous(inputs[i], keep[i], st[i]);
  a.q = ptrs[0];
  a.k = ptrs[1];
  a.v = ptrs[2];
  for (int j = 0; j < 3; ++j) {
    a.q_strides[j] = st[0][j];
    a.k_strides[j] = st[1][j];
    a.v_strides[j] = st[2][j];
  }
  if (has_mask_) {
    const array& m = inputs[3];
    a.mask = detail::data_ptr(m);
    a.mask_is_bool = m.dtype() == bool_;
    for (int j = 0; j < 4; ++j) a.mask_strides[j] = m.desc()->strides[j];
  }
  std::vector<float> sinks;
  if (has_sinks_) {
    const array& s = inputs.back();
    sinks.resize(a.n_q_heads);
    Strides dst = {1};
    cpu::copy_strided(detail::data_ptr(s), s.dtype(), s.shape(), s.desc()->strides, sinks.data(), float32, dst);
    a.sinks = sinks.data();
  }
  a.out = detail::data_ptr(out);
  const cpu::CpuTarget level = cpu::cpu_target();
  if (level >= cpu::CpuTarget::avx512_bf16) {
    cpu::sdpa_avx512_bf16(a);
  } else if (level >= cpu::CpuTarget::avx512) {
    cpu::sdpa_avx512(a);
  } else if (level >= cpu::CpuTarget::avx2) {
    cpu::sdpa_avx2(a);
  } else {
    cpu::sdpa_scalar(a);
  }
}

}  // namespace kiln
