// bf16 GEMM: bf16 inputs, fp32 accumulation, fp32 or bf16 output.
//
// With AVX512-BF16 the micro-kernel uses vdpbf16ps, which multiplies pairs
// of adjacent bf16 values (k, k+1) and adds both products into one fp32
// lane: twice the FLOPs of an fp32 FMA per instruction. Packing therefore
// stores K in pairs: A as 32-bit (a[i][k], a[i][k+1]) groups that are
// broadcast, B as 16 columns x 2 k per zmm (see pack_bf16_pair_panel).
// Same 14 x 32 register tile as the fp32 kernel: 28 accumulators, 2 B
// vectors, A pairs broadcast from memory.
//
// Without AVX512-BF16 the fp32 kernels run it, widening bf16 while packing.
#include <immintrin.h>

#include <stdexcept>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gemm_avx512_store.h"
#include "backend/cpu/gemm_internal.h"
#include "backend/cpu/gemm_pack_avx512.h"
#include "backend/cpu/gemm_packing.h"

namespace kiln::cpu {
namespace gemm_detail {
namespace {

constexpr int kMr = 14, kNr = 32;

KILN_TARGET_AVX512_BF16 void kernel_bf16_avx512_14x32(int64_t kc_padded, const void* a_v, const void* b_v,
                                                      void* c_v, int64_t ldc, int mr, int nr, int mode) {
  const int32_t* a = static_cast<const int32_t*>(a_v);  // bf16 pairs
  const __m512i* b = static_cast<const __m512i*>(b_v);  // 16 columns x 2 k
  const int64_t cbytes = mode == kStoreBf16 ? 2 : 4;
  char* c = static_cast<char*>(c_v);
#pragma GCC unroll 14
  for (int i = 0; i < kMr; ++i) {
    if (i < mr) {
      _mm_prefetch(c + i * ldc * cbytes, _MM_HINT_T0);
      _mm_prefetch(c + i * ldc * cbytes + 64, _MM_HINT_T0);
    }
  }
  __m512 acc[kMr][2];
#pragma GCC unroll 14
  for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();

  const int64_t kpairs = kc_padded / 2;
#pragma GCC unroll 2
  for (int64_t kp = 0; kp < kpairs; ++kp) {
    __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 1);
#pragma GCC unroll 14
    for (int i = 0; i < kMr; ++i) {
      __m512bh ai = (__m512bh)_mm512_set1_epi32(a[i]);
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
    }
    a += kMr;
    b += 2;
  }

  __mmask16 m0, m1;
  half_masks(nr, &m0, &m1);
#pragma GCC unroll 14
  for (int i = 0; i < kMr; ++i) {
    if (i < mr) {
      char* row = c + i * ldc * cbytes;
      store_tile_segment(row, acc[i][0], m0, mode);
      if (m1) store_tile_segment(row + 16 * cbytes, acc[i][1], m1, mode);
    }
  }
}

}  // namespace

// Block sizes (K counted in bf16 elements): the B micro-panel is
// KC x 32 x 2 B = 32 KB at KC=512, the same L1 footprint as the fp32
// kernel's KC=256, and each B byte now carries twice the work.
const KernelSpec& bf16_dot_avx512_spec() {
  static const KernelSpec s{"bf16_dot_avx512_14x32", kMr, kNr, 512, 14 * 24, 4096, 2, 2, 2,
                            kernel_bf16_avx512_14x32, pack_bf16_pair_panel_avx512<kMr>,
                            pack_bf16_pair_panel_avx512<kNr>};
  return s;
}

}  // namespace gemm_detail

void gemm_bf16(const GemmArgs& args, Dtype out_dtype) {
  using namespace gemm_detail;
  if (out_dtype != Dtype::float32 && out_dtype != Dtype::bfloat16)
    throw std::invalid_argument("gemm_bf16: output dtype must be float32 or bfloat16");
  const bool out_bf16 = out_dtype == Dtype::bfloat16;
  if (args.M <= 0 || args.N <= 0) return;
  const CpuTarget t = cpu_target();
  if (t >= CpuTarget::avx512 && try_gemv_avx512(args, true, true, out_bf16)) return;
  if (t == CpuTarget::amx_bf16) {
    run_blocked_gemm(args, bf16_amx_spec(), out_bf16);
  } else if (t == CpuTarget::avx512_bf16) {
    run_blocked_gemm(args, bf16_dot_avx512_spec(), out_bf16);
  } else if (t == CpuTarget::avx512) {
    run_blocked_gemm(args, bf16_to_f32_avx512_spec(), out_bf16);
  } else {
    // The library's baseline is x86-64-v3, so "scalar" also runs the AVX2 kernel.
    run_blocked_gemm(args, bf16_to_f32_avx2_spec(), out_bf16);
  }
}

}  // namespace kiln::cpu
