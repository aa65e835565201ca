// scaled_matmul on the CPU (kiln bench row fp8_gemm, --device cpu). Why this
// shape: no x86 CPU multiplies fp8 natively, and an fp8 operand decoded to
// float32 is exact, so the work is the float32 GEMM's; dequantizing both
// operands once (the scale folded in, src/backend/common/scaled_mm.h) costs
// O(MK + KN) against the GEMM's O(MNK) and lets the packed AVX-512 sgemm
// (gemm_f32, all cores) do the rest. The output is rounded once from the
// float32 accumulators.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/common/scaled_mm.h"
#include "backend/cpu/cast.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/threading.h"
#include "core/array_desc.h"
#include "core/primitives_scaled_mm.h"

namespace kiln {
namespace cpu {
namespace {

// x [R, C] (strided fp8) -> row-major float32 with each element times its
// scale; scale(r, c) picks the scale.
template <typename T, typename Scale>
void dequantize_rows(const array& x, float* dst, Scale scale) {
  const auto& d = *x.desc();
  const T* src = reinterpret_cast<const T*>(detail::data_ptr(x));
  const int64_t R = d.shape[0], C = d.shape[1], rs = d.strides[0], cs = d.strides[1];
  parallel_for(R, std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      for (int64_t c = 0; c < C; ++c) {
        dst[r * C + c] = smm::scaled(static_cast<float>(src[r * rs + c * cs]), scale(r, c));
      }
    }
  });
}

template <typename T>
void dequantize_fp8(const array& x, float* dst, bool is_a, bool block, const float* s, int64_t blocks) {
  if (is_a) {
    dequantize_rows<T>(x, dst, [&](int64_t m, int64_t k) { return smm::scale_a(s, block, blocks, m, k); });
  } else {
    dequantize_rows<T>(x, dst, [&](int64_t k, int64_t n) { return smm::scale_b(s, block, blocks, k, n); });
  }
}

void dequantize_any(const array& x, float* dst, bool is_a, bool block, const float* s, int64_t blocks) {
  if (x.dtype() == float8_e4m3fn) {
    dequantize_fp8<float8_e4m3fn_t>(x, dst, is_a, block, s, blocks);
  } else {
    dequantize_fp8<float8_e5m2_t>(x, dst, is_a, block, s, blocks);
  }
}

}  // namespace
}  // namespace cpu

void ScaledMatmul::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& a = inputs[0];
  const array& b = inputs[1];
  detail::allocate(out, "scaled_matmul");
  const int64_t M = a.shape(0), K = a.shape(1), N = b.shape(1);
  if (out.size() == 0) return;
  if (K == 0) {
    std::memset(detail::data_ptr(out), 0, out.nbytes());
    return;
  }
  const float* sa = reinterpret_cast<const float*>(detail::data_ptr(inputs[2]));
  const float* sb = reinterpret_cast<const float*>(detail::data_ptr(inputs[3]));
  std::vector<float> da(static_cast<size_t>(M * K)), db(static_cast<size_t>(K * N));
  cpu::dequantize_any(a, da.data(), true, block_, sa, smm::blocks(K));
  cpu::dequantize_any(b, db.data(), false, block_, sb, smm::blocks(N));
  std::vector<float> acc;
  float* c = reinterpret_cast<float*>(detail::data_ptr(out));
  if (out.dtype() != float32) {
    acc.resize(static_cast<size_t>(M * N));
    c = acc.data();
  }
  cpu::gemm_f32({M, N, K, da.data(), K, 1, db.data(), N, 1, c, N, cpu_threads()});
  if (out.dtype() != float32) cpu::cast_contiguous(c, float32, detail::data_ptr(out), out.dtype(), out.size());
}

}  // namespace kiln
