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

// MR x 16 NV tile (14 x 32; 8 x 48 for small M, as the fp32 kernels).
template <int MR, int NV>
KILN_TARGET_AVX512_BF16 void kernel_bf16_avx512(int64_t kc_padded, const void* a_v, const void* b_v, void* c_v,
                                                int64_t ldc, int mr, int nr, int mode) {
  const int32_t* a = static_cast<const int32_t*>(a_v);  // bf16 pairs
  const __m512i* b = static_cast<const __m512i*>(b_v);  // 16 columns x 2 k
  const int64_t cbytes = mode == kStoreBf16 ? 2 : 4;
  char* c = static_cast<char*>(c_v);
#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i) {
    if (i < mr) {
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) _mm_prefetch(c + i * ldc * cbytes + 64 * v, _MM_HINT_T0);
    }
  }
  __m512 acc[MR][NV];
#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();

  const int64_t kpairs = kc_padded / 2;
#pragma GCC unroll 2
  for (int64_t kp = 0; kp < kpairs; ++kp) {
    __m512bh bv[NV];
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_load_si512(b + v);
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) {
      __m512bh ai = (__m512bh)_mm512_set1_epi32(a[i]);
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], ai, bv[v]);
    }
    a += MR;
    b += NV;
  }

#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i) {
    if (i < mr) {
      char* row = c + i * ldc * cbytes;
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) {
        const __mmask16 m = vec_mask(nr, v);
        if (m) store_tile_segment(row + 16 * v * cbytes, acc[i][v], m, mode);
      }
    }
  }
}

}  // namespace

// Block sizes (K counted in bf16 elements): the B micro-panel is
// KC x 32 x 2 B = 32 KB at KC=512, the same L1 footprint as the fp32
// kernel's KC=256, and each B byte now carries twice the work.
const KernelSpec& bf16_dot_avx512_spec() {
  static const KernelSpec s{"bf16_dot_avx512_14x32", kMr, kNr, 512, 14 * 24, 4096, 2, 2, 2,
                            kernel_bf16_avx512<kMr, 2>, pack_bf16_pair_panel_avx512<kMr>,
                            pack_bf16_pair_panel_avx512<kNr>};
  return s;
}

// 8 x 48 for small M: KC x 48 x 2 B = 30 KB at KC = 320.
const KernelSpec& bf16_dot_avx512_small_m_spec() {
  static const KernelSpec s{"bf16_dot_avx512_8x48", 8, 48, 320, 8 * 24, 4080, 2, 2, 2,
                            kernel_bf16_avx512<8, 3>, pack_bf16_pair_panel_avx512<8>,
                            pack_bf16_pair_panel_avx512<48>};
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
  if (t == CpuTarget::amx_bf16 && (try_amx_small_m(args, out_bf16) || try_amx_small_product(args, out_bf16))) return;
  if (t >= CpuTarget::avx512_bf16 && try_gemv_bf16_dot(args, out_bf16)) return;
  if (t >= CpuTarget::avx512 && try_gemv_avx512(args, true, true, out_bf16)) return;
  if (t == CpuTarget::amx_bf16) {
    run_amx_gemm(args, out_bf16);
  } else if (t == CpuTarget::avx512_bf16) {
    const bool small_m = prefer_small_m_tile(args.M, args.N);
    run_blocked_gemm(args, small_m ? bf16_dot_avx512_small_m_spec() : bf16_dot_avx512_spec(), out_bf16);
  } else if (t == CpuTarget::avx512) {
    run_blocked_gemm(args, bf16_to_f32_avx512_spec(), out_bf16);
  } else {
    // The library's baseline is x86-64-v3, so "scalar" also runs the AVX2 kernel.
    run_blocked_gemm(args, bf16_to_f32_avx2_spec(), out_bf16);
  }
}

bool gemm_bf16_columns(const GemmArgs& args, Dtype out_dtype, const BColumnsFn& columns) {
  if (out_dtype != Dtype::float32 && out_dtype != Dtype::bfloat16)
    throw std::invalid_argument("gemm_bf16_columns: output dtype must be float32 or bfloat16");
  if (cpu_target() != CpuTarget::amx_bf16) return false;
  if (args.M <= 0 || args.N <= 0) return true;
  const bool out_bf16 = out_dtype == Dtype::bfloat16;
  if (args.K > 0 && gemm_detail::try_amx_small_m(args, out_bf16, &columns)) return true;
  gemm_detail::run_amx_gemm(args, out_bf16, &columns);
  return true;
}

}  // namespace kiln::cpu
